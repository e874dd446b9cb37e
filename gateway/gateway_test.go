package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/gateway"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestGateway_ListAndCallOverMCP(t *testing.T) {
	notes := newBackend(t, "notes", true, "add_note", "list_notes")
	search := newBackend(t, "search", false, "search")
	_, gw := newGateway(t, gateway.Config{}, notes, search)

	cs := connect(t, gw.URL, "", nil)
	got := listNames(t, cs)
	want := []string{"add_note", "list_notes", "search"}
	if !slices.Equal(got, want) {
		t.Fatalf("tools = %v, want %v", got, want)
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "search", Arguments: map[string]any{"text": "hi"}})
	if err != nil {
		t.Fatalf("CallTool: %v", err)
	}
	if got := resultText(res); got != "search/search:hi" {
		t.Errorf("result = %q, want search/search:hi", got)
	}

	code, body, _ := do(t, "GET", gw.URL+envproto.CardPath, testToken, nil, nil)
	var card envproto.Card
	if code != 200 || json.Unmarshal(body, &card) != nil {
		t.Fatalf("card: %d %s", code, body)
	}
	if card.Name != "testenv" || len(card.Capabilities.Tools) != 3 || card.Capabilities.Tools[2].Server != "search" {
		t.Errorf("card = %+v", card)
	}
	if notes := card.Child("notes"); notes == nil || notes.Description != "card of notes" || notes.URL != "/servers/notes/agentenv" || !notes.HasDataPlane() {
		t.Errorf("notes card = %+v", notes)
	}
	if search := card.Child("search"); search == nil || len(search.Capabilities.Tools) != 1 || search.HasDataPlane() {
		t.Errorf("synthesized search card = %+v", search)
	}
	if card.URL != envproto.DataPath || !slices.Equal(card.Capabilities.Operations, []string{"data/reset", "data/add", "data/get"}) || card.MCPURL() != envproto.MCPPath {
		t.Errorf("card url %q, operations %v, mcp %q", card.URL, card.Capabilities.Operations, card.MCPURL())
	}
	if ext := card.Extension(gateway.GatewayExtension); ext == nil || !strings.Contains(string(ext.Params), `"endpoint":"/trajectory"`) {
		t.Errorf("gateway extension = %+v", ext)
	}
	if len(card.Deprecated) != 0 {
		t.Errorf("the gateway's card uses deprecated fields %v", card.Deprecated)
	}

	code, body, _ = do(t, "POST", gw.URL+envproto.DataPath, testToken,
		envproto.Request{JSONRPC: "2.0", ID: json.RawMessage("1"), Method: envproto.MethodGet},
		map[string]string{gateway.RoleHeader: "grader"})
	if code != 200 || !strings.Contains(string(body), `"server":"notes"`) {
		t.Errorf("data plane: %d %s", code, body)
	}
	if !strings.Contains(string(body), "grader") {
		t.Errorf("data plane did not get the role: %s", body)
	}
	code, _, _ = do(t, "POST", gw.URL+"/servers/search/agentenv", testToken, envproto.Request{JSONRPC: "2.0", Method: "data/get"}, nil)
	if code != http.StatusNotFound {
		t.Errorf("data plane of a server without one: %d, want 404", code)
	}
}

func TestGateway_Auth(t *testing.T) {
	_, gw := newGateway(t, gateway.Config{}, newBackend(t, "a", false, "echo"))
	routes := []struct{ method, path string }{
		{"POST", "/mcp"}, {"GET", "/mcp"}, {"DELETE", "/mcp"},
		{"GET", envproto.CardPath}, {"GET", "/state"}, {"POST", "/step"}, {"GET", "/trajectory"},
		{"POST", "/tools/disable"}, {"POST", "/tools/enable"}, {"POST", "/agentenv"},
		{"POST", "/servers/a/agentenv"}, {"GET", "/nope"},
	}
	for _, rt := range routes {
		for _, tok := range []string{"", "wrong"} {
			code, _, hdr := do(t, rt.method, gw.URL+rt.path, tok, "{}", nil)
			if code != http.StatusUnauthorized || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("%s %s token %q: %d (WWW-Authenticate %q), want 401", rt.method, rt.path, tok, code, hdr.Get("WWW-Authenticate"))
			}
		}
	}
	code, body, _ := do(t, "GET", gw.URL+"/healthz", "", nil, nil)
	if code != 200 || !strings.Contains(string(body), `"a":true`) {
		t.Errorf("healthz: %d %s", code, body)
	}
	if code, _, _ := do(t, "GET", gw.URL+"/state", testToken, nil, nil); code != 200 {
		t.Errorf("state with token: %d", code)
	}
}

