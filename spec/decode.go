package spec

import (
	"fmt"
	"slices"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv/internal/suggest"
	"github.com/agentenv/agentenv/internal/yamlfile"
)

// decoder walks a yaml.Node tree into an Env. It decodes strictly (an unknown field is an
// error), records the line of every field path for later checks, and keeps going after an
// error so that one pass reports every problem.
type decoder struct {
	file   string
	errs   []error
	failed map[string]bool // paths whose value did not decode; later checks skip them
	lines  map[string]int
	budget yamlfile.Budget
}

func newDecoder(file string) *decoder {
	return &decoder{file: file, failed: map[string]bool{}, lines: map[string]int{}, budget: yamlfile.NodeBudget}
}

func (d *decoder) errorf(line int, path, format string, args ...any) {
	d.errs = append(d.errs, &Error{File: d.file, Line: line, Path: path, Msg: fmt.Sprintf(format, args...)})
}

// fail records a decode error for path at n and marks the path failed.
func (d *decoder) fail(n *yaml.Node, path, format string, args ...any) {
	d.failed[path] = true
	d.errorf(n.Line, path, format, args...)
}

// resolve follows aliases and charges the node budget; nil once the budget is spent.
func (d *decoder) resolve(n *yaml.Node, path string) *yaml.Node {
	return d.budget.Resolve(n, func(line int) { d.errorf(line, path, "%s", yamlfile.TooLarge) })
}

// fields decodes the mapping n at path. For each key in known it records the key's line and
// calls set with the key, its value and its path; any other key is an error with a suggestion.
// A null n is an empty mapping. It reports whether n was a mapping (or null).
func (d *decoder) fields(n *yaml.Node, path string, known []string, set func(key string, v *yaml.Node, p string)) bool {
	if n = d.resolve(n, path); n == nil || yamlfile.IsNull(n) {
		return n != nil
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping, got %s", yamlfile.Describe(n))
		return false
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key, ok := d.key(k, path)
		if !ok {
			continue
		}
		p := yamlfile.Join(path, key)
		if first, dup := seen[key]; dup {
			d.fail(k, p, "duplicate field (first at line %d)", first)
			continue
		}
		seen[key] = k.Line
		if !slices.Contains(known, key) {
			d.errorf(k.Line, p, "unknown field%s", suggest.DidYouMean(key, known))
			continue
		}
		d.lines[p] = k.Line
		set(key, v, p)
	}
	return true
}

// key returns the string of a mapping key, or reports why it cannot be one.
func (d *decoder) key(k *yaml.Node, path string) (string, bool) {
	if k = d.resolve(k, path); k == nil {
		return "", false
	}
	if k.Kind != yaml.ScalarNode {
		d.errorf(k.Line, path, "want a string key, got %s", yamlfile.Describe(k))
		return "", false
	}
	if k.ShortTag() == "!!merge" {
		d.fail(k, path, "merge keys (<<) are not supported; write the fields out")
		return "", false
	}
	return k.Value, true
}

// str decodes a string. Any scalar is accepted as its text (so password: 1234 is "1234"); null
// is "".
func (d *decoder) str(n *yaml.Node, path string) string {
	if n = d.resolve(n, path); n == nil || yamlfile.IsNull(n) {
		return ""
	}
	if n.Kind != yaml.ScalarNode {
		d.fail(n, path, "want a string, got %s", yamlfile.Describe(n))
		return ""
	}
	return n.Value
}

func (d *decoder) integer(n *yaml.Node, path string) int {
	if n = d.resolve(n, path); n == nil || yamlfile.IsNull(n) {
		return 0
	}
	var v int
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!int" || n.Decode(&v) != nil {
		d.fail(n, path, "want an integer, got %s", yamlfile.Describe(n))
		return 0
	}
	return v
}

func (d *decoder) boolean(n *yaml.Node, path string) bool {
	if n = d.resolve(n, path); n == nil || yamlfile.IsNull(n) {
		return false
	}
	v, err := strconv.ParseBool(n.Value)
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!bool" || err != nil {
		d.fail(n, path, "want true or false, got %s", yamlfile.Describe(n))
		return false
	}
	return v
}

// duration decodes a Go duration string ("30s", "1m30s"); it must be positive.
func (d *decoder) duration(n *yaml.Node, path string) time.Duration {
	if n = d.resolve(n, path); n == nil || yamlfile.IsNull(n) {
		return 0
	}
	if n.Kind != yaml.ScalarNode || n.ShortTag() != "!!str" {
		d.fail(n, path, "want a duration such as \"30s\" or \"2m\", got %s", yamlfile.Describe(n))
		return 0
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil || v <= 0 {
		d.fail(n, path, "want a positive duration such as \"30s\" or \"2m\", got %q", n.Value)
		return 0
	}
	return v
}

// list calls item for each element of the sequence n; null is an empty list.
func (d *decoder) list(n *yaml.Node, path string, item func(i int, v *yaml.Node, p string)) {
	if n = d.resolve(n, path); n == nil || yamlfile.IsNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		d.fail(n, path, "want a list, got %s", yamlfile.Describe(n))
		return
	}
	for i, v := range n.Content {
		p := yamlfile.Index(path, i)
		d.lines[p] = v.Line
		item(i, v, p)
	}
}

func (d *decoder) strings(n *yaml.Node, path string) []string {
	var out []string
	d.list(n, path, func(_ int, v *yaml.Node, p string) {
		out = append(out, d.str(v, p))
	})
	return out
}

// stringMap decodes a mapping of strings to strings; its keys are not checked here.
func (d *decoder) stringMap(n *yaml.Node, path string) map[string]string {
	out := map[string]string{}
	d.mapping(n, path, func(key string, v *yaml.Node, p string) {
		out[key] = d.str(v, p)
	})
	if len(out) == 0 {
		return nil
	}
	return out
}

// mapping calls set for each entry of a mapping with free-form keys (env, roles).
func (d *decoder) mapping(n *yaml.Node, path string, set func(key string, v *yaml.Node, p string)) {
	if n = d.resolve(n, path); n == nil || yamlfile.IsNull(n) {
		return
	}
	if n.Kind != yaml.MappingNode {
		d.fail(n, path, "want a mapping, got %s", yamlfile.Describe(n))
		return
	}
	seen := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		key, ok := d.key(k, path)
		if !ok {
			continue
		}
		p := yamlfile.Join(path, key)
		if first, dup := seen[key]; dup {
			d.fail(k, p, "duplicate key (first at line %d)", first)
			continue
		}
		seen[key] = k.Line
		d.lines[p] = k.Line
		set(key, v, p)
	}
}
