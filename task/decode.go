package task

import (
	"reflect"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv/internal/yamlfile"
)

// decoder walks yaml.Node trees with the strict decoder the env files share
// (internal/yamlfile), and checks a step's fields against its Go type.
type decoder struct{ *yamlfile.Decoder }

func newDecoder(file string) *decoder { return &decoder{yamlfile.NewDecoder(file)} }

// scalarForm is a struct type a task file may also give as a bare name (agentSpec).
type scalarForm interface{ scalarField() string }

var scalarFormType = reflect.TypeFor[scalarForm]()

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
	if n = d.Resolve(n, path); n == nil || yamlfile.IsNull(n) {
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind == yaml.ScalarNode && t.Implements(scalarFormType) {
			return // a name in place of the mapping; the type's UnmarshalYAML reads it
		}
		fs := structFields(t)
		known := append(fieldNames(fs), extra...)
		pairs, ok := d.Pairs(n, path, "field")
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
				d.Unknown(k, path, known)
			}
		}
		for _, f := range fs {
			if f.required && !have[f.name] {
				d.Errorf(n.Line, yamlfile.Join(path, f.name), "missing field")
			}
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.Errorf(n.Line, path, "want a list, got %s", yamlfile.Describe(n))
			return
		}
		for i, e := range n.Content {
			d.check(e, t.Elem(), yamlfile.Index(path, i), nil)
		}
	case reflect.Map:
		pairs, ok := d.Pairs(n, path, "field")
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
