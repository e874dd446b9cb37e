package buildctx

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/agentenv/agentenv"
)

// stage is one FROM instruction of a Dockerfile.
type stage struct {
	line   int // of the FROM, from 1
	first  int // index of its first physical line
	last   int // index of its last physical line
	flags  []string
	image  string // as written
	base   string // the image it builds from once arguments are expanded and the base map applied; "" for scratch or an earlier stage
	name   string // its AS name, lower-cased; "" if none
	mapped bool   // base came from the base map
}

// dockerfile is a parsed Dockerfile: its physical lines and its FROM instructions.
type dockerfile struct {
	lines  []string // without their line ends
	stages []stage
	escape byte
}

var (
	directive = regexp.MustCompile(`^#\s*([a-zA-Z][a-zA-Z0-9_]*)\s*=\s*(.*?)\s*$`)
	imageRef  = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._/:@-]*$`)
	stageName = regexp.MustCompile(`^[a-z][a-z0-9._-]*$`)
	argRef    = regexp.MustCompile(`\$(?:\{([A-Za-z_][A-Za-z0-9_]*)\}|([A-Za-z_][A-Za-z0-9_]*))`)
)

// parse reads src, the Dockerfile that messages call name: its escape directive, its
// instructions (continuation lines joined, comments inside them dropped), the global ARGs
// before the first FROM (their defaults overridden by args), and each FROM, its image mapped
// through baseMap. Errors name name and the line, and wrap ErrInvalid.
func parse(name string, src []byte, args, baseMap map[string]string) (*dockerfile, error) {
	text := strings.ReplaceAll(string(src), "\r\n", "\n")
	text = strings.TrimSuffix(text, "\n")
	d := &dockerfile{escape: '\\'}
	if text != "" {
		d.lines = strings.Split(text, "\n")
	}
	bad := func(line int, format string, a ...any) error {
		return fmt.Errorf("%s:%d: %s: %w", name, line, fmt.Sprintf(format, a...), agentenv.ErrInvalid)
	}
	i := 0
	for ; i < len(d.lines); i++ { // parser directives, only at the very top
		m := directive.FindStringSubmatch(d.lines[i])
		if m == nil {
			break
		}
		if strings.EqualFold(m[1], "escape") {
			if m[2] != `\` && m[2] != "`" {
				return nil, bad(i+1, "escape directive %q: want \\ or `", m[2])
			}
			d.escape = m[2][0]
		}
	}
	global := map[string]string{} // ARGs before the first FROM, by name
	stages := map[string]bool{}   // earlier stage names
	for i < len(d.lines) {
		first := i
		trimmed := strings.TrimSpace(d.lines[i])
		if trimmed == "" || trimmed[0] == '#' {
			i++
			continue
		}
		// One instruction: this line and the continuation lines after it.
		var sb strings.Builder
		for {
			l := strings.TrimRight(d.lines[i], " \t")
			t := strings.TrimSpace(l)
			switch {
			case i > first && (t == "" || t[0] == '#'):
				// a comment or empty line inside an instruction is dropped
			case len(l) > 0 && l[len(l)-1] == d.escape:
				sb.WriteString(l[:len(l)-1])
			default:
				sb.WriteString(l)
				i++
				goto done
			}
			i++
			if i == len(d.lines) {
				goto done
			}
		}
	done:
		words := strings.Fields(sb.String())
		if len(words) == 0 {
			continue
		}
		kw := strings.ToUpper(words[0])
		line := first + 1
		switch {
		case kw == "FROM":
			if strings.ContainsRune(sb.String(), rune(d.escape)) {
				return nil, bad(line, "FROM: the escape character %q inside the line", d.escape)
			}
			st, err := parseFrom(words[1:], global, args, baseMap, stages)
			if err != nil {
				return nil, bad(line, "FROM: %v", err)
			}
			st.line, st.first, st.last = line, first, i-1
			if st.name != "" {
				stages[st.name] = true
			}
			d.stages = append(d.stages, st)
		case len(d.stages) > 0:
		case kw == "ARG":
			for _, w := range words[1:] {
				k, v, _ := strings.Cut(w, "=")
				global[k] = unquote(v)
			}
		default:
			return nil, bad(line, "%s before the first FROM: only ARG may come first", words[0])
		}
	}
	if len(d.stages) == 0 {
		return nil, fmt.Errorf("%s: no FROM line: %w", name, agentenv.ErrInvalid)
	}
	return d, nil
}

