package gateway_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/agentenv/agentenv/gateway"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/envproto"
)

// addStamp adds a tool that answers what the gateway told it of the virtual time: the header
// and the _meta key, as "header|meta".
func (b *testBackend) addStamp() {
	mcp.AddTool(b.mcp, &mcp.Tool{Name: "stamp", Description: "the virtual time it was sent"},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			var hdr string
			if req.Extra != nil {
				hdr = req.Extra.Header.Get(gateway.VirtualTimeHeader)
			}
			meta, _ := req.Params.Meta[gateway.MetaVirtualTime].(string)
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: hdr + "|" + meta}}}, nil, nil
		})
}

func callText(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	return resultText(res), res.IsError
}

// The clock, triggers, tool access and /svc/ through real MCP sessions, on both the fast path
// and the SDK path (/step).
func TestGateway_ClockTriggersAccess(t *testing.T) {
	const agentToken = "agent-token"
	b := newBackend(t, "clk", true, "echo", "note")
	b.addStamp()
	_, srv := newGateway(t, gateway.Config{RoleTokens: map[string]string{"agent": agentToken}}, b)
	cs := connect(t, srv.URL, "", nil)
	if slices.Contains(listNames(t, cs), gateway.GetTimeTool) {
		t.Fatal("get_time listed before the clock is armed")
	}
	if code, _, _ := do(t, "GET", srv.URL+gateway.ClockTimePath, testToken, nil, nil); code != http.StatusNotFound {
		t.Errorf("GET /clock/time unarmed: %d, want 404", code)
	}

	// Only the admin token sets the clock; a bad time is 400 and arms nothing.
	set := map[string]any{"virtual_time": "2026-01-05T09:00:00Z", "virtual_seconds_per_real_second": 0}
	if code, _, _ := do(t, "PUT", srv.URL+gateway.ClockSetPath, agentToken, set, nil); code != http.StatusForbidden {
		t.Errorf("set-time with a role token: %d, want 403", code)
	}
	if code, body, _ := do(t, "PUT", srv.URL+gateway.ClockSetPath, testToken, map[string]any{"virtual_time": "monday"}, nil); code != http.StatusBadRequest || !strings.Contains(string(body), "RFC 3339") {
		t.Errorf("set-time with a bad time: %d %s", code, body)
	}
	code, body, _ := do(t, "PUT", srv.URL+gateway.ClockSetPath, testToken, set, nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"armed":true`) {
		t.Fatalf("set-time: %d %s", code, body)
	}
	if !slices.Contains(listNames(t, cs), gateway.GetTimeTool) {
		t.Fatal("get_time not listed while the clock is armed")
	}
	if got, _ := callText(t, cs, gateway.GetTimeTool, nil); got != `{"current_time":"2026-01-05T09:00:00Z"}` {
		t.Errorf("get_time = %s", got)
	}
	if got, _ := callText(t, cs, "stamp", nil); got != "2026-01-05T09:00:00Z|2026-01-05T09:00:00Z" {
		t.Errorf("the server was told header|meta = %q, want the virtual time twice", got)
	}
	code, body, _ = do(t, "POST", srv.URL+gateway.StepPath, testToken, map[string]any{"tool": "stamp"}, nil)
	if code != http.StatusOK || !strings.Contains(string(body), "2026-01-05T09:00:00Z|2026-01-05T09:00:00Z") {
		t.Errorf("/step stamp: %d %s", code, body)
	}

	// A trigger on a tool call: the barrier holds the call until the message is queued and
	// the tool is disabled for the agent's role.
	reg := `{"watch_roles":["default","agent"],"triggers":[{"id":"after-note","when":{"type":"action","tool":"no*","where":{"args.text":{"regex":"urgent"}}},
		"actions":[{"type":"message","text":"A new email arrived from Dana."},{"type":"permission","action":"disable","role":"agent","tools":["stamp"]},{"type":"tool","tool":"echo","args":{"text":"mirrored"}}],
		"barrier":{"at":"provoking_call","timeout_seconds":10}}]}`
	if code, body, _ := do(t, "POST", srv.URL+gateway.TriggersRegisterPath, testToken, reg, nil); code != http.StatusOK {
		t.Fatalf("register: %d %s", code, body)
	}
	if code, _, _ := do(t, "POST", srv.URL+gateway.TriggersRegisterPath, agentToken, reg, nil); code != http.StatusForbidden {
		t.Errorf("register with a role token: %d, want 403", code)
	}
	agent := connect(t, srv.URL, "agent", nil)
	if got, _ := callText(t, agent, "note", map[string]any{"text": "calm"}); strings.Contains(got, "Dana") {
		t.Errorf("fired on a call where does not hold: %s", got)
	}
	got, _ := callText(t, agent, "note", map[string]any{"text": "urgent!"})
	if !strings.Contains(got, "clk/note:urgent!") || !strings.Contains(got, "A new email arrived from Dana.") {
		t.Errorf("provoking call's result = %q, want its own text and the trigger's message", got)
	}
	if slices.Contains(listNames(t, agent), "stamp") {
		t.Error("stamp still listed for the agent after the trigger disabled it")
	}
	if _, isErr := callText(t, agent, "stamp", nil); !isErr {
		t.Error("stamp still callable by the agent")
	}
	if !slices.Contains(listNames(t, cs), "stamp") {
		t.Error("the trigger disabled stamp for another role too")
	}
	code, body, _ = do(t, "GET", srv.URL+gateway.TriggersStatePath, testToken, nil, nil)
	var st gateway.TriggerState
	if code != http.StatusOK || json.Unmarshal(body, &st) != nil || len(st.Triggers) != 1 || st.Triggers[0].Status != gateway.TriggerFired {
		t.Errorf("trigger state: %d %s", code, body)
	}

	// set_tool_access through the admin routes, then the trajectory has every change.
	if code, body, _ := do(t, "POST", srv.URL+gateway.EnablePath, testToken, gateway.Gate{Role: "agent", Tools: []string{"stamp"}}, nil); code != http.StatusOK {
		t.Fatalf("enable: %d %s", code, body)
	}
	if got, isErr := callText(t, agent, "stamp", nil); isErr {
		t.Errorf("stamp re-enabled but: %s", got)
	}
	_, traj, _ := do(t, "GET", srv.URL+gateway.TrajectoryPath, testToken, nil, nil)
	var recs []envproto.CallRecord
	for line := range strings.SplitSeq(strings.TrimSpace(string(traj)), "\n") {
		var r envproto.CallRecord
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("trajectory line %q: %v", line, err)
		}
		recs = append(recs, r)
	}
	var seq []string
	for _, r := range recs {
		switch r.Via {
		case "control":
			seq = append(seq, r.Tool+"/"+r.Role)
		case "trigger":
			seq = append(seq, "trigger:"+r.Tool)
		}
		if r.Via != "control" && r.VirtualTime != "2026-01-05T09:00:00Z" {
			t.Errorf("call %d (%s) has virtual_time %q", r.ID, r.Tool, r.VirtualTime)
		}
	}
	want := []string{"clock/set-time/default", "triggers/register/default", "tools/disable/agent", "trigger:echo", "tools/enable/agent"}
	if !slices.Equal(seq, want) {
		t.Errorf("trajectory's control and trigger records = %q, want %q", seq, want)
	}

	// /svc/ reaches the server's own routes with the admin token only.
	code, body, _ = do(t, "POST", srv.URL+gateway.SvcPrefix+"clk/agentenv", testToken, `{"jsonrpc":"2.0","id":1,"method":"ext/ping"}`, nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"server":"clk"`) || !strings.Contains(string(body), `ext/ping`) {
		t.Errorf("/svc/clk/agentenv: %d %s", code, body)
	}
	if code, _, _ := do(t, "POST", srv.URL+gateway.SvcPrefix+"clk/agentenv", agentToken, `{}`, nil); code != http.StatusForbidden {
		t.Errorf("/svc/ with a role token: %d, want 403", code)
	}
	if code, _, _ := do(t, "GET", srv.URL+gateway.SvcPrefix+"nope/x", testToken, nil, nil); code != http.StatusNotFound {
		t.Errorf("/svc/ of an unknown server: %d, want 404", code)
	}

	// Clearing the clock removes get_time and the stamps.
	if code, _, _ := do(t, "POST", srv.URL+gateway.ClockClearPath, testToken, nil, nil); code != http.StatusOK {
		t.Fatalf("clear: %d", code)
	}
	if slices.Contains(listNames(t, cs), gateway.GetTimeTool) {
		t.Error("get_time listed after clear")
	}
	if got, _ := callText(t, cs, "stamp", nil); got != "|" {
		t.Errorf("after clear the server was told %q", got)
	}
}

