// Package yamlfile is the one strict decoder of agentenv's YAML files (env files, task files):
// Parse reads exactly one document, and Decoder walks it, reporting every problem in one pass
// as an Error that names the file, line and field, with "did you mean" for an unknown field. A
// node budget guards against alias bombs.
package yamlfile

import (
	"fmt"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv"
)

// Error is one problem in a file, with where it is. Decoders return all of them at once, joined
// with errors.Join; each wraps [agentenv.ErrInvalid].
type Error struct {
	File string // the file's path as given to the decoder
	Line int    // 1-based line of the field, or 0 when it has none (an empty file)
	Path string // the field: "servers[0].image", "steps[2].depends_on[0]"; empty for the file
	Msg  string // what is wrong, lower case
}

// Error formats e as "file:line: path: msg", the form editors jump to.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns agentenv.ErrInvalid.
func (e *Error) Unwrap() error { return agentenv.ErrInvalid }

// NodeBudget bounds how many YAML nodes one file may expand to through aliases, so that a file
// of nested anchors cannot make a decoder do exponential work.
const NodeBudget = 100_000

// Budget counts the nodes a decoder still may visit; the zero value is exhausted, so start
// from NodeBudget.
type Budget int

// Resolve follows aliases and charges one node. It returns nil once the budget is spent,
// calling report once, at the node that spent it.
func (b *Budget) Resolve(n *yaml.Node, report func(line int)) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 100; i++ {
		n = n.Alias
	}
	if n == nil || n.Kind == yaml.AliasNode {
		return nil
	}
	*b--
	if *b == 0 {
		report(n.Line)
	}
	if *b <= 0 {
		return nil
	}
	return n
}

// TooLarge is the message a decoder reports when its budget is spent.
var TooLarge = fmt.Sprintf("document too large: more than %d nodes after expanding aliases", NodeBudget)

// IsNull reports whether n is a YAML null.
func IsNull(n *yaml.Node) bool { return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" }

// Describe names what n is, for "want X, got Y" messages.
func Describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.DocumentNode:
		return "a document"
	}
	switch n.ShortTag() {
	case "!!int":
		return "an integer"
	case "!!float":
		return "a number"
	case "!!bool":
		return "a boolean"
	case "!!null":
		return "null"
	}
	return fmt.Sprintf("%q", n.Value)
}

// Join appends key to a field path: Join("gateway", "roles") is "gateway.roles".
func Join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// Index appends a list index to a field path: Index("servers", 0) is "servers[0]".
func Index(path string, i int) string { return fmt.Sprintf("%s[%d]", path, i) }