func TestGateway_Origin(t *testing.T) {
	_, gw := newGateway(t, gateway.Config{AllowedOrigins: []string{"https://ide.example"}}, newBackend(t, "a", false, "echo"))
	for origin, want := range map[string]int{
		"https://evil.example":  http.StatusForbidden,
		"null":                  http.StatusForbidden,
		"http://localhost:3000": http.StatusOK,
		"http://127.0.0.1:9":    http.StatusOK,
		"https://ide.example":   http.StatusOK,
	} {
		code, _, _ := do(t, "GET", gw.URL+"/state", testToken, nil, map[string]string{"Origin": origin})
		if code != want {
			t.Errorf("Origin %s: %d, want %d", origin, code, want)
		}
	}
	if code, _, _ := do(t, "POST", gw.URL+"/mcp", testToken, "{}", map[string]string{"Origin": "https://evil.example"}); code != http.StatusForbidden {
		t.Errorf("/mcp with a foreign origin: %d, want 403", code)
	}
}

func TestGateway_Naming(t *testing.T) {
	tests := []struct {
		policy  string
		a, b    []string
		want    []string
		wantErr string
	}{
		{"auto", []string{"x"}, []string{"y"}, []string{"x", "y"}, ""},
		{"", []string{"x", "z"}, []string{"x"}, []string{"a__x", "b__x", "z"}, ""},
		{"prefix", []string{"x"}, []string{"y"}, []string{"a__x", "b__y"}, ""},
		{"never", []string{"x"}, []string{"y"}, []string{"x", "y"}, ""},
		{"never", []string{"x"}, []string{"x"}, nil, `tool "x" is served by a and b`},
		{"auto", []string{"b__x", "x"}, []string{"x"}, nil, "both named"},
	}
	for _, tt := range tests {
		t.Run(tt.policy+"/"+strings.Join(tt.a, ",")+"+"+strings.Join(tt.b, ","), func(t *testing.T) {
			a, b := newBackend(t, "a", false, tt.a...), newBackend(t, "b", false, tt.b...)
			cfg := gateway.Config{Token: testToken, ToolNames: tt.policy, ConnectTimeout: 5 * time.Second,
				Servers: []gateway.Backend{{Name: "a", URL: a.url}, {Name: "b", URL: b.url}}}
			g, err := gateway.New(t.Context(), cfg)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, gateway.ErrNameClash) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("New = %v, want %s", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("New: %v", err)
			}
			defer g.Close()
			var got []string
			for _, tool := range g.State().Tools {
				got = append(got, tool.Name)
			}
			if !slices.Equal(got, tt.want) {
				t.Errorf("tools = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestGateway_ConnectTimeout(t *testing.T) {
	start := time.Now()
	_, err := gateway.New(t.Context(), gateway.Config{Token: testToken, ConnectTimeout: 500 * time.Millisecond,
		Servers: []gateway.Backend{{Name: "gone", URL: "http://127.0.0.1:1/mcp"}}})
	if err == nil || !strings.Contains(err.Error(), "gone") {
		t.Fatalf("New = %v, want an error naming the server", err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("New took %v, want about the 500ms connect timeout", d)
	}
}

func TestGateway_BackendDeath(t *testing.T) {
	a, b := newBackend(t, "alpha", false, "ping_a"), newBackend(t, "beta", false, "ping_b")
	_, gw := newGateway(t, gateway.Config{}, a, b)
	cs := connect(t, gw.URL, "", nil)
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "ping_a"}); err != nil {
		t.Fatalf("call before the kill: %v", err)
	}
	a.kill()

	for i := range 3 {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		start := time.Now()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "ping_a"})
		cancel()
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("call %d to the dead backend took %v, want < 2s", i, d)
		}
		if err == nil {
			t.Fatalf("call %d to the dead backend = %v, want an error", i, res)
		}
		if !strings.Contains(err.Error(), "alpha") || !strings.Contains(err.Error(), "unavailable") {
			t.Errorf("call %d error = %v, want it to name alpha as unavailable", i, err)
		}
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "ping_b", Arguments: map[string]any{"text": "ok"}})
	if err != nil || resultText(res) != "beta/ping_b:ok" {
		t.Fatalf("call to the live backend = %v, %v", res, err)
	}
	code, body, _ := do(t, "GET", gw.URL+"/state", testToken, nil, nil)
	var st gateway.State
	if code != 200 || json.Unmarshal(body, &st) != nil {
		t.Fatalf("state: %d %s", code, body)
	}
	if st.Servers[0].Healthy || st.Servers[0].LastError == "" || !st.Servers[1].Healthy {
		t.Errorf("state servers = %+v, want alpha unhealthy with an error, beta healthy", st.Servers)
	}
	_, body, _ = do(t, "GET", gw.URL+"/healthz", "", nil, nil)
	if !strings.Contains(string(body), `"alpha":false`) || !strings.Contains(string(body), `"ok":false`) {
		t.Errorf("healthz = %s", body)
	}
	code, body, _ = do(t, "POST", gw.URL+"/step", testToken, map[string]any{"tool": "ping_a"}, nil)
	if code != http.StatusBadGateway || !strings.Contains(string(body), "alpha") {
		t.Errorf("step to the dead backend: %d %s, want 502 naming alpha", code, body)
	}
}