// parseFrom parses the words after FROM: [--FLAG=V …] IMAGE [AS NAME].
func parseFrom(words []string, global, args, baseMap map[string]string, stages map[string]bool) (stage, error) {
	var st stage
	for len(words) > 0 && strings.HasPrefix(words[0], "--") {
		st.flags, words = append(st.flags, words[0]), words[1:]
	}
	switch {
	case len(words) == 0:
		return st, fmt.Errorf("want an image")
	case len(words) == 3 && strings.EqualFold(words[1], "AS"):
		st.name = strings.ToLower(words[2])
		if !stageName.MatchString(st.name) {
			return st, fmt.Errorf("stage name %q: want a letter, then letters, digits, '.', '_' or '-'", words[2])
		}
		if stages[st.name] {
			return st, fmt.Errorf("stage name %q is used twice", words[2])
		}
	case len(words) != 1:
		return st, fmt.Errorf("want FROM [--platform=P] IMAGE [AS NAME], got %q", strings.Join(words, " "))
	}
	st.image = words[0]
	img := argRef.ReplaceAllStringFunc(st.image, func(ref string) string {
		m := argRef.FindStringSubmatch(ref)
		k := m[1] + m[2]
		v, declared := global[k]
		if a, ok := args[k]; ok && declared {
			v = a
		}
		return v
	})
	switch {
	case img == "" || strings.ContainsAny(img, "${}"):
		return st, fmt.Errorf("image %q: empty or not expandable with the build's arguments", st.image)
	case stages[strings.ToLower(img)], strings.EqualFold(img, "scratch"):
		return st, nil
	case !imageRef.MatchString(img):
		return st, fmt.Errorf("image %q: not an image reference", img)
	}
	st.base = img
	if to, ok := lookup(baseMap, img); ok {
		st.base, st.mapped = to, true
	}
	return st, nil
}

// MapImage finds image in baseMap as a build's FROM does: as written, else as a key that names
// the same image (docker.io/library/ and :latest implied). It reports false when no key does.
func MapImage(baseMap map[string]string, image string) (string, bool) { return lookup(baseMap, image) }

// lookup finds image in baseMap: as written, else as a key that names the same image
// (docker.io/library/ and :latest implied).
func lookup(baseMap map[string]string, image string) (string, bool) {
	if to, ok := baseMap[image]; ok {
		return to, true
	}
	want := normalize(image)
	for _, k := range slices.Sorted(maps.Keys(baseMap)) {
		if normalize(k) == want {
			return baseMap[k], true
		}
	}
	return "", false
}

// normalize spells an image reference in full: registry, repository path, tag (latest if none).
func normalize(ref string) string {
	ref = strings.ToLower(ref)
	name, digest, _ := strings.Cut(ref, "@")
	tag := ""
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		name, tag = name[:i], name[i+1:]
	}
	if tag == "" && digest == "" {
		tag = "latest"
	}
	first, _, hasSlash := strings.Cut(name, "/")
	if !hasSlash || !strings.ContainsAny(first, ".:") && first != "localhost" {
		if !hasSlash {
			name = "library/" + name
		}
		name = "docker.io/" + name
	}
	out := name
	if tag != "" {
		out += ":" + tag
	}
	if digest != "" {
		out += "@" + digest
	}
	return out
}

// unquote drops one pair of surrounding quotes.
func unquote(s string) string {
	if len(s) >= 2 && (s[0] == '"' || s[0] == '\'') && s[len(s)-1] == s[0] {
		return s[1 : len(s)-1]
	}
	return s
}

// Bases returns the images b's Dockerfile builds from, once its arguments are expanded and
// its base map applied, each once, in order: what the builder must find on the engine. An
// earlier stage and scratch are not among them.
func Bases(b agentenv.Build) ([]string, error) {
	df, err := Dockerfile(b)
	if err != nil {
		return nil, err
	}
	src, err := readDockerfile(b, df)
	if err != nil {
		return nil, err
	}
	d, err := parse(name(b, df), src, b.Args, b.BaseMap)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, st := range d.stages {
		if st.base != "" && !slices.Contains(out, st.base) {
			out = append(out, st.base)
		}
	}
	return out, nil
}

// Rewrite returns the Dockerfile src (called name in messages) with every FROM's image mapped
// through baseMap (flags such as --platform and AS NAME kept; a FROM of an earlier stage or
// scratch as it is) and, right after every FROM, a LABEL line that sets labels, so that every
// container and image of every stage carries them. Its other lines are kept as written.
func Rewrite(name string, src []byte, args, baseMap, labels map[string]string) ([]byte, error) {
	d, err := parse(name, src, args, baseMap)
	if err != nil {
		return nil, err
	}
	label := ""
	if len(labels) > 0 {
		var sb strings.Builder
		sb.WriteString("LABEL")
		for _, k := range slices.Sorted(maps.Keys(labels)) {
			fmt.Fprintf(&sb, " %s=%s", quote(k, d.escape), quote(labels[k], d.escape))
		}
		label = sb.String()
	}
	var out strings.Builder
	next := 0
	for i := 0; i < len(d.lines); i++ {
		if next < len(d.stages) && d.stages[next].first == i {
			st := d.stages[next]
			next++
			words := append([]string{"FROM"}, st.flags...)
			image := st.image
			if st.mapped {
				image = st.base
			}
			words = append(words, image)
			if st.name != "" {
				words = append(words, "AS", st.name)
			}
			out.WriteString(strings.Join(words, " ") + "\n")
			if label != "" {
				out.WriteString(label + "\n")
			}
			i = st.last
			continue
		}
		out.WriteString(d.lines[i] + "\n")
	}
	return []byte(out.String()), nil
}

// quote quotes s as one word of a Dockerfile LABEL: in double quotes, with the escape
// character, the quote and the dollar (which the builder would expand) escaped.
func quote(s string, escape byte) string {
	e := string(escape)
	return `"` + strings.NewReplacer(e, e+e, `"`, e+`"`, `$`, e+`$`, "\n", " ").Replace(s) + `"`
}
