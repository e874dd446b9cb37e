package gateway_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentenv/agentenv/gateway"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/envproto"
)

// addBlocking adds a tool that reports on started and answers "<server>/<tool>:done" once
// release is closed, or "cancelled" on cancelled when its call is cancelled first.
func (b *testBackend) addBlocking(tool string, started chan<- string, release <-chan struct{}, cancelled chan<- string) {
	mcp.AddTool(b.mcp, &mcp.Tool{Name: tool},
		func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			started <- b.name + "/" + tool
			select {
			case <-release:
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: b.name + "/" + tool + ":done"}}}, nil, nil
			case <-ctx.Done():
				if cancelled != nil {
					cancelled <- b.name + "/" + tool
				}
				return nil, nil, ctx.Err()
			}
		})
}

// rawSession initializes a gateway MCP session by hand and returns the headers of its later
// requests.
func rawSession(t *testing.T, gwURL, role string) map[string]string {
	t.Helper()
	hdr := map[string]string{"Accept": "application/json, text/event-stream"}
	if role != "" {
		hdr[gateway.RoleHeader] = role
	}
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"1"}}}`
	code, body, h := do(t, "POST", gwURL+"/mcp", testToken, init, hdr)
	if code != 200 || h.Get("Mcp-Session-Id") == "" {
		t.Fatalf("initialize: %d %s", code, body)
	}
	hdr["Mcp-Session-Id"] = h.Get("Mcp-Session-Id")
	hdr["MCP-Protocol-Version"] = "2025-11-25"
	if code, body, _ := do(t, "POST", gwURL+"/mcp", testToken, `{"jsonrpc":"2.0","method":"notifications/initialized"}`, hdr); code != http.StatusAccepted {
		t.Fatalf("initialized: %d %s", code, body)
	}
	return hdr
}

// answerOf decodes a JSON-RPC answer into a generic value, to compare answers as JSON.
func answerOf(t *testing.T, body []byte) map[string]any {
	t.Helper()
	var v map[string]any
	if err := json.Unmarshal(body, &v); err != nil {
		t.Fatalf("answer %q: %v", body, err)
	}
	return v
}

// The fast path and the SDK path answer every kind of request alike: a result, a tools/list,
// an unknown tool, a tool disabled for the role, a backend's own JSON-RPC error.
func TestFastPath_AnswersAsTheSDKPath(t *testing.T) {
	be := startBackend(t, "a", backendOpts{count: true}, "echo", "secret")
	_, gw := newGateway(t, gateway.Config{Roles: map[string][]string{"agent": {"secret"}}}, be)
	fast := rawSession(t, gw.URL, "agent")
	// Without the protocol-version header (which the SDK allows) a request goes to the SDK.
	sdk := map[string]string{}
	for k, v := range fast {
		if k != "MCP-Protocol-Version" {
			sdk[k] = v
		}
	}
	for _, req := range []string{
		`{"jsonrpc":"2.0","id":7,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hi"}}}`,
		`{"jsonrpc":"2.0","id":"s","method":"tools/call","params":{"name":"echo","arguments":{"text":"<&>"},"_meta":{"k":1,"agentenv.io/role":"spoof"}}}`,
		`{"jsonrpc":"2.0","id":8,"method":"tools/call","params":{"name":"echo"}}`,
		`{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"nope","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":10,"method":"tools/call","params":{"name":"secret","arguments":{}}}`,
		`{"jsonrpc":"2.0","id":11,"method":"tools/call","params":{"name":"echo","arguments":{"text":5}}}`,
		`{"jsonrpc":"2.0","id":12,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":13,"method":"tools/list","params":{}}`,
	} {
		before := be.forwarded.Load()
		codeF, bodyF, hF := do(t, "POST", gw.URL+"/mcp", testToken, req, fast)
		forwarded := be.forwarded.Load() - before
		codeS, bodyS, _ := do(t, "POST", gw.URL+"/mcp", testToken, req, sdk)
		if codeF != codeS || !reflect.DeepEqual(answerOf(t, bodyF), answerOf(t, bodyS)) {
			t.Errorf("%s:\nfast %d %s\nsdk  %d %s", req, codeF, bodyF, codeS, bodyS)
		}
		if ct := hF.Get("Content-Type"); ct != "application/json" {
			t.Errorf("%s: fast answer content type %q", req, ct)
		}
		if strings.Contains(req, `"echo"`) && forwarded != 1 {
			t.Errorf("%s: %d calls reached the backend by the fast path, want 1", req, forwarded)
		}
	}
	if be.sdk.Load() == 0 {
		t.Error("no call went through the SDK path: the comparison compared the fast path with itself")
	}
}

