package yamlfile

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv/internal/suggest"
)

// Decoder walks a yaml.Node tree strictly, for the env and the task decoders: an unknown field
// is an error with a suggestion, every field path's line is recorded for later checks, and it
// keeps going after an error so that one pass reports every problem. Its methods take the node
// and its field path, and treat null as absent.
type Decoder struct {
	File   string          // the file's path as given, for errors
	Errs   []error         // every problem so far, each an *Error
	Failed map[string]bool // paths whose value did not decode; later checks skip them
	Lines  map[string]int  // the line of each field path met
	budget Budget
}

// NewDecoder returns a Decoder for the file named file, with a full node budget.
func NewDecoder(file string) *Decoder {
	return &Decoder{File: file, Failed: map[string]bool{}, Lines: map[string]int{}, budget: NodeBudget}
}

// Errorf records a problem at line of the field path.
func (d *Decoder) Errorf(line int, path, format string, args ...any) {
	d.Errs = append(d.Errs, &Error{File: d.File, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// Fail records a problem with the value n of path and marks the path failed.
func (d *Decoder) Fail(n *yaml.Node, path, format string, args ...any) {
	d.Failed[path] = true
	d.Errorf(n.Line, path, format, args...)
}

// Resolve follows aliases and charges the node budget; nil once the budget is spent.
func (d *Decoder) Resolve(n *yaml.Node, path string) *yaml.Node {
	return d.budget.Resolve(n, func(line int) { d.Errorf(line, path, "%s", TooLarge) })
}

// Entries calls fn with each key and value of the mapping n at path, in order, recording each
// key's line and reporting non-string, merge and duplicate keys (a "duplicate "+what: "field"
// or "key") instead of passing them on. A null n has none. It reports whether n was a mapping
// (or null).
func (d *Decoder) Entries(n *yaml.Node, path, what string, fn func(k, v *yaml.Node)) bool {
	if n = d.Resolve(n, path); n == nil {
		return false
	}
	if IsNull(n) {
		return true
	}
	if n.Kind != yaml.MappingNode {
		d.Fail(n, path, "want a mapping, got %s", Describe(n))
		return false
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := d.key(n.Content[i], path)
		if k == nil {
			continue
		}
		p := Join(path, k.Value)
		if first, dup := seen[k.Value]; dup {
			d.Fail(k, p, "duplicate %s (first at line %d)", what, first)
			continue
		}
		seen[k.Value] = k.Line
		d.Lines[p] = k.Line
		fn(k, n.Content[i+1])
	}
	return true
}

// Pairs is Entries collected: the mapping's key/value pairs, every key problem reported first.
func (d *Decoder) Pairs(n *yaml.Node, path, what string) ([][2]*yaml.Node, bool) {
	var out [][2]*yaml.Node
	ok := d.Entries(n, path, what, func(k, v *yaml.Node) { out = append(out, [2]*yaml.Node{k, v}) })
	return out, ok
}

// key returns the resolved mapping key k, or nil after reporting why it cannot be one.
func (d *Decoder) key(k *yaml.Node, path string) *yaml.Node {
	if k = d.Resolve(k, path); k == nil {
		return nil
	}
	if k.Kind != yaml.ScalarNode {
		d.Errorf(k.Line, path, "want a string key, got %s", Describe(k))
		return nil
	}
	if k.ShortTag() == "!!merge" {
		d.Fail(k, path, "merge keys (<<) are not supported; write the fields out")
		return nil
	}
	return k
}

// Fields decodes the mapping n at path: for each key in known it calls set with the key, its
// value and its path; any other key is an unknown field. It reports whether n was a mapping
// (or null).
func (d *Decoder) Fields(n *yaml.Node, path string, known []string, set func(key string, v *yaml.Node, p string)) bool {
	return d.Entries(n, path, "field", func(k, v *yaml.Node) {
		if !slices.Contains(known, k.Value) {
			d.Unknown(k, path, known)
			return
		}
		set(k.Value, v, Join(path, k.Value))
	})
}

// Mapping calls set for each entry of a mapping with free-form keys (env, roles).
func (d *Decoder) Mapping(n *yaml.Node, path string, set func(key string, v *yaml.Node, p string)) {
	d.Entries(n, path, "key", func(k, v *yaml.Node) { set(k.Value, v, Join(path, k.Value)) })
}

// Unknown reports the key k as an unknown field of path, with a suggestion from known.
func (d *Decoder) Unknown(k *yaml.Node, path string, known []string) {
	d.Errorf(k.Line, Join(path, k.Value), "unknown field%s", suggest.DidYouMean(k.Value, known))
}

// Str decodes a string. Any scalar is accepted as its text (so password: 1234 is "1234"); null
// is "".
func (d *Decoder) Str(n *yaml.Node, path string) string {
	if n = d.Resolve(n, path); n == nil || IsNull(n) {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		d.Fail(n, path, "want a string, got %s", Describe(n))
		return ""
	}
	return n.Value
}

// Integer decodes an integer; null is 0.
func (d *Decoder) Integer(n *yaml.Node, path string) int {
	if n = d.Resolve(n, path); n == nil || IsNull(n) {
		return 0
	}
	var v int
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		d.Fail(n, path, "want an integer, got %s", Describe(n))
		return 0
	}
	return v
}

// Boolean decodes true or false; null is false.
func (d *Decoder) Boolean(n *yaml.Node, path string) bool {
	if n = d.Resolve(n, path); n == nil || IsNull(n) {
		return false
	}
	v, err := strconv.ParseBool(n.Value)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || err != nil {
		d.Fail(n, path, "want true or false, got %s", Describe(n))
		return false
	}
	return v
}

// Duration decodes a Go duration string ("30s", "1m30s"); it must be positive. Null is 0.
func (d *Decoder) Duration(n *yaml.Node, path string) time.Duration {
	if n = d.Resolve(n, path); n == nil || IsNull(n) {
		return 0
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		d.Fail(n, path, "want a duration such as \"30s\" or \"2m\", got %s", Describe(n))
		return 0
	}
	return d.parseDuration(n, path, n.Value)
}

// DurationText is Duration reading any scalar as its text, so that 5 is the text "5" (and
// fails as one): the rule of task files, which have always read durations so.
func (d *Decoder) DurationText(n *yaml.Node, path string) time.Duration {
	s := d.Str(n, path)
	if s == "" {
		return 0
	}
	return d.parseDuration(n, path, s)
}

func (d *Decoder) parseDuration(n *yaml.Node, path, s string) time.Duration {
	v, err := time.ParseDuration(s)
	if err != nil || v <= 0 {
		d.Fail(n, path, "want a positive duration such as \"30s\" or \"2m\", got %q", s)
		return 0
	}
	return v
}

// List calls item for each element of the sequence n, recording each element's line. It
// reports whether n was present: not absent, not null, and a list or an error saying it is not.
func (d *Decoder) List(n *yaml.Node, path string, item func(i int, v *yaml.Node, p string)) bool {
	if n = d.Resolve(n, path); n == nil || IsNull(n) {
		return false
	}
	if n.Kind != yaml.SequenceNode {
		d.Fail(n, path, "want a list, got %s", Describe(n))
		return true
	}
	for i, v := range n.Content {
		p := Index(path, i)
		d.Lines[p] = v.Line
		item(i, v, p)
	}
	return true
}

// Strings decodes a list of strings; an empty, null or absent list is nil.
func (d *Decoder) Strings(n *yaml.Node, path string) []string {
	var out []string
	d.List(n, path, func(_ int, v *yaml.Node, p string) {
		out = append(out, d.Str(v, p))
	})
	return out
}

// StringMap decodes a mapping of strings to strings; its keys are not checked here. An empty
// or absent mapping is nil.
func (d *Decoder) StringMap(n *yaml.Node, path string) map[string]string {
	out := map[string]string{}
	d.Mapping(n, path, func(key string, v *yaml.Node, p string) {
		out[key] = d.Str(v, p)
	})
	if len(out) == 0 {
		return nil
	}
	return out
}

// yamlErrLine finds the line in a yaml.v3 message ("yaml: line 3: ..." or "line 3: ...").
var yamlErrLine = regexp.MustCompile(`^(?:yaml: )?(?:line (\d+): )?(.*)$`)

// YAMLError records a yaml.v3 error (a syntax error, or each message of a *yaml.TypeError) at
// path, with the line it names.
func (d *Decoder) YAMLError(path string, err error) {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	for _, msg := range msgs {
		m := yamlErrLine.FindStringSubmatch(msg)
		line, _ := strconv.Atoi(m[1])
		d.Errorf(line, path, "%s", m[2])
	}
}

// Parse parses data, the file named name, as exactly one YAML (or JSON) document and returns
// its root node. what names the file's kind in errors: "env file" gives "empty env file".
func Parse(name, what string, data []byte) (*yaml.Node, error) {
	syntax := func(err error) error {
		d := NewDecoder(name)
		d.YAMLError("", err)
		return d.Errs[0]
	}
	if len(data) > MaxSize {
		return nil, &Error{File: name, Msg: fmt.Sprintf("%s of %d bytes: more than the %d a file may have", what, len(data), MaxSize)}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: name, Msg: "empty " + what}
		}
		return nil, syntax(err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		if err != nil {
			return nil, syntax(err)
		}
		return nil, &Error{File: name, Line: extra.Line, Msg: "want one YAML document, found another"}
	}
	if len(doc.Content) == 0 {
		return nil, &Error{File: name, Msg: "empty " + what}
	}
	if err := bounded(name, doc.Content[0]); err != nil {
		return nil, err
	}
	return doc.Content[0], nil
}

// MaxDepth bounds how deeply a file's mappings and lists may nest, aliases expanded.
const MaxDepth = 64

// MaxSize bounds the bytes of one file, before it is parsed.
const MaxSize = 8 << 20

// bounded walks root as a decoder would, its aliases followed by the decoders' own Budget, and
// refuses it once that is spent or it nests deeper than MaxDepth: a few hundred bytes of
// nested anchors expand to billions of nodes, and every decoder after Parse (yaml's own
// included) would pay for them. The walk stops at the bound: at most NodeBudget steps.
func bounded(name string, root *yaml.Node) error {
	type item struct {
		n     *yaml.Node
		depth int
	}
	budget, spent := Budget(NodeBudget), 0
	stack := []item{{root, 1}}
	for len(stack) > 0 {
		it := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		n := budget.Resolve(it.n, func(line int) { spent = line })
		if budget <= 0 {
			return &Error{File: name, Line: spent, Msg: TooLarge}
		}
		if n == nil {
			continue
		}
		if it.depth > MaxDepth {
			return &Error{File: name, Line: it.n.Line, Msg: fmt.Sprintf("nested more than %d levels deep", MaxDepth)}
		}
		for _, c := range n.Content {
			stack = append(stack, item{c, it.depth + 1})
		}
	}
	return nil
}
