package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// placeholderRE is a placeholder of a trigger's tool or data action: ${args.<path>} or
// ${result.<path>} (the provoking call's arguments, its result's structured content or text
// parsed as JSON); a trailing ? makes it optional (a missing value drops the key).
var placeholderRE = regexp.MustCompile(`\$\{(args|result)((?:\.[A-Za-z0-9_]+(?:\[\d+\])*)*)(\??)\}`)

// errDrop marks an optional placeholder with no value: its key (or list element) is left out.
var errDrop = errors.New("drop")

// fillPlaceholders replaces the placeholders in raw, a JSON value, from call: a string that is
// one placeholder becomes the value itself, one inside a string its text (JSON for a non-string).
// A required placeholder without a value is an error, so a tool never receives "${...}".
func fillPlaceholders(raw json.RawMessage, call *callData) (json.RawMessage, error) {
	if len(raw) == 0 || !placeholderRE.Match(raw) {
		return raw, nil
	}
	if call == nil {
		return nil, errors.New("placeholders need a provoking call")
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	out, err := fillValue(v, call)
	if errors.Is(err, errDrop) {
		return json.RawMessage("null"), nil
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

func fillValue(v any, call *callData) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			f, err := fillValue(e, call)
			if errors.Is(err, errDrop) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out[k] = f
		}
		return out, nil
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			f, err := fillValue(e, call)
			if errors.Is(err, errDrop) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out = append(out, f)
		}
		return out, nil
	case string:
		lookup := func(m []string) (any, bool, error) {
			root := call.args
			if m[1] == "result" {
				root = call.result
			}
			got, ok := lookupPath(root, strings.TrimPrefix(m[2], "."))
			if !ok && m[3] == "" {
				return nil, false, fmt.Errorf("placeholder %s has no value in the provoking call", m[0])
			}
			return got, ok, nil
		}
		if m := placeholderRE.FindStringSubmatch(x); m != nil && m[0] == x {
			got, ok, err := lookup(m)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, errDrop
			}
			return got, nil
		}
		var ferr error
		filled := placeholderRE.ReplaceAllStringFunc(x, func(p string) string {
			got, ok, err := lookup(placeholderRE.FindStringSubmatch(p))
			switch {
			case err != nil:
				ferr = err
				return p
			case !ok:
				return ""
			}
			if s, isStr := got.(string); isStr {
				return s
			}
			b, _ := json.Marshal(got)
			return string(b)
		})
		return filled, ferr
	}
	return v, nil
}

// resultIsError reports whether a CallToolResult is a tool error.
func resultIsError(result json.RawMessage) bool {
	var r struct {
		IsError bool `json:"isError"`
	}
	return json.Unmarshal(result, &r) == nil && r.IsError
}

// callData is a call's arguments and result as values where predicates read.
type callData struct {
	args   any
	result any
}

func readCall(c completedCall) callData {
	d := callData{args: map[string]any{}}
	if len(c.Args) > 0 {
		var a any
		if json.Unmarshal(c.Args, &a) == nil && a != nil {
			d.args = a
		}
	}
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		Structured any `json:"structuredContent"`
	}
	if json.Unmarshal(c.Result, &r) == nil {
		var texts []string
		for _, c := range r.Content {
			if c.Type == "text" {
				texts = append(texts, c.Text)
			}
		}
		text := strings.Join(texts, "\n")
		var v any
		switch {
		case r.Structured != nil:
			d.result = r.Structured
		case json.Unmarshal([]byte(text), &v) == nil:
			d.result = v
		case text != "":
			d.result = text
		}
	}
	return d
}

// holds reports whether every predicate of where holds on the call.
func (d callData) holds(where map[string]Predicate) bool {
	for field, p := range where {
		var v any
		var ok bool
		switch {
		case field == "args" || strings.HasPrefix(field, "args."):
			v, ok = lookupPath(d.args, strings.TrimPrefix(strings.TrimPrefix(field, "args"), "."))
		case field == "result" || strings.HasPrefix(field, "result."):
			v, ok = lookupPath(d.result, strings.TrimPrefix(strings.TrimPrefix(field, "result"), "."))
		default:
			v, ok = lookupPath(d.args, field)
		}
		if !p.holds(v, ok) {
			return false
		}
	}
	return true
}

// lookupPath follows a dot path with [n] indices into v; "" is v itself.
func lookupPath(v any, path string) (any, bool) {
	if path == "" {
		return v, v != nil
	}
	for seg := range strings.SplitSeq(path, ".") {
		key, rest, _ := strings.Cut(seg, "[")
		if key != "" {
			m, ok := v.(map[string]any)
			if !ok {
				return nil, false
			}
			if v, ok = m[key]; !ok {
				return nil, false
			}
		}
		for rest != "" {
			idx, after, ok := strings.Cut(rest, "]")
			n, err := strconv.Atoi(idx)
			l, isList := v.([]any)
			if !ok || err != nil || !isList || n < 0 || n >= len(l) {
				return nil, false
			}
			v = l[n]
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return v, true
}

// holds tests v (found says whether the path led anywhere).
func (p Predicate) holds(v any, found bool) bool {
	switch {
	case p.Exists != nil:
		nonEmpty := found && v != nil && v != "" && !isEmptyList(v)
		return nonEmpty == *p.Exists
	case p.Regex != nil:
		if !found {
			return false
		}
		s, ok := v.(string)
		if !ok {
			b, _ := json.Marshal(v)
			s = string(b)
		}
		re, err := regexp.Compile(*p.Regex)
		return err == nil && re.MatchString(s)
	case len(p.Equals) > 0:
		var want any
		if !found || json.Unmarshal(p.Equals, &want) != nil {
			return false
		}
		a, _ := json.Marshal(v)
		b, _ := json.Marshal(want)
		return bytes.Equal(a, b)
	}
	return false
}

func isEmptyList(v any) bool {
	l, ok := v.([]any)
	return ok && len(l) == 0
}