// A backend that answers with an event stream, sending a notification and requests of its own
// (ping, roots/list) before its answer, is relayed by the fast path.
func TestFastPath_EventStreamBackend(t *testing.T) {
	be := startBackend(t, "s", backendOpts{sse: true, count: true}, "echo")
	mcp.AddTool(be.mcp, &mcp.Tool{Name: "chatty"},
		func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
			_ = req.Session.NotifyProgress(ctx, &mcp.ProgressNotificationParams{ProgressToken: "p", Progress: 1, Message: "half"})
			if err := req.Session.Ping(ctx, nil); err != nil {
				return nil, nil, fmt.Errorf("ping the client: %w", err)
			}
			// Roots stay in the protocol through their deprecation window: the fast path
			// answers them as the SDK client does.
			roots, err := req.Session.ListRoots(ctx, nil) //lint:ignore SA1019 still served while deprecated
			if err != nil {
				return nil, nil, fmt.Errorf("list roots: %w", err)
			}
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprintf("pinged, roots:%d:%s", len(roots.Roots), in.Text)}}}, nil, nil
		})
	_, gw := newGateway(t, gateway.Config{}, be)
	cs := connect(t, gw.URL, "", nil)
	for i, c := range []struct{ tool, want string }{{"echo", "s/echo:a"}, {"chatty", "pinged, roots:0:a"}, {"echo", "s/echo:a"}} {
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: c.tool, Arguments: map[string]any{"text": "a"}})
		cancel()
		if err != nil || res.IsError || resultText(res) != c.want {
			t.Fatalf("call %d %s = %v (%s), %v; want %q", i, c.tool, res, resultText(res), err, c.want)
		}
	}
	if n := be.forwarded.Load(); n != 3 {
		t.Errorf("%d calls reached the event-stream backend by the fast path, want 3", n)
	}
}

// 256 sessions, each with calls in flight at once, get every answer, each to its own call.
func TestFastPath_NoLostOrCrossedAnswers(t *testing.T) {
	const sessions, rounds, inFlight = 256, 3, 2
	be := startBackend(t, "a", backendOpts{count: true}, "echo")
	_, gw := newGateway(t, gateway.Config{}, be)
	clients := openSessions(t, gw.URL+"/mcp", sessions, authClientOpt())
	var wg sync.WaitGroup
	errs := make(chan error, sessions*rounds*inFlight)
	for i, cs := range clients {
		wg.Go(func() {
			for r := range rounds {
				var round sync.WaitGroup
				for c := range inFlight {
					round.Go(func() {
						text := fmt.Sprintf("s%d-r%d-c%d", i, r, c)
						ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
						defer cancel()
						res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}})
						switch {
						case err != nil:
							errs <- fmt.Errorf("%s: %w", text, err)
						case resultText(res) != "a/echo:"+text:
							errs <- fmt.Errorf("%s: answered %q", text, resultText(res))
						}
					})
				}
				round.Wait()
			}
		})
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Fatalf("%d of %d calls lost or crossed", n, sessions*rounds*inFlight)
	}
	if got, want := be.forwarded.Load(), int64(sessions*rounds*inFlight); got != want {
		t.Errorf("%d calls reached the backend by the fast path, want %d", got, want)
	}
	_, body, _ := do(t, "GET", gw.URL+"/state", testToken, nil, nil)
	var st gateway.State
	if err := json.Unmarshal(body, &st); err != nil || st.Calls != sessions*rounds*inFlight {
		t.Errorf("state calls = %d (%v), want %d", st.Calls, err, sessions*rounds*inFlight)
	}
}

