package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// prefixSep separates a server name from a tool name in a prefixed tool name.
const prefixSep = "__"

// route is one tool of the union: its public name and the backend tool behind it.
type route struct {
	public    string
	qualified string // <server>__<tool>; role patterns match it, public and tool.Name
	backend   *backend
	tool      *mcp.Tool // as the backend lists it
	exposed   *mcp.Tool // as the gateway lists it: tool renamed to public
	print     string    // fingerprint of exposed, to tell a changed tool
	toolJSON  []byte    // tool.Name as a JSON string, spliced into forwarded calls
	// local serves a tool of the gateway's own (get_time) in place of a backend; nil for others.
	local func(ctx context.Context, args json.RawMessage) (json.RawMessage, error)
}

// union is an immutable snapshot of the gateway's tools, in backend order.
type union struct {
	tools  []*route
	byName map[string]*route
}

// buildUnion names every backend tool under policy. Under "never" two backends serving the same
// name is an error naming both; under every policy a public name served twice is an error, so
// nothing is ever shadowed.
func buildUnion(policy string, backends []*backend) (*union, error) {
	type owned struct {
		b     *backend
		tools []*mcp.Tool
	}
	all := make([]owned, 0, len(backends))
	owners := make(map[string][]string) // tool name -> servers
	for _, b := range backends {
		seen := make(map[string]bool)
		var tools []*mcp.Tool
		for _, t := range b.toolsSnapshot() {
			if seen[t.Name] { // a backend listing a name twice serves one tool
				continue
			}
			seen[t.Name] = true
			tools = append(tools, t)
			owners[t.Name] = append(owners[t.Name], b.name)
		}
		all = append(all, owned{b, tools})
	}
	u := &union{byName: make(map[string]*route)}
	for _, o := range all {
		for _, t := range o.tools {
			qualified := o.b.name + prefixSep + t.Name
			public := t.Name
			switch {
			case policy == NamesPrefix:
				public = qualified
			case len(owners[t.Name]) > 1 && policy == NamesNever:
				s := owners[t.Name]
				return nil, fmt.Errorf("%w: tool %q is served by %s and %s", ErrNameClash, t.Name, s[0], s[1])
			case len(owners[t.Name]) > 1:
				public = qualified
			}
			if prev, ok := u.byName[public]; ok {
				return nil, fmt.Errorf("%w: tool %q of %s and tool %q of %s are both named %q",
					ErrNameClash, prev.tool.Name, prev.backend.name, t.Name, o.b.name, public)
			}
			exposed := exposeTool(t, public)
			print, _ := json.Marshal(exposed)
			toolJSON, _ := json.Marshal(t.Name)
			r := &route{public: public, qualified: qualified, backend: o.b, tool: t, exposed: exposed,
				print: string(print), toolJSON: toolJSON}
			u.tools = append(u.tools, r)
			u.byName[public] = r
		}
	}
	// The SDK lists a server's tools sorted by name: keep /state, /step and the card in the
	// same order.
	slices.SortFunc(u.tools, func(a, b *route) int { return strings.Compare(a.public, b.public) })
	return u, nil
}

// exposeTool copies t under name with an input schema the SDK accepts: a tool without one (a
// non-compliant backend) gets the empty object schema rather than being dropped.
func exposeTool(t *mcp.Tool, name string) *mcp.Tool {
	c := *t
	c.Name = name
	if m, ok := c.InputSchema.(map[string]any); !ok || m["type"] != "object" {
		c.InputSchema = map[string]any{"type": "object"}
	}
	return &c
}
