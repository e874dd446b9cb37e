package task

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv/internal/suggest"
	"github.com/agentenv/agentenv/internal/yamlfile"
)

// decoder walks yaml.Node trees strictly: an unknown field is an error with a suggestion, and it
// keeps going after an error so that one pass reports every problem.
type decoder struct {
	file   string
	errs   []error
	budget yamlfile.Budget
}

func newDecoder(file string) *decoder { return &decoder{file: file, budget: yamlfile.NodeBudget} }

func (d *decoder) errorf(line int, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// resolve follows aliases and charges the node budget; nil once the budget is spent.
func (d *decoder) resolve(n *yaml.Node, path string) *yaml.Node {
	return d.budget.Resolve(n, func(line int) { d.errorf(line, path, "%s", yamlfile.TooLarge) })
}

// pairs returns the key/value pairs of the mapping n at path, reporting duplicate and
// non-string keys. A null n has no pairs. It reports whether n was a mapping (or null).
func (d *decoder) pairs(n *yaml.Node, path string) ([][2]*yaml.Node, bool) {
	if n = d.resolve(n, path); n == nil {
		return nil, false
	}
	if yamlfile.IsNull(n) {
		return nil, true
	}
	if n.Kind != yaml.MappingNode {
		d.errorf(n.Line, path, "want a mapping, got %s", yamlfile.Describe(n))
		return nil, false
	}
	seen := map[string]int{}
	var out [][2]*yaml.Node
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := d.resolve(n.Content[i], path)
		if k == nil {
			continue
		}
		if k.Kind != yaml.ScalarNode || k.ShortTag() == "!!merge" {
			d.errorf(k.Line, path, "want a field name, got %s", yamlfile.Describe(k))
			continue
		}
		if first, dup := seen[k.Value]; dup {
			d.errorf(k.Line, yamlfile.Join(path, k.Value), "duplicate field (first at line %d)", first)
			continue
		}
		seen[k.Value] = k.Line
		out = append(out, [2]*yaml.Node{k, n.Content[i+1]})
	}
	return out, true
}

// unknown reports key as an unknown field of path, with a suggestion from known.
func (d *decoder) unknown(k *yaml.Node, path string, known []string) {
	d.errorf(k.Line, yamlfile.Join(path, k.Value), "unknown field%s", suggest.DidYouMean(k.Value, known))
}

// str decodes a string scalar; null is "".
func (d *decoder) str(n *yaml.Node, path string) string {
	if n = d.resolve(n, path); n == nil || yamlfile.IsNull(n) {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		d.errorf(n.Line, path, "want a string, got %s", yamlfile.Describe(n))
		return ""
	}
	return n.Value
}

// strs decodes a list of strings. present is false for an absent or null list.
func (d *decoder) strs(n *yaml.Node, path string) (list []string, present bool) {
	if n = d.resolve(n, path); n == nil || yamlfile.IsNull(n) {
		return nil, false
	}
	if n.Kind != yaml.SequenceNode {
		d.errorf(n.Line, path, "want a list, got %s", yamlfile.Describe(n))
		return nil, true
	}
	list = []string{}
	for i, e := range n.Content {
		list = append(list, d.str(e, yamlfile.Index(path, i)))
	}
	return list, true
}

// yamlErrLine finds the line in a yaml.v3 message ("yaml: line 3: ..." or "line 3: ...").
var yamlErrLine = regexp.MustCompile(`^(?:yaml: )?(?:line (\d+): )?(.*)$`)

// yamlError turns a yaml.v3 error into Errors with lines.
func (d *decoder) yamlError(path string, err error) {
	var te *yaml.TypeError
	msgs := []string{err.Error()}
	if errors.As(err, &te) {
		msgs = te.Errors
	}
	for _, msg := range msgs {
		m := yamlErrLine.FindStringSubmatch(msg)
		line, _ := strconv.Atoi(m[1])
		d.errorf(line, path, "%s", m[2])
	}
}