// An HTTP service (the DB web UI) is proxied at /svc/<name>/ to its base URL, without the
// caller's token, with the admin token only.
func TestGateway_SvcService(t *testing.T) {
	var gotAuth, gotPath, gotQuery string
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		gotAuth, gotPath, gotQuery = r.Header.Get("Authorization"), r.URL.Path, r.URL.RawQuery
		_, _ = w.Write([]byte("<html>adminer</html>"))
	}))
	t.Cleanup(web.Close)
	b := newBackend(t, "kv", false, "echo")
	_, srv := newGateway(t, gateway.Config{Services: []gateway.Backend{{Name: "db-web", URL: web.URL}},
		RoleTokens: map[string]string{"agent": "agent-token"}}, b)
	code, body, _ := do(t, "GET", srv.URL+"/svc/db-web/?server=servicedb&username=reader", testToken, nil, nil)
	if code != http.StatusOK || string(body) != "<html>adminer</html>" {
		t.Fatalf("/svc/db-web/: %d %s", code, body)
	}
	if gotAuth != "" || gotPath != "/" || gotQuery != "server=servicedb&username=reader" {
		t.Errorf("the service got auth %q path %q query %q", gotAuth, gotPath, gotQuery)
	}
	if code, _, _ := do(t, "GET", srv.URL+"/svc/db-web/", "agent-token", nil, nil); code != http.StatusForbidden {
		t.Errorf("a role token at /svc/db-web/: %d, want 403", code)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := gateway.New(ctx, gateway.Config{Token: "x", Servers: []gateway.Backend{{Name: "kv", URL: b.url}}, Services: []gateway.Backend{{Name: "kv", URL: web.URL}}})
	if err == nil || !strings.Contains(err.Error(), "unique name") {
		t.Errorf("a service named as a server: %v", err)
	}
}