func TestGateway_TrajectoryAndStep(t *testing.T) {
	_, gw := newGateway(t, gateway.Config{}, newBackend(t, "a", false, "echo"), newBackend(t, "b", false, "other"))
	cs := connect(t, gw.URL, "agent", nil)
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "1"}}); err != nil {
		t.Fatal(err)
	}
	code, body, _ := do(t, "POST", gw.URL+"/step", testToken, map[string]any{"tool": "other", "arguments": map[string]any{"text": "2"}},
		map[string]string{gateway.SessionHeader: "ep-7"})
	var res mcp.CallToolResult
	if code != 200 || json.Unmarshal(body, &res) != nil || resultText(&res) != "b/other:2" {
		t.Fatalf("step: %d %s", code, body)
	}
	if code, _, _ := do(t, "POST", gw.URL+"/step", testToken, map[string]any{"tool": "nope"}, nil); code != http.StatusNotFound {
		t.Errorf("step to an unknown tool: %d, want 404", code)
	}

	code, body, _ = do(t, "GET", gw.URL+"/trajectory", testToken, nil, nil)
	if code != 200 {
		t.Fatalf("trajectory: %d", code)
	}
	var recs []envproto.CallRecord
	sc := bufio.NewScanner(bytes.NewReader(body))
	for sc.Scan() {
		var r envproto.CallRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("trajectory line %q: %v", sc.Text(), err)
		}
		recs = append(recs, r)
	}
	if len(recs) != 2 {
		t.Fatalf("trajectory has %d lines, want 2 (a call to an unknown tool is not recorded):\n%s", len(recs), body)
	}
	r0, r1 := recs[0], recs[1]
	if r0.Via != "mcp" || r0.Server != "a" || r0.Tool != "echo" || r0.Role != "agent" || r0.Session != cs.ID() ||
		string(r0.Arguments) != `{"text":"1"}` || !strings.Contains(string(r0.Result), "a/echo:1") || r0.Started.IsZero() {
		t.Errorf("mcp record = %+v", r0)
	}
	if r1.Via != "step" || r1.Server != "b" || r1.Session != "ep-7" || r1.Role != "default" || !strings.Contains(string(r1.Result), "b/other:2") {
		t.Errorf("step record = %+v", r1)
	}
	_, body, _ = do(t, "GET", gw.URL+"/trajectory?after=1", testToken, nil, nil)
	if n := bytes.Count(body, []byte("\n")); n != 1 {
		t.Errorf("trajectory?after=1 has %d lines, want 1", n)
	}
}

