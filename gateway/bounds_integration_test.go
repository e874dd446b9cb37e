//go:build integration

package gateway_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentenv/agentenv/gateway"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// serveBounded runs gateway.ListenAndServe (the bounded server a deployment runs) in front of
// backends on loopback until the test ends, and returns its base URL.
func serveBounded(t *testing.T, cfg gateway.Config, backends ...*testBackend) string {
	t.Helper()
	cfg.Token = testToken
	cfg.Name = "bounds"
	cfg.ConnectTimeout = 10 * time.Second
	for _, b := range backends {
		cfg.Servers = append(cfg.Servers, gateway.Backend{Name: b.name, URL: b.url})
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() { done <- gateway.ListenAndServe(ctx, "127.0.0.1:0", cfg, func(a string) { ready <- a }) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("ListenAndServe: %v", err)
			}
		case <-time.After(15 * time.Second):
			t.Error("gateway did not stop within 15s")
		}
	})
	select {
	case a := <-ready:
		return "http://" + a
	case err := <-done:
		t.Fatalf("ListenAndServe: %v", err)
	case <-time.After(20 * time.Second):
		t.Fatal("gateway not ready within 20s")
	}
	return ""
}

func raiseNoFile(t *testing.T, want uint64) {
	t.Helper()
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Fatal(err)
	}
	if rl.Cur < want {
		rl.Cur = min(want, rl.Max)
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
			t.Fatal(err)
		}
	}
	if rl.Cur < want {
		t.Fatalf("open-file limit %d below the %d this test needs", rl.Cur, want)
	}
}

// TestIdleConnectionsDoNotStopClient holds 2,000 keep-alive connections open on a gateway (each
// made one request, then idles) and checks a real MCP client still lists and calls a tool.
func TestIdleConnectionsDoNotStopClient(t *testing.T) {
	const idle = 2000
	raiseNoFile(t, 3*idle)
	gw := serveBounded(t, gateway.Config{}, newBackend(t, "alpha", false, "echo"))
	host := strings.TrimPrefix(gw, "http://")
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range idle {
		c, err := net.DialTimeout("tcp", host, 5*time.Second)
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		conns = append(conns, c)
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("idle connection %d: %v", i, err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		_ = c.SetDeadline(time.Time{})
	}
	cs := connect(t, gw, "", nil)
	start := time.Now()
	if names := listNames(t, cs); len(names) != 1 || names[0] != "echo" {
		t.Fatalf("tools with %d idle connections held: %v", idle, names)
	}
	listed := time.Since(start)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start = time.Now()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "hi"}})
	if err != nil || resultText(res) != "alpha/echo:hi" {
		t.Fatalf("call with %d idle connections held: %v %v", idle, res, err)
	}
	t.Logf("%d idle connections held; tools/list %v, tools/call %v", idle, listed, time.Since(start))
}