// A person's browser opens a /svc/ route with the admin token once in the query: it gets a
// cookie for that route alone and a redirect without the token; the cookie then opens GETs of
// that route (not another route, not a POST, not /mcp), and a role's token in the query is
// refused.
func TestGateway_SvcBrowserLogin(t *testing.T) {
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Cookie") != "" {
			t.Errorf("the service got cookies %q", r.Header.Get("Cookie"))
		}
		_, _ = w.Write([]byte("novnc " + r.URL.RequestURI()))
	}))
	t.Cleanup(web.Close)
	b := newBackend(t, "kv", false, "echo")
	_, srv := newGateway(t, gateway.Config{Services: []gateway.Backend{{Name: "browser-vnc", URL: web.URL}, {Name: "db-web", URL: web.URL}},
		RoleTokens: map[string]string{"agent": "agent-token"}}, b)
	client := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	send := func(method, path string, cookies []*http.Cookie, hdr map[string]string) *http.Response {
		t.Helper()
		req, err := http.NewRequestWithContext(t.Context(), method, srv.URL+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cookies {
			req.AddCookie(c)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp
	}
	resp := send("GET", "/svc/browser-vnc/vnc.html?autoconnect=1&"+gateway.SvcTokenParam+"="+testToken, nil, nil)
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "/svc/browser-vnc/vnc.html?autoconnect=1" {
		t.Fatalf("login: %d to %q, want 303 to the page without the token", resp.StatusCode, resp.Header.Get("Location"))
	}
	cookies := resp.Cookies()
	if len(cookies) != 1 || !cookies[0].HttpOnly || cookies[0].SameSite != http.SameSiteStrictMode || cookies[0].Path != "/svc/browser-vnc/" || strings.Contains(cookies[0].Value, testToken) {
		t.Fatalf("login cookies %+v, want one HttpOnly, strict, for /svc/browser-vnc/ alone, without the token", cookies)
	}
	if r := send("GET", "/svc/browser-vnc/vnc.html?autoconnect=1", cookies, nil); r.StatusCode != http.StatusOK {
		t.Errorf("GET with the cookie: %d, want 200", r.StatusCode)
	}
	// Same-origin, as noVNC's websocket is wherever the gateway is reached.
	if r := send("GET", "/svc/browser-vnc/websockify", cookies, map[string]string{"Origin": "http://" + strings.TrimPrefix(srv.URL, "http://")}); r.StatusCode != http.StatusOK {
		t.Errorf("same-origin GET with the cookie: %d, want 200", r.StatusCode)
	}
	if r := send("GET", "/svc/browser-vnc/x", cookies, map[string]string{"Origin": "http://evil.example"}); r.StatusCode != http.StatusForbidden {
		t.Errorf("cross-origin GET with the cookie: %d, want 403", r.StatusCode)
	}
	for _, c := range []struct{ method, path string }{{"POST", "/svc/browser-vnc/x"}, {"GET", "/svc/db-web/"}, {"GET", "/state"}} {
		if r := send(c.method, c.path, cookies, nil); r.StatusCode != http.StatusUnauthorized {
			t.Errorf("%s %s with browser-vnc's cookie: %d, want 401", c.method, c.path, r.StatusCode)
		}
	}
	for _, tok := range []string{"agent-token", "wrong"} {
		if r := send("GET", "/svc/browser-vnc/?"+gateway.SvcTokenParam+"="+tok, nil, nil); r.StatusCode != http.StatusUnauthorized || len(r.Cookies()) != 0 {
			t.Errorf("login with %s: %d cookies %v, want 401 and none", tok, r.StatusCode, r.Cookies())
		}
	}
	if r := send("GET", "/svc/browser-vnc/", []*http.Cookie{{Name: "agentenv-svc", Value: "0000"}}, nil); r.StatusCode != http.StatusUnauthorized {
		t.Errorf("a forged cookie: %d, want 401", r.StatusCode)
	}
}

// A websocket through /svc/ (noVNC's stream) outlives the call timeout, which bounds the
// service's ordinary answers.
func TestGateway_SvcWebsocketOutlivesCallTimeout(t *testing.T) {
	up := websocket.Upgrader{}
	web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer c.Close()
		for {
			mt, b, err := c.ReadMessage()
			if err != nil {
				return
			}
			if err := c.WriteMessage(mt, b); err != nil {
				return
			}
		}
	}))
	t.Cleanup(web.Close)
	b := newBackend(t, "kv", false, "echo")
	_, srv := newGateway(t, gateway.Config{Services: []gateway.Backend{{Name: "browser-vnc", URL: web.URL}}, CallTimeout: 300 * time.Millisecond}, b)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	c, _, err := websocket.DefaultDialer.DialContext(ctx, "ws"+strings.TrimPrefix(srv.URL, "http")+"/svc/browser-vnc/websockify", http.Header{"Authorization": {"Bearer " + testToken}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	for i := range 3 {
		if i > 0 {
			time.Sleep(400 * time.Millisecond) // past the call timeout
		}
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		if err := c.WriteMessage(websocket.BinaryMessage, []byte{byte(i)}); err != nil {
			t.Fatalf("write %d: %v", i, err)
		}
		if _, got, err := c.ReadMessage(); err != nil || len(got) != 1 || got[0] != byte(i) {
			t.Fatalf("echo %d after %d call timeouts: %v %v", i, i, got, err)
		}
	}
}