// parseYAML parses data as exactly one YAML (or JSON) document and returns its root node.
func parseYAML(name string, data []byte) (*yaml.Node, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, &Error{File: name, Msg: "empty task file"}
		}
		d := newDecoder(name)
		d.yamlError("", err)
		return nil, d.errs[0]
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, &Error{File: name, Line: extra.Line, Msg: "want one YAML document, found another"}
	}
	if len(doc.Content) == 0 {
		return nil, &Error{File: name, Msg: "empty task file"}
	}
	return doc.Content[0], nil
}

// fieldInfo is one field of a step's configuration struct, from its tags.
type fieldInfo struct {
	name     string
	index    int
	required bool
}

// structFields lists the yaml fields of struct type t.
func structFields(t reflect.Type) []fieldInfo {
	var out []fieldInfo
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "" || name == "-" {
			continue
		}
		out = append(out, fieldInfo{name: name, index: i, required: f.Tag.Get("task") == "required"})
	}
	return out
}

// fieldNames returns the names of fs.
func fieldNames(fs []fieldInfo) []string {
	out := make([]string, len(fs))
	for i, f := range fs {
		out[i] = f.name
	}
	return out
}

// check walks n against the Go type t: unknown fields of structs are errors with suggestions,
// required fields must be present, lists must be lists. Scalars are left to yaml's Decode.
func (d *decoder) check(n *yaml.Node, t reflect.Type, path string, extra []string) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n = d.resolve(n, path); n == nil || yamlfile.IsNull(n) {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		fs := structFields(t)
		known := append(fieldNames(fs), extra...)
		pairs, ok := d.pairs(n, path)
		if !ok {
			return
		}
		have := map[string]bool{}
		for _, kv := range pairs {
			k, v := kv[0], kv[1]
			have[k.Value] = true
			i := fieldIndex(fs, k.Value)
			switch {
			case i >= 0:
				d.check(v, t.Field(fs[i].index).Type, yamlfile.Join(path, k.Value), nil)
			case !slices.Contains(extra, k.Value):
				d.unknown(k, path, known)
			}
		}
		for _, f := range fs {
			if f.required && !have[f.name] {
				d.errorf(n.Line, yamlfile.Join(path, f.name), "missing field")
			}
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.errorf(n.Line, path, "want a list, got %s", yamlfile.Describe(n))
			return
		}
		for i, e := range n.Content {
			d.check(e, t.Elem(), yamlfile.Index(path, i), nil)
		}
	case reflect.Map:
		pairs, ok := d.pairs(n, path)
		if !ok {
			return
		}
		for _, kv := range pairs {
			d.check(kv[1], t.Elem(), yamlfile.Join(path, kv[0].Value), nil)
		}
	}
}

func fieldIndex(fs []fieldInfo, name string) int {
	for i, f := range fs {
		if f.name == name {
			return i
		}
	}
	return -1
}

// cloneNode deep-copies n so that substitutions do not touch the parsed task.
func cloneNode(n *yaml.Node) *yaml.Node {
	if n == nil {
		return nil
	}
	c := *n
	if n.Alias != nil {
		c.Alias = cloneNode(n.Alias)
	}
	c.Content = make([]*yaml.Node, len(n.Content))
	for i, e := range n.Content {
		c.Content[i] = cloneNode(e)
	}
	return &c
}

// eachString calls fn on every string scalar value (not mapping keys) under n.
func eachString(n *yaml.Node, fn func(*yaml.Node)) {
	if n == nil {
		return
	}
	switch n.Kind {
	case yaml.ScalarNode:
		if n.ShortTag() == "!!str" {
			fn(n)
		}
	case yaml.MappingNode:
		for i := 1; i < len(n.Content); i += 2 {
			eachString(n.Content[i], fn)
		}
	case yaml.AliasNode:
		eachString(n.Alias, fn)
	default:
		for _, e := range n.Content {
			eachString(e, fn)
		}
	}
}