func TestGateway_StepStateMCPAgree(t *testing.T) {
	_, gw := newGateway(t, gateway.Config{}, newBackend(t, "a", true, "x", "y"), newBackend(t, "b", false, "x", "z"))
	mcpNames := listNames(t, connect(t, gw.URL, "", nil))

	_, body, _ := do(t, "POST", gw.URL+"/step", testToken, map[string]any{"list_tools": true}, nil)
	var st gateway.StepTools
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatalf("step list: %v: %s", err, body)
	}
	var state gateway.State
	_, body, _ = do(t, "GET", gw.URL+"/state", testToken, nil, nil)
	if err := json.Unmarshal(body, &state); err != nil {
		t.Fatal(err)
	}
	var stateNames []string
	for _, tl := range state.Tools {
		stateNames = append(stateNames, tl.Name)
	}
	want := []string{"a__x", "b__x", "y", "z"}
	if !slices.Equal(mcpNames, want) || !slices.Equal(toolNames(st.Tools), want) || !slices.Equal(stateNames, want) {
		t.Errorf("mcp %v, step %v, state %v, want all %v", mcpNames, toolNames(st.Tools), stateNames, want)
	}
	if got := state.Servers[1].Tools; !slices.Equal(got, []string{"b__x", "z"}) {
		t.Errorf("state server b tools = %v", got)
	}
}

func TestGateway_RoleGating(t *testing.T) {
	_, gw := newGateway(t, gateway.Config{Roles: map[string][]string{"grader": {"secret*"}}},
		newBackend(t, "a", false, "echo", "secret_answer", "search_web"))
	agent := connect(t, gw.URL, "agent", nil)
	grader := connect(t, gw.URL, "grader", nil)
	if got := listNames(t, grader); slices.Contains(got, "secret_answer") {
		t.Errorf("grader sees %v despite the config rule", got)
	}

	code, body, _ := do(t, "POST", gw.URL+"/tools/disable", testToken, gateway.Gate{Role: "agent", Tools: []string{"secret*", "a__search_*"}}, nil)
	if code != 200 {
		t.Fatalf("disable: %d %s", code, body)
	}
	if got := listNames(t, agent); !slices.Equal(got, []string{"echo"}) {
		t.Errorf("agent tools = %v, want [echo]", got)
	}
	res, err := agent.CallTool(t.Context(), &mcp.CallToolParams{Name: "secret_answer"})
	if err == nil && !res.IsError {
		t.Errorf("gated call = %v, want a failure", resultText(res))
	} else if err == nil && !strings.Contains(resultText(res), "disabled") {
		t.Errorf("gated call result = %q, want it to say disabled", resultText(res))
	}
	if got := listNames(t, connect(t, gw.URL, "", nil)); len(got) != 3 {
		t.Errorf("default role tools = %v, want all 3", got)
	}
	code, _, _ = do(t, "POST", gw.URL+"/step", testToken, map[string]any{"tool": "secret_answer"}, map[string]string{gateway.RoleHeader: "agent"})
	if code != http.StatusForbidden {
		t.Errorf("gated step: %d, want 403", code)
	}
	_, body, _ = do(t, "POST", gw.URL+"/step", testToken, map[string]any{"list_tools": true}, map[string]string{gateway.RoleHeader: "agent"})
	var st gateway.StepTools
	_ = json.Unmarshal(body, &st)
	if !slices.Equal(toolNames(st.Tools), []string{"echo"}) {
		t.Errorf("agent step tools = %v", toolNames(st.Tools))
	}

	if code, body, _ := do(t, "POST", gw.URL+"/tools/enable", testToken, gateway.Gate{Role: "agent", Tools: []string{"secret_answer"}}, nil); code != 200 {
		t.Fatalf("enable: %d %s", code, body)
	}
	if got := listNames(t, agent); !slices.Equal(got, []string{"echo", "secret_answer"}) {
		t.Errorf("agent tools after enable = %v", got)
	}
	if res, err := agent.CallTool(t.Context(), &mcp.CallToolParams{Name: "secret_answer", Arguments: map[string]any{"text": "t"}}); err != nil || res.IsError {
		t.Errorf("re-enabled call = %v, %v", resultText(res), err)
	}
	_, body, _ = do(t, "GET", gw.URL+"/state", testToken, nil, nil)
	var state gateway.State
	_ = json.Unmarshal(body, &state)
	if len(state.Roles["agent"]) != 3 || len(state.Roles["grader"]) != 1 {
		t.Errorf("state roles = %+v", state.Roles)
	}
}

