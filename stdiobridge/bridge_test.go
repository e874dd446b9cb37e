package stdiobridge_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/internal/testproc"
	"github.com/agentenv/agentenv/stdiobridge"
)

// bridge is a running stdiobridge.Run in a test.
type bridge struct {
	url     string // base URL
	pidFile string
	logs    *testproc.Buffer
	cancel  context.CancelFunc
	done    chan error
}

// startBridge runs the bridge over the test binary in child mode and waits until it serves.
// The bridge is stopped at the end of the test.
func startBridge(tb testing.TB, mode string, stopTimeout time.Duration) *bridge {
	tb.Helper()
	b := &bridge{pidFile: filepath.Join(tb.TempDir(), "pid"), logs: &testproc.Buffer{}, done: make(chan error, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	ready := make(chan string, 1)
	opts := stdiobridge.Options{
		Listen:      "127.0.0.1:0",
		Command:     []string{os.Args[0], "-test.run=^$"},
		Env:         []string{childEnv + "=" + mode, pidFileEnv + "=" + b.pidFile},
		Logger:      slog.New(slog.NewTextHandler(b.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Ready:       func(addr string) { ready <- addr },
		StopTimeout: stopTimeout,
	}
	go func() { b.done <- stdiobridge.Run(ctx, opts) }()
	select {
	case addr := <-ready:
		b.url = "http://" + addr
	case err := <-b.done:
		cancel()
		tb.Fatalf("Run returned before serving: %v\nlogs:\n%s", err, b.logs)
	case <-time.After(30 * time.Second):
		cancel()
		tb.Fatalf("bridge not ready after 30s\nlogs:\n%s", b.logs)
	}
	tb.Cleanup(func() { b.stop(tb) })
	return b
}

// stop cancels the bridge, waits for Run and checks that the child is gone. It may be called
// more than once.
func (b *bridge) stop(tb testing.TB) {
	tb.Helper()
	b.cancel()
	if b.done == nil {
		return
	}
	select {
	case err := <-b.done:
		if err != nil {
			tb.Errorf("Run after cancel = %v, want nil", err)
		}
	case <-time.After(30 * time.Second):
		tb.Fatalf("Run did not return 30s after cancel\nlogs:\n%s", b.logs)
	}
	b.done = nil
	pid := b.childPID(tb)
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		tb.Errorf("child %d still exists after Run returned (kill 0: %v)", pid, err)
	}
}

func (b *bridge) childPID(tb testing.TB) int {
	tb.Helper()
	raw, err := os.ReadFile(b.pidFile)
	if err != nil {
		tb.Fatalf("child pid: %v", err)
	}
	pid, err := strconv.Atoi(string(raw))
	if err != nil {
		tb.Fatalf("child pid %q: %v", raw, err)
	}
	return pid
}

// connect opens an MCP session to the bridge, closed at the end of the test.
func connect(tb testing.TB, ctx context.Context, url string) *mcp.ClientSession {
	tb.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v0"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + envproto.MCPPath}, nil)
	if err != nil {
		tb.Fatalf("connect: %v", err)
	}
	tb.Cleanup(func() { _ = cs.Close() })
	return cs
}

// toolNames lists the session's tools.
func toolNames(ctx context.Context, cs *mcp.ClientSession) ([]string, error) {
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, t := range res.Tools {
		names = append(names, t.Name)
	}
	slices.Sort(names)
	return names, nil
}

// structured decodes a tool result's structured content into v.
func structured(tb testing.TB, res *mcp.CallToolResult, v any) {
	tb.Helper()
	if res.IsError {
		tb.Fatalf("tool error: %v", res.Content)
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		tb.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		tb.Fatalf("decode %s: %v", raw, err)
	}
}

func healthStatus(tb testing.TB, url string) int {
	tb.Helper()
	res, err := http.Get(url + "/healthz")
	if err != nil {
		tb.Fatal(err)
	}
	res.Body.Close()
	return res.StatusCode
}

func TestRun_KV(t *testing.T) {
	b := startBridge(t, "kv", 0)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()

	cs := connect(t, ctx, b.url)
	names, err := toolNames(ctx, cs)
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	if want := []string{"delete", "get", "list", "set"}; !slices.Equal(names, want) {
		t.Errorf("tools = %v, want %v", names, want)
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "set", Arguments: map[string]any{"key": "a", "value": "1"}}); err != nil {
		t.Fatalf("set: %v", err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "get", Arguments: map[string]any{"key": "a"}})
	if err != nil {
		t.Fatalf("get: %v", err)
	}
	var got struct {
		Value string `json:"value"`
		Found bool   `json:"found"`
	}
	structured(t, res, &got)
	if got.Value != "1" || !got.Found {
		t.Errorf("get a = %+v, want 1, found", got)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "set", Arguments: map[string]any{"value": "no key"}})
	if err != nil || !res.IsError {
		t.Errorf("set without key: %+v, %v; want a tool error forwarded from the child", res, err)
	}

	if s := healthStatus(t, b.url); s != http.StatusOK {
		t.Errorf("healthz = %d, want 200", s)
	}
	resp, err := http.Get(b.url + envproto.CardPath)
	if err != nil {
		t.Fatal(err)
	}
	var card envproto.Card
	err = json.NewDecoder(resp.Body).Decode(&card)
	resp.Body.Close()
	if err != nil || card.Name != "kv" || len(card.Capabilities.Tools) != 4 || len(card.Capabilities.Tools[0].InputSchema) == 0 || card.HasDataPlane() {
		t.Errorf("card = %+v (err %v), want kv with 4 tools and their schemas, no data plane", card, err)
	}

	t.Run("concurrent clients", func(t *testing.T) {
		const n = 8
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			wg.Go(func() {
				errs <- kvClient(ctx, b.url, i)
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Error(err)
			}
		}
	})

	b.stop(t)
	if !strings.Contains(b.logs.String(), "stdio server stopped") {
		t.Errorf("logs do not report the child stopped:\n%s", b.logs)
	}
}

// kvClient is one of several concurrent clients: its own session, its own keys.
func kvClient(ctx context.Context, url string, i int) error {
	c := mcp.NewClient(&mcp.Implementation{Name: fmt.Sprint("client-", i), Version: "v0"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url + envproto.MCPPath}, nil)
	if err != nil {
		return fmt.Errorf("client %d: connect: %w", i, err)
	}
	defer cs.Close()
	for j := range 5 {
		key, value := fmt.Sprintf("c%d/k%d", i, j), fmt.Sprintf("v%d-%d", i, j)
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "set", Arguments: map[string]any{"key": key, "value": value}}); err != nil {
			return fmt.Errorf("client %d: set %s: %w", i, key, err)
		}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "list", Arguments: map[string]any{"prefix": fmt.Sprintf("c%d/", i)}})
	if err != nil {
		return fmt.Errorf("client %d: list: %w", i, err)
	}
	raw, _ := json.Marshal(res.StructuredContent)
	var got struct {
		Entries []struct{ Key, Value string } `json:"entries"`
	}
	if err := json.Unmarshal(raw, &got); err != nil || len(got.Entries) != 5 || got.Entries[4].Value != fmt.Sprintf("v%d-4", i) {
		return fmt.Errorf("client %d: list = %s (err %v), want its 5 entries", i, raw, err)
	}
	return nil
}