// TestSessionCap checks session N+1 is refused with a clear error and a closed session frees
// its slot.
func TestSessionCap(t *testing.T) {
	const max = 3
	gw := serveBounded(t, gateway.Config{MaxSessions: max}, newBackend(t, "alpha", false, "echo"))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dial := func() (*mcp.ClientSession, error) {
		c := mcp.NewClient(&mcp.Implementation{Name: "cap-client", Version: "1"}, nil)
		return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: gw + "/mcp", HTTPClient: authClient(""), MaxRetries: -1}, nil)
	}
	var open []*mcp.ClientSession
	defer func() {
		for _, cs := range open {
			_ = cs.Close()
		}
	}()
	for i := range max {
		cs, err := dial()
		if err != nil {
			t.Fatalf("session %d of %d: %v", i+1, max, err)
		}
		open = append(open, cs)
	}
	if cs, err := dial(); err == nil {
		_ = cs.Close()
		t.Fatalf("session %d opened past a cap of %d", max+1, max)
	} else if !strings.Contains(err.Error(), "Service Unavailable") {
		// The SDK client reports the status, not the body; the raw request below reads it.
		t.Fatalf("session %d refused with %v; want 503", max+1, err)
	}
	code, body, _ := do(t, "POST", gw+"/mcp", testToken,
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`,
		map[string]string{"Accept": "application/json, text/event-stream"})
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), `"code":-32001`) ||
		!strings.Contains(string(body), "too many MCP sessions") {
		t.Fatalf("raw initialize past the cap: %d %s; want 503 with JSON-RPC error -32001", code, body)
	}
	if err := open[0].Close(); err != nil {
		t.Fatalf("close session: %v", err)
	}
	open = open[1:]
	var err error
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var cs *mcp.ClientSession
		if cs, err = dial(); err == nil {
			open = append(open, cs)
			break
		}
	}
	if err != nil {
		t.Fatalf("after a session closed, a new one is still refused: %v", err)
	}
}

// TestStepMemoryBounded sends 500 /step calls with 4 MiB arguments (2 GiB in all, four times
// the bound, and the trajectory's 64 MiB default 30 times over) and checks the heap stays
// bounded (the trajectory keeps at most its byte bound; nothing else may pile up).
func TestStepMemoryBounded(t *testing.T) {
	const calls, bound = 500, 512 << 20
	b := newBackend(t, "alpha", false)
	mcp.AddTool(b.mcp, &mcp.Tool{Name: "size"}, func(ctx context.Context, req *mcp.CallToolRequest, in echoIn) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: fmt.Sprint(len(in.Text))}}}, nil, nil
	})
	gw := serveBounded(t, gateway.Config{}, b)
	arg := strings.Repeat("x", 4<<20-256)
	body := `{"tool":"size","arguments":{"text":"` + arg + `"}}`
	var peak uint64
	var mu sync.Mutex
	sample := func() {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		mu.Lock()
		peak = max(peak, ms.HeapInuse)
		mu.Unlock()
	}
	client := &http.Client{Timeout: 30 * time.Second}
	start := time.Now()
	var wg sync.WaitGroup
	errc := make(chan error, 4)
	next := make(chan int)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				req, _ := http.NewRequest(http.MethodPost, gw+"/step", strings.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+testToken)
				req.Header.Set("Content-Type", "application/json")
				resp, err := client.Do(req)
				if err != nil {
					errc <- fmt.Errorf("step %d: %w", i, err)
					return
				}
				out, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || !strings.Contains(string(out), fmt.Sprint(len(arg))) {
					errc <- fmt.Errorf("step %d: %d %.200s", i, resp.StatusCode, out)
					return
				}
				if i%100 == 0 {
					sample()
				}
			}
		}()
	}
feed:
	for i := range calls {
		select {
		case next <- i:
		case err := <-errc:
			t.Error(err)
			break feed
		}
	}
	close(next)
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	sample()
	t.Logf("%d /step calls of %d-byte arguments in %v; peak heap in use %d MiB (test process: gateway, backend and client)",
		calls, len(arg), time.Since(start).Round(time.Millisecond), peak>>20)
	if peak > bound {
		t.Fatalf("peak heap %d MiB, want < %d MiB", peak>>20, bound>>20)
	}
}

// TestStreamOutlivesTimeouts checks the standalone event stream of an MCP session is not cut
// by the server's read and write timeouts: a tools/list_changed sent after both have passed
// still reaches the client, and the session still calls a tool.
func TestStreamOutlivesTimeouts(t *testing.T) {
	a := newBackend(t, "a", false, "first")
	gw := serveBounded(t, gateway.Config{ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond}, a)
	changed := make(chan struct{}, 8)
	cs := connect(t, gw, "", &mcp.ClientOptions{ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
		changed <- struct{}{}
	}})
	if got := listNames(t, cs); len(got) != 1 {
		t.Fatalf("tools = %v", got)
	}
	time.Sleep(time.Second) // past both timeouts
	a.addEcho("second")
	select {
	case <-changed:
	case <-time.After(5 * time.Second):
		t.Fatal("no tools/list_changed reached the client within 5s: the event stream was cut")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "second", Arguments: map[string]any{"text": "n"}})
	if err != nil || resultText(res) != "a/second:n" {
		t.Fatalf("call after the timeouts passed: %v, %v", res, err)
	}
}

// TestSlowlorisCut dribbles a request's headers at a gateway and checks the connection is cut
// by the header timeout (10 s by default) while a real client is still served.
func TestSlowlorisCut(t *testing.T) {
	gw := serveBounded(t, gateway.Config{}, newBackend(t, "a", false, "echo"))
	c, err := net.Dial("tcp", strings.TrimPrefix(gw, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 512)
	for {
		_, _ = io.WriteString(c, "X-Slow: 1\r\n")
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, err := c.Read(buf)
		if ne, ok := err.(net.Error); err == nil || !ok || !ne.Timeout() {
			break // the server answered (408) or closed the connection
		}
		if time.Since(start) > 20*time.Second {
			t.Fatal("dribbling client still connected after 20s; the header timeout is 10s")
		}
	}
	cut := time.Since(start)
	if cut < 9*time.Second {
		t.Fatalf("cut after %v, before the 10s header timeout: the test dribbled wrong", cut)
	}
	cs := connect(t, gw, "", nil)
	if got := listNames(t, cs); len(got) != 1 {
		t.Fatalf("tools after slowloris = %v", got)
	}
	t.Logf("slowloris connection cut after %v", cut.Round(time.Millisecond))
}