func TestGateway_ListChanged(t *testing.T) {
	a := newBackend(t, "a", false, "first")
	_, gw := newGateway(t, gateway.Config{}, a)
	changed := make(chan struct{}, 8)
	cs := connect(t, gw.URL, "", &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		changed <- struct{}{}
	}})
	if got := listNames(t, cs); !slices.Equal(got, []string{"first"}) {
		t.Fatalf("tools = %v", got)
	}
	a.addEcho("second")
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no tools/list_changed reached the client within 5s")
	}
	if got := listNames(t, cs); !slices.Equal(got, []string{"first", "second"}) {
		t.Errorf("tools after change = %v", got)
	}
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "second", Arguments: map[string]any{"text": "n"}})
	if err != nil || resultText(res) != "a/second:n" {
		t.Errorf("call to the new tool = %v, %v", res, err)
	}
}

func TestGateway_SessionDeleteThen404(t *testing.T) {
	_, gw := newGateway(t, gateway.Config{}, newBackend(t, "a", false, "echo"))
	hdr := map[string]string{"Accept": "application/json, text/event-stream"}
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	code, body, h := do(t, "POST", gw.URL+"/mcp", testToken, init, hdr)
	sid := h.Get("Mcp-Session-Id")
	if code != 200 || sid == "" {
		t.Fatalf("initialize: %d %q %s", code, sid, body)
	}
	hdr["Mcp-Session-Id"] = sid
	hdr["MCP-Protocol-Version"] = "2025-06-18"
	if code, body, _ := do(t, "POST", gw.URL+"/mcp", testToken, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, hdr); code != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", code, body)
	}
	list := `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`
	if code, body, _ := do(t, "POST", gw.URL+"/mcp", testToken, list, hdr); code != 200 || !strings.Contains(string(body), "echo") {
		t.Fatalf("tools/list: %d %s", code, body)
	}
	hdr["MCP-Protocol-Version"] = "1999-01-01"
	if code, _, _ := do(t, "POST", gw.URL+"/mcp", testToken, list, hdr); code != http.StatusBadRequest {
		t.Errorf("unsupported protocol version: %d, want 400", code)
	}
	hdr["MCP-Protocol-Version"] = "2025-06-18"
	if code, _, _ := do(t, "DELETE", gw.URL+"/mcp", testToken, nil, hdr); code >= 300 {
		t.Fatalf("DELETE: %d", code)
	}
	if code, _, _ := do(t, "POST", gw.URL+"/mcp", testToken, list, hdr); code != http.StatusNotFound {
		t.Errorf("reuse after DELETE: %d, want 404", code)
	}
}

func TestListenAndServe(t *testing.T) {
	a := newBackend(t, "a", false, "echo")
	ctx, cancel := context.WithCancel(t.Context())
	addrc := make(chan string, 1)
	errc := make(chan error, 1)
	go func() {
		errc <- gateway.ListenAndServe(ctx, "127.0.0.1:0", gateway.Config{Token: testToken, Servers: []gateway.Backend{{Name: "a", URL: a.url}}},
			func(addr string) { addrc <- addr })
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-errc:
		t.Fatalf("ListenAndServe: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not ready within 10s")
	}
	cs := connect(t, "http://"+addr, "", nil) // an open session must not hold the shutdown
	if got := listNames(t, cs); !slices.Equal(got, []string{"echo"}) {
		t.Errorf("tools = %v", got)
	}
	cancel()
	select {
	case err := <-errc:
		if err != nil {
			t.Errorf("ListenAndServe = %v", err)
		}
	case <-time.After(8 * time.Second):
		t.Fatal("shutdown took over 8s")
	}
}