func TestRun_ChildExits(t *testing.T) {
	b := startBridge(t, "crashy", 0)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cs := connect(t, ctx, b.url)

	hung := make(chan error, 1)
	go func() {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "hang", Arguments: map[string]any{}})
		hung <- err
	}()
	time.Sleep(200 * time.Millisecond) // let the hang call reach the child

	start := time.Now()
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "exit", Arguments: map[string]any{}}); err == nil || !strings.Contains(err.Error(), "stdio server exited") {
		t.Errorf("exit call error = %v, want one saying the stdio server exited", err)
	}
	select {
	case err := <-hung:
		if err == nil || !strings.Contains(err.Error(), "stdio server exited") {
			t.Errorf("pending call error = %v, want one saying the stdio server exited", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("pending call still running 10s after the child exited")
	}
	_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "x"}})
	if err == nil || !strings.Contains(err.Error(), "stdio server exited") {
		t.Errorf("call after exit error = %v, want one saying the stdio server exited", err)
	}
	if d := time.Since(start); d > 8*time.Second {
		t.Errorf("calls took %v to fail after the child exited, want fast", d)
	}
	if s := healthStatus(t, b.url); s != http.StatusServiceUnavailable {
		t.Errorf("healthz after exit = %d, want 503", s)
	}
	logs := b.logs.String()
	for _, want := range []string{"stdio server exited", "exit status 3", "dying now"} {
		if !strings.Contains(logs, want) {
			t.Errorf("logs lack %q:\n%s", want, logs)
		}
	}
	b.stop(t)
	if n := strings.Count(b.logs.String(), "stdio server started"); n != 1 {
		t.Errorf("child started %d times, want once (no restart)", n)
	}
}

func TestRun_ListChanged(t *testing.T) {
	b := startBridge(t, "crashy", 0)
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	cs := connect(t, ctx, b.url)

	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "grow", Arguments: map[string]any{}}); err != nil {
		t.Fatalf("grow: %v", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		names, err := toolNames(ctx, cs)
		if err != nil {
			t.Fatalf("ListTools: %v", err)
		}
		if slices.Contains(names, "extra") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("tools = %v 15s after the child's list_changed, want extra among them", names)
		}
		time.Sleep(50 * time.Millisecond)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "extra", Arguments: map[string]any{}})
	if err != nil {
		t.Fatalf("extra: %v", err)
	}
	var got struct{ Text string }
	structured(t, res, &got)
	if got.Text != "extra" {
		t.Errorf("extra = %+v, want text extra", got)
	}
}

func TestRun_StubbornChildIsKilled(t *testing.T) {
	b := startBridge(t, "stubborn", 300*time.Millisecond)
	start := time.Now()
	b.stop(t)
	if d := time.Since(start); d > 10*time.Second {
		t.Errorf("stop took %v, want it bounded by the stop timeouts", d)
	}
	if logs := b.logs.String(); !strings.Contains(logs, "SIGKILL") {
		t.Errorf("logs do not show the SIGKILL escalation:\n%s", logs)
	}
}

func TestRun_StartFailures(t *testing.T) {
	tests := []struct {
		name    string
		command []string
		env     []string
		want    string
	}{
		{"no command", nil, nil, "no command"},
		{"missing program", []string{filepath.Join(t.TempDir(), "nope")}, nil, "start"},
		{"exits before initialize", []string{os.Args[0], "-test.run=^$"}, []string{childEnv + "=exit-now"}, "exit status 4"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			err := stdiobridge.Run(ctx, stdiobridge.Options{Listen: "127.0.0.1:0", Command: tt.command, Env: tt.env,
				Ready: func(string) { t.Error("Ready called for a bridge that cannot start") }})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Run = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
