package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/gateway"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const testToken = "s3cret-token"

// echoIn is the input of the test tools.
type echoIn struct {
	Text string `json:"text"`
}

// testBackend is a real go-sdk MCP server over loopback HTTP.
type testBackend struct {
	name string
	srv  *httptest.Server
	mcp  *mcp.Server
	url  string
	// forwarded counts the tools/call requests that reached it from the gateway's fast path
	// (whose JSON-RPC ids are "agentenv-N" strings), sdk those from its SDK client.
	forwarded, sdk atomic.Int64
	token          string       // the bearer token the backend wants (backendOpts.token)
	badAuth        atomic.Int64 // requests it refused for their Authorization
}

// addEcho adds a tool that answers "<server>/<tool>:<text>".
func (b *testBackend) addEcho(tool string) {
	mcp.AddTool(b.mcp, &mcp.Tool{Name: tool, Description: "echo of " + b.name},
		func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: fmt.Sprintf("%s/%s:%s", b.name, tool, in.Text)},
			}}, nil, nil
		})
}

// kill stops the backend as a crash would: every connection is cut.
func (b *testBackend) kill() {
	b.srv.CloseClientConnections()
	b.srv.Close()
}

// newBackend starts an MCP server named name with echo tools; withCard also serves an env card
// and a data plane that answers every request with its own name.
func newBackend(tb testing.TB, name string, withCard bool, tools ...string) *testBackend {
	tb.Helper()
	return startBackend(tb, name, backendOpts{card: withCard}, tools...)
}

// backendOpts are the options of startBackend.
type backendOpts struct {
	card  bool // serve an env card and a data plane
	sse   bool // answer every POST with an event stream, as the streamable transport allows
	count bool // count tools/call requests in forwarded and sdk (costs a copy of each body)
	// anchor serves the card as the anchor's protocol package writes it (nulls and all), its
	// data plane at /rpc with operations data/reset and data/get.
	anchor bool
	// token makes the backend refuse (401) every request without Authorization: Bearer token,
	// and recorded what it was sent in gotAuth.
	token string
}

// startBackend is newBackend with every option.
func startBackend(tb testing.TB, name string, o backendOpts, tools ...string) *testBackend {
	tb.Helper()
	withCard := o.card
	b := &testBackend{name: name, mcp: mcp.NewServer(&mcp.Implementation{Name: name, Version: "1"}, nil)}
	for _, t := range tools {
		b.addEcho(t)
	}
	mux := http.NewServeMux()
	mcpHandler := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return b.mcp }, &mcp.StreamableHTTPOptions{JSONResponse: !o.sse})
	mux.Handle("/mcp", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o.count && r.Method == http.MethodPost && r.Body != nil {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			if bytes.Contains(body, []byte(`"tools/call"`)) {
				if bytes.Contains(body, []byte(`"id":"agentenv-`)) {
					b.forwarded.Add(1)
				} else {
					b.sdk.Add(1)
				}
			}
		}
		mcpHandler.ServeHTTP(w, r)
	}))
	if withCard {
		mux.HandleFunc("GET "+envproto.CardPath, func(w http.ResponseWriter, r *http.Request) {
			// agentenv's pre-1.0 card shape, which the gateway still reads (deprecated).
			var ct []map[string]string
			for _, t := range tools {
				ct = append(ct, map[string]string{"name": t})
			}
			_ = json.NewEncoder(w).Encode(map[string]any{
				"name": name, "description": "card of " + name, "protocol_version": envproto.LegacyVersion, "tools": ct,
				"endpoints": map[string]string{"mcp": "/mcp", "data": "/agentenv", "card": envproto.CardPath},
			})
		})
		mux.HandleFunc("POST /agentenv", func(w http.ResponseWriter, r *http.Request) {
			var req envproto.Request
			_ = json.NewDecoder(r.Body).Decode(&req)
			res, _ := json.Marshal(map[string]string{"server": name, "method": req.Method, "role": r.Header.Get(gateway.RoleHeader)})
			_ = json.NewEncoder(w).Encode(envproto.Response{JSONRPC: "2.0", ID: req.ID, Result: res})
		})
	}
	if o.anchor {
		mux.HandleFunc("GET "+envproto.CardPath, func(w http.ResponseWriter, r *http.Request) {
			var ct []map[string]any
			for _, t := range tools {
				ct = append(ct, map[string]any{"name": t, "description": nil, "inputSchema": map[string]any{"type": "object"}})
			}
			_ = json.NewEncoder(w).Encode(map[string]any{
				"name": name, "protocolVersion": "1.0", "url": "/rpc", "preferredTransport": "JSONRPC",
				"additionalInterfaces":  []map[string]string{{"url": "/mcp", "transport": "mcp"}},
				"capabilities":          map[string]any{"extensions": nil, "tools": ct, "operations": []string{"data/reset", "data/get"}},
				"children_environments": nil,
			})
		})
		mux.HandleFunc("POST /rpc", func(w http.ResponseWriter, r *http.Request) {
			var req envproto.Request
			_ = json.NewDecoder(r.Body).Decode(&req)
			res, _ := json.Marshal(map[string]any{"parts": []map[string]any{{"kind": "data", "data": map[string]string{"server": name, "method": req.Method}}}})
			_ = json.NewEncoder(w).Encode(envproto.Response{JSONRPC: "2.0", ID: req.ID, Result: res})
		})
	}
	var h http.Handler = mux
	if o.token != "" {
		b.token = o.token
		h = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("Authorization") != "Bearer "+o.token {
				b.badAuth.Add(1)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			mux.ServeHTTP(w, r)
		})
	}
	b.srv = httptest.NewServer(h)
	b.url = b.srv.URL + "/mcp"
	tb.Cleanup(func() {
		b.srv.CloseClientConnections()
		b.srv.Close()
	})
	return b
}

