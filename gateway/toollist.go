package gateway

import (
	"encoding/json"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// toolLists caches the fast path's tools/list result of each role, encoded once per tool
// union and set of role rules. Safe for concurrent use.
type toolLists struct {
	mu     sync.Mutex
	union  *union
	rules  uint64
	byRole map[string][]byte
}

// forRole returns role's tools/list result as the SDK would encode it: the role server's
// tools sorted by name, on one page. It reports false when the SDK would page them.
func (l *toolLists) forRole(g *Gateway, role string) ([]byte, bool) {
	u, rules := g.currentUnion(), g.roles.changes()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.union != u || l.rules != rules {
		l.union, l.rules, l.byRole = u, rules, make(map[string][]byte)
	}
	if b, ok := l.byRole[role]; ok {
		return b, b != nil
	}
	var tools []*mcp.Tool
	for _, r := range u.tools { // sorted by public name, as the SDK lists
		if !g.roles.disabled(role, r.public, r.qualified, r.tool.Name) {
			tools = append(tools, r.exposed)
		}
	}
	var b []byte
	if len(tools) <= mcp.DefaultPageSize {
		// The cache fields as the SDK fills them for a server without SetCacheable.
		res := &mcp.ListToolsResult{Cacheable: mcp.Cacheable{CacheScope: "public"}, Tools: tools}
		if res.Tools == nil {
			res.Tools = []*mcp.Tool{}
		}
		b, _ = json.Marshal(res)
	}
	l.byRole[role] = b
	return b, b != nil
}
