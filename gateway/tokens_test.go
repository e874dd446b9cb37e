package gateway_test

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/gateway"
)

const (
	agentToken  = "agent-role-token"
	graderToken = "grader-role-token"
)

// connectAs opens a go-sdk client session with token and, if role is not empty, a role header.
func connectAs(tb testing.TB, gwURL, token, role string) (*mcp.ClientSession, error) {
	tb.Helper()
	h := http.Header{"Authorization": {"Bearer " + token}}
	if role != "" {
		h.Set(gateway.RoleHeader, role)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gwURL + "/mcp",
		HTTPClient: &http.Client{Transport: headerTransport{http.DefaultTransport, h}}}, nil)
	if err == nil {
		tb.Cleanup(func() { _ = cs.Close() })
	}
	return cs, err
}

func TestGateway_RoleTokens(t *testing.T) {
	_, gw := newGateway(t, gateway.Config{
		Roles:      map[string][]string{"agent": {"secret"}},
		RoleTokens: map[string]string{"agent": agentToken, "grader": graderToken},
	}, newBackend(t, "a", false, "echo", "secret"))

	// A role token sees its role's tools, with or without the matching header.
	for _, hdr := range []string{"", "agent"} {
		cs, err := connectAs(t, gw.URL, agentToken, hdr)
		if err != nil {
			t.Fatalf("connect with the agent token (header %q): %v", hdr, err)
		}
		if got := listNames(t, cs); slices.Contains(got, "secret") || !slices.Contains(got, "echo") {
			t.Errorf("agent token, header %q: tools %v, want echo without secret", hdr, got)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "secret", Arguments: map[string]any{}})
		cancel()
		if err == nil && !res.IsError {
			t.Errorf("agent token, header %q: called a tool its role disables: %s", hdr, resultText(res))
		}
	}

	// A spoofed header naming a role that may call the tool: refused on every route.
	for _, spoof := range []string{"grader", gateway.DefaultRole} {
		if _, err := connectAs(t, gw.URL, agentToken, spoof); err == nil {
			t.Errorf("agent token with header %q: connected, want 403", spoof)
		}
		code, body, _ := do(t, "POST", gw.URL+"/step", agentToken, gateway.Step{Tool: "secret", Arguments: []byte(`{}`)},
			map[string]string{gateway.RoleHeader: spoof})
		if code != http.StatusForbidden {
			t.Errorf("/step with agent token and header %q: %d %s, want 403", spoof, code, body)
		}
	}
	code, body, _ := do(t, "POST", gw.URL+"/step", agentToken, gateway.Step{Tool: "secret", Arguments: []byte(`{}`)}, nil)
	if code == http.StatusOK && !strings.Contains(string(body), "disabled") {
		t.Errorf("/step secret with the agent token: %d %s, want refused", code, body)
	}
	code, body, _ = do(t, "POST", gw.URL+"/step", agentToken, gateway.Step{Tool: "echo", Arguments: []byte(`{"text":"hi"}`)}, nil)
	if code != http.StatusOK || !strings.Contains(string(body), "hi") {
		t.Errorf("/step echo with the agent token: %d %s", code, body)
	}

	// Admin routes: 403 with a role token, 401 with none or an unknown one, ok with admin.
	admin := []struct {
		method, path string
		body         any
	}{
		{"POST", gateway.EnablePath, gateway.Gate{Role: "agent", Tools: []string{"secret"}}},
		{"POST", gateway.DisablePath, gateway.Gate{Role: "grader", Tools: []string{"echo"}}},
		{"GET", gateway.StatePath, nil},
		{"GET", gateway.TrajectoryPath, nil},
		{"POST", envproto.DataPath, envproto.Request{JSONRPC: "2.0", ID: []byte("1"), Method: "data/get"}},
		{"POST", "/servers/a" + envproto.DataPath, envproto.Request{JSONRPC: "2.0", ID: []byte("1"), Method: "data/get"}},
		{"GET", envproto.CardPath, nil},
	}
	for _, rt := range admin {
		for _, tok := range []string{agentToken, graderToken} {
			if code, body, _ := do(t, rt.method, gw.URL+rt.path, tok, rt.body, nil); code != http.StatusForbidden {
				t.Errorf("%s %s with a role token: %d %s, want 403", rt.method, rt.path, code, body)
			}
		}
		for _, tok := range []string{"", "unknown-token"} {
			if code, _, _ := do(t, rt.method, gw.URL+rt.path, tok, rt.body, nil); code != http.StatusUnauthorized {
				t.Errorf("%s %s with token %q: %d, want 401", rt.method, rt.path, tok, code)
			}
		}
	}
	// The refused enable changed nothing: the agent still cannot call secret.
	code, body, _ = do(t, "POST", gw.URL+"/step", agentToken, gateway.Step{Tool: "secret", Arguments: []byte(`{}`)}, nil)
	if code == http.StatusOK && !strings.Contains(string(body), "disabled") {
		t.Errorf("secret after a refused enable: %d %s", code, body)
	}
	for _, rt := range []struct{ method, path string }{{"GET", gateway.StatePath}, {"GET", gateway.TrajectoryPath}} {
		if code, body, _ := do(t, rt.method, gw.URL+rt.path, testToken, nil, nil); code != http.StatusOK {
			t.Errorf("%s %s with the admin token: %d %s", rt.method, rt.path, code, body)
		}
	}

	// The admin token may still pick a role with the header.
	code, body, _ = do(t, "POST", gw.URL+"/step", testToken, gateway.Step{Tool: "secret", Arguments: []byte(`{}`)},
		map[string]string{gateway.RoleHeader: "agent"})
	if code == http.StatusOK && !strings.Contains(string(body), "disabled") {
		t.Errorf("admin as agent called secret: %d %s", code, body)
	}
	code, body, _ = do(t, "POST", gw.URL+"/step", testToken, gateway.Step{Tool: "secret", Arguments: []byte(`{}`)},
		map[string]string{gateway.RoleHeader: "grader"})
	if code != http.StatusOK || strings.Contains(string(body), "disabled") {
		t.Errorf("admin as grader calling secret: %d %s", code, body)
	}
	code, body, _ = do(t, "POST", gw.URL+gateway.EnablePath, testToken, gateway.Gate{Role: "agent", Tools: []string{"secret"}}, nil)
	if code != http.StatusOK {
		t.Errorf("enable with the admin token: %d %s", code, body)
	}
	code, body, _ = do(t, "POST", gw.URL+"/step", agentToken, gateway.Step{Tool: "secret", Arguments: []byte(`{}`)}, nil)
	if code != http.StatusOK || strings.Contains(string(body), "disabled") {
		t.Errorf("agent calling secret after the admin enabled it: %d %s", code, body)
	}
}