// newGateway starts a gateway in front of backends and serves it over loopback HTTP.
func newGateway(tb testing.TB, cfg gateway.Config, backends ...*testBackend) (*gateway.Gateway, *httptest.Server) {
	tb.Helper()
	cfg.Token = testToken
	if cfg.Name == "" {
		cfg.Name = "testenv"
	}
	for _, b := range backends {
		cfg.Servers = append(cfg.Servers, gateway.Backend{Name: b.name, URL: b.url, Token: b.token})
	}
	if cfg.ConnectTimeout == 0 {
		cfg.ConnectTimeout = 10 * time.Second
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := gateway.New(ctx, cfg)
	if err != nil {
		tb.Fatalf("New: %v", err)
	}
	srv := httptest.NewServer(g.Handler())
	tb.Cleanup(func() {
		srv.CloseClientConnections()
		srv.Close()
		_ = g.Close()
	})
	return g, srv
}

// headerTransport adds fixed headers to every request.
type headerTransport struct {
	base http.RoundTripper
	h    http.Header
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range t.h {
		r.Header[k] = v
	}
	return t.base.RoundTrip(r)
}

func authClient(role string) *http.Client {
	h := http.Header{"Authorization": {"Bearer " + testToken}}
	if role != "" {
		h.Set(gateway.RoleHeader, role)
	}
	return &http.Client{Transport: headerTransport{http.DefaultTransport, h}}
}

// connect opens a go-sdk client session to the gateway's /mcp with the token and role.
func connect(tb testing.TB, gwURL, role string, opts *mcp.ClientOptions) *mcp.ClientSession {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, opts)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gwURL + "/mcp", HTTPClient: authClient(role)}, nil)
	if err != nil {
		tb.Fatalf("connect to gateway: %v", err)
	}
	tb.Cleanup(func() { _ = cs.Close() })
	return cs
}

func toolNames(tools []*mcp.Tool) []string {
	var out []string
	for _, t := range tools {
		out = append(out, t.Name)
	}
	return out
}

func listNames(tb testing.TB, cs *mcp.ClientSession) []string {
	tb.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		tb.Fatalf("ListTools: %v", err)
	}
	return toolNames(res.Tools)
}

func resultText(res *mcp.CallToolResult) string {
	var sb strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			sb.WriteString(t.Text)
		}
	}
	return sb.String()
}

// do sends a request to the gateway and returns the status and body.
func do(tb testing.TB, method, url, token string, body any, hdr map[string]string) (int, []byte, http.Header) {
	tb.Helper()
	var rd io.Reader
	switch v := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(v)
	default:
		b, _ := json.Marshal(v)
		rd = bytes.NewReader(b)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	if err != nil {
		tb.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b, resp.Header
}