// A session the fast path keeps busy does not time out; an idle one does, and then gets 404.
func TestFastPath_SessionTimeout(t *testing.T) {
	const timeout = 400 * time.Millisecond
	_, gw := newGateway(t, gateway.Config{SessionTimeout: timeout}, newBackend(t, "a", false, "echo"))
	hdr := rawSession(t, gw.URL, "")
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`
	for end := time.Now().Add(3 * timeout); time.Now().Before(end); time.Sleep(timeout / 4) {
		if code, body, _ := do(t, "POST", gw.URL+"/mcp", testToken, call, hdr); code != 200 {
			t.Fatalf("call on a busy session: %d %s", code, body)
		}
	}
	time.Sleep(2 * timeout)
	if code, body, _ := do(t, "POST", gw.URL+"/mcp", testToken, call, hdr); code != http.StatusNotFound {
		t.Errorf("call on a session idle past its timeout: %d %s, want 404", code, body)
	}
}

// Cancelling a call on the fast path cancels it at the backend.
func TestFastPath_Cancel(t *testing.T) {
	be := newBackend(t, "a", false)
	started, cancelled := make(chan string, 1), make(chan string, 1)
	be.addBlocking("wait", started, make(chan struct{}), cancelled)
	_, gw := newGateway(t, gateway.Config{}, be)
	cs := connect(t, gw.URL, "", nil)
	ctx, cancel := context.WithCancel(t.Context())
	errc := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "wait", Arguments: map[string]any{"text": ""}})
		errc <- err
	}()
	select {
	case <-started:
	case <-time.After(5 * time.Second):
		t.Fatal("the call did not start within 5s")
	}
	cancel()
	select {
	case <-cancelled:
	case <-time.After(5 * time.Second):
		t.Fatal("the backend's call was not cancelled within 5s")
	}
	if err := <-errc; err == nil {
		t.Error("the cancelled call succeeded")
	}
}

// Consistent mode runs one call at a time per server by default, and across the gateway with
// serialize "env".
func TestGateway_ConsistentModeLanes(t *testing.T) {
	for _, scope := range []string{"", gateway.SerializeEnv} {
		t.Run("serialize="+scope, func(t *testing.T) {
			a, b := newBackend(t, "a", false), newBackend(t, "b", false, "echo_b")
			started, release := make(chan string, 4), make(chan struct{})
			a.addBlocking("slow", started, release, nil)
			a.addBlocking("slow2", started, release, nil)
			_, gw := newGateway(t, gateway.Config{Mode: gateway.ModeConsistent, Serialize: scope}, a, b)
			cs := connect(t, gw.URL, "", nil)
			call := func(tool string) <-chan error {
				errc := make(chan error, 1)
				go func() {
					ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
					defer cancel()
					_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": ""}})
					errc <- err
				}()
				return errc
			}
			slow := call("slow")
			if got := <-started; got != "a/slow" {
				t.Fatalf("started %s", got)
			}
			slow2, other := call("slow2"), call("echo_b")
			select {
			case err := <-other:
				if scope == gateway.SerializeEnv {
					t.Errorf("a call to b ran (%v) while one to a held the gateway's one lane", err)
				} else if err != nil {
					t.Errorf("call to b: %v", err)
				}
			case <-time.After(time.Second):
				if scope != gateway.SerializeEnv {
					t.Error("a call to b waited for a call to a: lanes are not per server")
				}
			}
			select {
			case s := <-started:
				t.Errorf("%s started while a/slow held a's lane", s)
			case <-time.After(200 * time.Millisecond):
			}
			close(release)
			for _, c := range []<-chan error{slow, slow2} {
				if err := <-c; err != nil {
					t.Errorf("call to a: %v", err)
				}
			}
			if scope == gateway.SerializeEnv {
				if err := <-other; err != nil {
					t.Errorf("call to b: %v", err)
				}
			}
		})
	}
}

// The trajectory keeps at most TrajectoryBytes of calls: the oldest go first, /state counts
// them, and GET /trajectory streams the newest in order.
func TestGateway_TrajectoryBoundInBytes(t *testing.T) {
	_, gw := newGateway(t, gateway.Config{TrajectoryBytes: 4096}, newBackend(t, "a", false, "echo"))
	cs := connect(t, gw.URL, "", nil)
	const calls = 40
	for i := range calls {
		text := fmt.Sprintf("%03d-%s", i, strings.Repeat("x", 100))
		if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": text}}); err != nil {
			t.Fatal(err)
		}
	}
	code, body, _ := do(t, "GET", gw.URL+"/trajectory", testToken, nil, nil)
	if code != 200 || len(body) > 4096 || len(body) == 0 {
		t.Fatalf("trajectory: %d, %d bytes, want at most 4096", code, len(body))
	}
	lines := strings.Split(strings.TrimSpace(string(body)), "\n")
	var first, last envproto.CallRecord
	if json.Unmarshal([]byte(lines[0]), &first) != nil || json.Unmarshal([]byte(lines[len(lines)-1]), &last) != nil {
		t.Fatalf("trajectory lines: %s", body)
	}
	if last.ID != calls || first.ID != calls-int64(len(lines))+1 {
		t.Errorf("trajectory holds ids %d..%d in %d lines, want the newest up to %d", first.ID, last.ID, len(lines), calls)
	}
	_, body, _ = do(t, "GET", gw.URL+"/state", testToken, nil, nil)
	var st gateway.State
	if err := json.Unmarshal(body, &st); err != nil || st.Calls != calls || st.CallsDropped != calls-int64(len(lines)) {
		t.Errorf("state calls %d dropped %d (%v), want %d and %d", st.Calls, st.CallsDropped, err, calls, calls-len(lines))
	}
}

// What the SDK refuses on an established session, the fast path leaves to it: a Host that is
// not loopback on a loopback listener (DNS rebinding), a missing Accept type, a body over the
// SDK's limit.
func TestFastPath_LeavesRefusalsToTheSDK(t *testing.T) {
	_, gw := newGateway(t, gateway.Config{}, newBackend(t, "a", false, "echo"))
	hdr := rawSession(t, gw.URL, "")
	call := `{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`
	post := func(body string, edit func(*http.Request)) int {
		req, err := http.NewRequestWithContext(t.Context(), "POST", gw.URL+"/mcp", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testToken)
		req.Header.Set("Content-Type", "application/json")
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		edit(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post(call, func(*http.Request) {}); code != 200 {
		t.Fatalf("call: %d", code)
	}
	if code := post(call, func(r *http.Request) { r.Host = "evil.example" }); code != http.StatusForbidden {
		t.Errorf("call with a rebound Host: %d, want 403", code)
	}
	if code := post(call, func(r *http.Request) { r.Header.Set("Accept", "application/json") }); code != http.StatusBadRequest {
		t.Errorf("call without text/event-stream in Accept: %d, want 400", code)
	}
	big := strings.Replace(call, `"x"`, `"`+strings.Repeat("x", int(mcp.DefaultMaxRequestBodyBytes))+`"`, 1)
	if code := post(big, func(*http.Request) {}); code != http.StatusRequestEntityTooLarge {
		t.Errorf("call over the body limit: %d, want 413", code)
	}
}