// A role token cannot use the MCP session another role opened, even knowing its id.
func TestGateway_RoleTokenForeignSession(t *testing.T) {
	_, gw := newGateway(t, gateway.Config{
		Roles:      map[string][]string{"agent": {"secret"}},
		RoleTokens: map[string]string{"agent": agentToken},
	}, newBackend(t, "a", false, "echo", "secret"))
	cs := connect(t, gw.URL, "grader", nil) // the admin, as grader
	body := `{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"secret","arguments":{}}}`
	code, resp, _ := do(t, "POST", gw.URL+"/mcp", agentToken, body, map[string]string{
		"Mcp-Session-Id": cs.ID(), "Mcp-Protocol-Version": "2025-06-18", "Accept": "application/json, text/event-stream",
	})
	if code != http.StatusForbidden {
		t.Errorf("agent token on the grader's session: %d %s, want 403", code, resp)
	}
}

func TestGateway_RoleTokensConfig(t *testing.T) {
	b := newBackend(t, "a", false, "echo")
	for name, toks := range map[string]map[string]string{
		"admin reused": {"agent": testToken},
		"shared":       {"agent": "x", "grader": "x"},
		"empty":        {"agent": ""},
		"bad role":     {"a b": "y"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err := gateway.New(ctx, gateway.Config{Token: testToken, RoleTokens: toks, Servers: []gateway.Backend{{Name: b.name, URL: b.url}}})
		cancel()
		if err == nil {
			t.Errorf("%s: New accepted role tokens %v", name, toks)
		}
	}
}

// A rule on a bare tool name keeps matching once a clash prefixes the tool, and after a
// backend's tools/list_changed brings the clash.
func TestGateway_BareRuleAfterPrefix(t *testing.T) {
	a := newBackend(t, "a", false, "secret")
	b := newBackend(t, "b", false, "echo")
	_, gw := newGateway(t, gateway.Config{
		Roles:      map[string][]string{"agent": {"secret"}},
		RoleTokens: map[string]string{"agent": agentToken},
	}, a, b)
	cs, err := connectAs(t, gw.URL, agentToken, "")
	if err != nil {
		t.Fatal(err)
	}
	if got := listNames(t, cs); slices.Contains(got, "secret") {
		t.Fatalf("before the clash: %v", got)
	}
	b.addEcho("secret") // list_changed: both now serve secret, exposed as a__secret and b__secret
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body, _ := do(t, "POST", gw.URL+"/step", testToken, gateway.Step{ListTools: true}, nil)
		if code == 200 && strings.Contains(string(body), "b__secret") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the clash never showed: %d %s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, name := range []string{"a__secret", "b__secret"} {
		code, body, _ := do(t, "POST", gw.URL+"/step", agentToken, gateway.Step{Tool: name, Arguments: []byte(`{}`)}, nil)
		if code == http.StatusOK && !strings.Contains(string(body), "disabled") {
			t.Errorf("agent called %s despite the rule on secret: %d %s", name, code, body)
		}
	}
	if got := listNames(t, cs); slices.ContainsFunc(got, func(n string) bool { return strings.HasSuffix(n, "secret") }) {
		t.Errorf("agent lists %v after the clash", got)
	}
}
