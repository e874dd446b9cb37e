package termtools_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/agent/termtools"
	"github.com/agentenv/agentenv/mcpclient"
)

// fakeShell is a double of a container's shell: it runs no process, it answers "echo TEXT"
// with TEXT, "sleep" by waiting out its timeout, any other command with exit code 3, and keeps
// files in a map.
type fakeShell struct {
	mu    sync.Mutex
	files map[string][]byte
	ran   []string
}

func (f *fakeShell) Run(ctx context.Context, command string, timeout time.Duration) (agent.TerminalResult, error) {
	f.mu.Lock()
	f.ran = append(f.ran, command)
	f.mu.Unlock()
	if text, ok := strings.CutPrefix(command, "echo "); ok {
		return agent.TerminalResult{Stdout: text + "\n"}, nil
	}
	if command == "sleep" {
		select {
		case <-ctx.Done():
			return agent.TerminalResult{}, ctx.Err()
		case <-time.After(timeout):
			return agent.TerminalResult{ExitCode: -1, TimedOut: true}, nil
		}
	}
	return agent.TerminalResult{ExitCode: 3, Stderr: "no such command\n"}, nil
}

func (f *fakeShell) ReadFile(_ context.Context, path string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, ok := f.files[path]
	if !ok {
		return nil, errors.New(path + ": no such file")
	}
	return data, nil
}

func (f *fakeShell) WriteFile(_ context.Context, path string, data []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[path] = data
	return nil
}

// serve starts Serve over a fresh fakeShell, writing to a trajectory in a temporary folder.
func serve(t *testing.T) (termtools.Endpoint, *fakeShell, *agent.Trajectory) {
	t.Helper()
	sh := &fakeShell{files: map[string][]byte{}}
	tr, err := agent.Create(filepath.Join(t.TempDir(), "t.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	ep, err := termtools.Serve(context.Background(), sh, tr, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ep.Close() })
	return ep, sh, tr
}

func callText(t *testing.T, ctx context.Context, cs *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	text, _ := mcpclient.Text(res)
	return text, res.IsError
}

func TestServeListsAndCallsTheTools(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep, sh, tr := serve(t)
	if !strings.HasPrefix(ep.URL, "http://127.0.0.1:") || !strings.HasSuffix(ep.URL, "/mcp") || len(ep.Token) < 32 {
		t.Fatalf("endpoint %q, token %q", ep.URL, ep.Token)
	}
	cs, err := mcpclient.Client{}.Connect(ctx, ep.URL, ep.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
		if tl.Description == "" || tl.InputSchema == nil {
			t.Errorf("tool %s has no description or schema", tl.Name)
		}
	}
	slices.Sort(names)
	if want := []string{"read_file", "run_command", "write_file"}; !slices.Equal(names, want) {
		t.Fatalf("tools %v, want %v", names, want)
	}

	if text, isErr := callText(t, ctx, cs, termtools.ToolRunCommand, map[string]any{"command": "echo hello"}); isErr || !strings.Contains(text, "exit code: 0") || !strings.Contains(text, "stdout:\nhello") {
		t.Errorf("run_command: %q (error %v)", text, isErr)
	}
	if text, isErr := callText(t, ctx, cs, termtools.ToolRunCommand, map[string]any{"command": "sleep", "timeout_sec": 0.05}); !isErr || !strings.Contains(text, "timed out after 50ms") {
		t.Errorf("run_command past its timeout: %q (error %v)", text, isErr)
	}
	if text, isErr := callText(t, ctx, cs, termtools.ToolWriteFile, map[string]any{"path": "/app/a.txt", "content": "abc"}); isErr || text != "wrote 3 bytes to /app/a.txt" {
		t.Errorf("write_file: %q (error %v)", text, isErr)
	}
	if got := string(sh.files["/app/a.txt"]); got != "abc" {
		t.Errorf("the file holds %q, want abc", got)
	}
	if text, isErr := callText(t, ctx, cs, termtools.ToolReadFile, map[string]any{"path": "/app/a.txt"}); isErr || text != "abc" {
		t.Errorf("read_file: %q (error %v)", text, isErr)
	}
	if text, isErr := callText(t, ctx, cs, termtools.ToolReadFile, map[string]any{"path": "/nope"}); !isErr || !strings.Contains(text, "no such file") {
		t.Errorf("read_file of a missing file: %q (error %v)", text, isErr)
	}
	if text, isErr := callText(t, ctx, cs, termtools.ToolRunCommand, map[string]any{}); !isErr || !strings.Contains(text, "command: want a non-empty string") {
		t.Errorf("run_command without a command: %q (error %v)", text, isErr)
	}
	if !slices.Equal(sh.ran, []string{"echo hello", "sleep"}) {
		t.Errorf("the shell ran %q", sh.ran)
	}

	// Every call is in the trajectory, its result after it under the same call id.
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(tr.Path())
	if err != nil {
		t.Fatal(err)
	}
	var lines []agent.Line
	for _, s := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var l agent.Line
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			t.Fatal(err)
		}
		lines = append(lines, l)
	}
	if len(lines) != 12 {
		t.Fatalf("%d trajectory lines, want 12 (6 calls, 6 results):\n%s", len(lines), data)
	}
	for i := 0; i < len(lines); i += 2 {
		c, r := lines[i], lines[i+1]
		if c.Kind != agent.KindToolCall || r.Kind != agent.KindToolResult || c.CallID == "" || c.CallID != r.CallID || c.Tool != r.Tool {
			t.Errorf("lines %d, %d: %+v then %+v, want a call and its result", i, i+1, c, r)
		}
	}
	if l := lines[0]; l.Tool != "run_command" || string(l.Arguments) != `{"command":"echo hello"}` {
		t.Errorf("first call %s %s", l.Tool, l.Arguments)
	}
	if l := lines[1]; !strings.Contains(l.Text, "hello") || l.IsError {
		t.Errorf("first result %+v", l)
	}
}

func TestServeRefusesWithoutTheToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep, sh, _ := serve(t)
	body := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"x","version":"1"}}}`
	for _, auth := range []string{"", "Bearer wrong", "Bearer " + ep.Token + "x", ep.Token} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, ep.URL, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Errorf("Authorization %q: %s, want 401", auth, resp.Status)
		}
	}
	if _, err := (mcpclient.Client{}).Connect(ctx, ep.URL, "wrong"); err == nil {
		t.Error("a client with a wrong token connected")
	}
	if len(sh.ran) != 0 {
		t.Errorf("the shell ran %q for refused requests", sh.ran)
	}
}

func TestCloseEndsTheServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ep, _, _ := serve(t)
	cs, err := mcpclient.Client{}.Connect(ctx, ep.URL, ep.Token) // a session with its standalone stream open
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	start := time.Now()
	if err := ep.Close(); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > termtools.CloseTimeout {
		t.Errorf("Close took %s", d)
	}
	if err := ep.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, ep.URL, nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("the server still answers after Close: %s", resp.Status)
	}
}

func TestCallsEndWithServesContext(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sctx, stop := context.WithCancel(ctx)
	ep, err := termtools.Serve(sctx, &fakeShell{files: map[string][]byte{}}, nil, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	cs, err := mcpclient.Client{NoStandaloneSSE: true}.Connect(ctx, ep.URL, ep.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	time.AfterFunc(200*time.Millisecond, stop)
	start := time.Now()
	text, isErr := callText(t, ctx, cs, termtools.ToolRunCommand, map[string]any{"command": "sleep", "timeout_sec": 60})
	if !isErr || !strings.Contains(text, "context canceled") || time.Since(start) > 10*time.Second {
		t.Errorf("a call when Serve's context ended: %q (error %v) after %s", text, isErr, time.Since(start))
	}
}
