package gateway_test

import (
	"context"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/gateway"
)

// TestBackendToken: a backend behind a bearer token of its own (Backend.Token) is reached with
// it on every request, its card included, and never with the caller's token.
func TestBackendToken(t *testing.T) {
	b := startBackend(t, "local", backendOpts{card: true, token: "backend-token"}, "ping")
	_, srv := newGateway(t, gateway.Config{}, b)
	cs := connect(t, srv.URL, "", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ping", Arguments: map[string]any{"text": "x"}})
	if err != nil || res.IsError || resultText(res) != "local/ping:x" {
		t.Fatalf("call ping = %v, %v; want local/ping:x", res, err)
	}
	if n := b.badAuth.Load(); n != 0 {
		t.Errorf("the backend refused %d requests for their Authorization", n)
	}
	code, body, _ := do(t, "GET", srv.URL+envproto.CardPath, testToken, nil, nil)
	if code != 200 {
		t.Errorf("card: %d %s", code, body)
	}
	if n := b.badAuth.Load(); n != 0 {
		t.Errorf("the backend refused %d requests for their Authorization", n)
	}

	// Without its token the gateway cannot reach it: the test backend does refuse.
	bad := startBackend(t, "locked", backendOpts{token: "other"}, "ping")
	bad.token = ""
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel2()
	if _, err := gateway.New(ctx2, gateway.Config{Token: testToken, ConnectTimeout: time.Second,
		Servers: []gateway.Backend{{Name: "locked", URL: bad.url}}}); err == nil {
		t.Error("gateway.New reached a backend without its token")
	}
	if bad.badAuth.Load() == 0 {
		t.Error("the locked backend saw no refused request")
	}
}
