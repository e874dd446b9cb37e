package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/internal/httpserve"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const methodCallTool = "tools/call"

// mcpServers serves /mcp with one mcp.Server per role, since a tools/list answer is per server:
// each role's server lists the union minus the tools gated for it, and the SDK notifies that
// role's sessions when the list changes. Its ServeHTTP (fastpath.go) answers tools/call and
// tools/list of initialized sessions itself and hands everything else to handler.
type mcpServers struct {
	g        *Gateway
	handler  *mcp.StreamableHTTPHandler
	opening  http.Handler // handler behind the session cap, for requests with no session
	sessions *sessions

	mu     sync.Mutex // guards byRole and every roleServer.registered; serializes sync
	byRole map[string]*roleServer
}

type roleServer struct {
	role       string
	srv        *mcp.Server
	registered map[string]string // public name -> fingerprint
}

func newMCPServers(g *Gateway) *mcpServers {
	m := &mcpServers{g: g, byRole: make(map[string]*roleServer), sessions: newSessions(g.cfg.SessionTimeout)}
	m.handler = mcp.NewStreamableHTTPHandler(m.getServer, &mcp.StreamableHTTPOptions{
		Logger: g.log,
		// No SessionTimeout: the SDK's idle timer would not see the requests the fast path
		// answers; the session table closes idle sessions instead.
		// A call's answer comes back as one JSON body, not an event stream: the gateway relays
		// no progress within a call, and a plain body costs less per call.
		JSONResponse: true,
	})
	m.opening = httpserve.SessionCap(m.handler, g.cfg.MaxSessions, m.sessions.len)
	return m
}

// getServer returns the server of the request's role, or nil (400) for an invalid role or
// when too many roles have servers already.
func (m *mcpServers) getServer(r *http.Request) *mcp.Server {
	role := normRole(r.Header.Get(RoleHeader))
	if validRole(role) != nil {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if rs, ok := m.byRole[role]; ok {
		return rs.srv
	}
	if len(m.byRole) >= maxRoles {
		return nil
	}
	rs := m.newRoleServer(role)
	m.byRole[role] = rs
	m.syncLocked(rs, m.g.currentUnion())
	return rs.srv
}

func (m *mcpServers) newRoleServer(role string) *roleServer {
	srv := mcp.NewServer(&mcp.Implementation{Name: "agentenv-gateway/" + m.g.cfg.Name, Version: envproto.Version},
		&mcp.ServerOptions{Logger: m.g.log, Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}}})
	// Every tools/call goes through the gateway's call path, gated tools and tools that
	// changed since the last sync included, so each call is answered and recorded.
	// Sessions enter the fast path's table when they initialize (or discover, so that the
	// table's idle timeout closes those too). Like the SDK, the fast path serves a session's
	// calls once it answered initialize, without waiting for notifications/initialized.
	srv.AddReceivingMiddleware(func(next mcp.MethodHandler) mcp.MethodHandler {
		return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
			switch creq, ok := req.(*mcp.CallToolRequest); {
			case ok && method == methodCallTool:
				res, err := m.g.callMCP(ctx, role, creq)
				if err != nil {
					return nil, err
				}
				return res, nil
			case method == methodInitialize || method == methodDiscover:
				res, err := next(ctx, method, req)
				if ss, ok := req.GetSession().(*mcp.ServerSession); ok {
					version := ""
					if ir, ok := res.(*mcp.InitializeResult); ok && err == nil {
						version = ir.ProtocolVersion
					}
					m.sessions.add(ss, role, version, version != "")
				}
				return res, err
			}
			return next(ctx, method, req)
		}
	})
	return &roleServer{role: role, srv: srv, registered: make(map[string]string)}
}

// sync brings every role server's tools in line with the union and the role rules.
func (m *mcpServers) sync() {
	m.mu.Lock()
	defer m.mu.Unlock()
	u := m.g.currentUnion()
	for _, rs := range m.byRole {
		m.syncLocked(rs, u)
	}
}

func (m *mcpServers) syncLocked(rs *roleServer, u *union) {
	want := make(map[string]*route)
	for _, r := range u.tools {
		if !m.g.roles.disabled(rs.role, r.public, r.qualified, r.tool.Name) {
			want[r.public] = r
		}
	}
	var remove []string
	for name := range rs.registered {
		if _, ok := want[name]; !ok {
			remove = append(remove, name)
			delete(rs.registered, name)
		}
	}
	if len(remove) > 0 {
		rs.srv.RemoveTools(remove...)
	}
	for _, r := range u.tools {
		if want[r.public] == nil || rs.registered[r.public] == r.print {
			continue
		}
		if err := addTool(rs.srv, r.exposed, m.g.stubHandler(rs.role)); err != nil {
			m.g.log.Warn("tool not served", "component", r.backend.name, "tool", r.public, "err", err)
			continue
		}
		rs.registered[r.public] = r.print
	}
}

// addTool adds t to srv, turning the SDK's panic on a tool it rejects into an error.
func addTool(srv *mcp.Server, t *mcp.Tool, h mcp.ToolHandler) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("add tool: %v", p)
		}
	}()
	srv.AddTool(t, h)
	return nil
}

// toolsFor returns the tools role sees, as tools/list answers them.
func (g *Gateway) toolsFor(role string) []*mcp.Tool {
	u := g.currentUnion()
	out := make([]*mcp.Tool, 0, len(u.tools))
	for _, r := range u.tools {
		if !g.roles.disabled(role, r.public, r.qualified, r.tool.Name) {
			out = append(out, r.exposed)
		}
	}
	return out
}

// closeSessions closes every gateway MCP session, ending their streams.
func (m *mcpServers) closeSessions() {
	m.mu.Lock()
	var servers []*mcp.Server
	for _, rs := range m.byRole {
		servers = append(servers, rs.srv)
	}
	m.mu.Unlock()
	for _, srv := range servers {
		for ss := range srv.Sessions() {
			_ = ss.Close()
		}
	}
}

// stubHandler is registered with every listed tool; the receiving middleware answers calls
// before it, so it only runs if the SDK bypasses middleware.
func (g *Gateway) stubHandler(role string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		return g.callMCP(ctx, role, req)
	}
}

// callMCP answers a tools/call of a gateway MCP session.
func (g *Gateway) callMCP(ctx context.Context, role string, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
	var session string
	if req.Session != nil {
		session = req.Session.ID()
	}
	var meta mcp.Meta
	if req.Params.Meta != nil {
		meta = req.Params.Meta
	}
	res, err := g.call(ctx, callInfo{
		via: "mcp", role: role, session: session,
		tool: req.Params.Name, args: req.Params.Arguments, meta: meta,
	})
	switch {
	case err == nil:
		return res, nil
	case errors.Is(err, ErrToolDisabled):
		return errorResult(err), nil
	case errors.Is(err, ErrToolNotFound):
		return nil, &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: err.Error()}
	}
	var werr *jsonrpc.Error
	if errors.As(err, &werr) {
		return nil, werr
	}
	return nil, &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: err.Error()}
}

// errorResult is a tool result reporting err to the model.
func errorResult(err error) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: err.Error()}}}
}

// rawArgs returns args as a JSON object, or nil for none.
func rawArgs(args json.RawMessage) json.RawMessage {
	if len(args) == 0 || string(args) == "null" {
		return nil
	}
	return args
}
