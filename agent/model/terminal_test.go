package model_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/agent/model"
	"github.com/agentenv/agentenv/agent/model/modeltest"
	"github.com/agentenv/agentenv/agent/termtools"
)

// shell is a test double of a container's shell (an agent.Terminal), standing in for a
// sandbox the unit tests of the loop do not start: its files are a map, and it knows a few
// commands: "cat PATH", "big N" (N bytes of stdout, the last line "END"), "sleep" (runs until
// its timeout or ctx ends, then says it was stopped); any other command prints its text on
// stderr and exits 2. It records each command's timeout.
type shell struct {
	mu       sync.Mutex
	files    map[string]string
	timeouts map[string]time.Duration
}

func newShell() *shell {
	return &shell{files: map[string]string{}, timeouts: map[string]time.Duration{}}
}

func (s *shell) Run(ctx context.Context, command string, timeout time.Duration) (agent.TerminalResult, error) {
	s.mu.Lock()
	s.timeouts[command] = timeout
	s.mu.Unlock()
	switch {
	case strings.HasPrefix(command, "cat "):
		data, err := s.ReadFile(ctx, strings.TrimPrefix(command, "cat "))
		if err != nil {
			return agent.TerminalResult{ExitCode: 1, Stderr: err.Error()}, nil
		}
		return agent.TerminalResult{Stdout: string(data)}, nil
	case strings.HasPrefix(command, "big "):
		var n int
		fmt.Sscan(strings.TrimPrefix(command, "big "), &n)
		return agent.TerminalResult{Stdout: strings.Repeat("x", n-4) + "END\n", Stderr: "warn\n"}, nil
	case command == "sleep":
		select {
		case <-time.After(timeout):
			return agent.TerminalResult{ExitCode: 124, Stdout: "partial\n", TimedOut: true}, nil
		case <-ctx.Done():
			return agent.TerminalResult{}, ctx.Err()
		}
	}
	return agent.TerminalResult{ExitCode: 2, Stderr: "sh: " + command + ": not found\n"}, nil
}

func (s *shell) ReadFile(ctx context.Context, path string) ([]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	data, ok := s.files[path]
	if !ok {
		return nil, fmt.Errorf("%s: no such file", path)
	}
	return []byte(data), nil
}

func (s *shell) WriteFile(ctx context.Context, path string, data []byte) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.files[path] = string(data)
	return nil
}

func (s *shell) timeout(command string) time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.timeouts[command]
}

func callReply(id, name, args string) modeltest.Reply {
	return modeltest.Reply{Calls: []modeltest.Call{{ID: id, Name: name, Args: args}}, InputTokens: 10, OutputTokens: 1}
}

// toolResults returns the text of each tool result the model was sent, by call id, from the
// last request's messages (both APIs' shapes).
func toolResults(t *testing.T, req modeltest.Request) map[string]string {
	t.Helper()
	out := map[string]string{}
	msgs, _ := req.Body["messages"].([]any)
	for _, m := range msgs {
		m, _ := m.(map[string]any)
		if m["role"] == "tool" { // OpenAI
			id, _ := m["tool_call_id"].(string)
			out[id], _ = m["content"].(string)
			continue
		}
		blocks, _ := m["content"].([]any)
		for _, b := range blocks { // Anthropic
			b, _ := b.(map[string]any)
			if b["type"] == "tool_result" {
				id, _ := b["tool_use_id"].(string)
				out[id], _ = b["content"].(string)
			}
		}
	}
	return out
}

// TestTerminalTools runs the terminal tools on both APIs against the scripted model server
// and the shell double with no gateway: a file written, run and read back, a long output cut to
// its tail with a note, a command stopped at its timeout, and one whose default timeout the
// prompt's remaining wall time caps; each call is a tool_call and tool_result line.
func TestTerminalTools(t *testing.T) {
	for _, provider := range []string{model.OpenAI, model.Anthropic} {
		t.Run(provider, func(t *testing.T) {
			srv := modeltest.New(t,
				callReply("w", "write_file", `{"path":"/work/a.txt","content":"hello from the model"}`),
				callReply("r", "run_command", `{"command":"cat /work/a.txt"}`),
				callReply("f", "read_file", `{"path":"/work/a.txt"}`),
				callReply("b", "run_command", `{"command":"big 50000"}`),
				callReply("s", "run_command", `{"command":"sleep","timeout_sec":0.2}`),
				callReply("n", "run_command", `{"command":"nope"}`),
				callReply("x", "read_file", `{"path":"/missing"}`),
				modeltest.Reply{Text: "done", InputTokens: 10, OutputTokens: 1},
			)
			base := srv.OpenAIURL()
			if provider == model.Anthropic {
				base = srv.AnthropicURL()
			}
			a, err := model.New(model.Config{Provider: provider, BaseURL: base, Model: "m"})
			if err != nil {
				t.Fatal(err)
			}
			tr, err := agent.Create(filepath.Join(t.TempDir(), "tr.ndjson"))
			if err != nil {
				t.Fatal(err)
			}
			sh := newShell()
			ans, err := a.Prompt(t.Context(), agent.Prompt{Text: "work", Timeout: 30 * time.Second, Terminal: sh}, tr)
			agent.Finish(tr, ans, err)
			tr.Close()
			if err != nil || ans.Stop != agent.StopAnswer || ans.ToolCalls != 7 {
				t.Fatalf("Prompt = %+v, %v; want an answer after 7 calls", ans, err)
			}
			if sh.files["/work/a.txt"] != "hello from the model" {
				t.Errorf("files = %v, want /work/a.txt written", sh.files)
			}
			reqs := srv.Requests()
			tools, _ := json.Marshal(reqs[0].Body["tools"])
			for _, name := range []string{"run_command", "read_file", "write_file"} {
				if !strings.Contains(string(tools), `"name":"`+name+`"`) {
					t.Errorf("tools offered = %s, want %s", tools, name)
				}
			}
			got := toolResults(t, reqs[len(reqs)-1])
			want := map[string][]string{
				"w": {"wrote 20 bytes to /work/a.txt"},
				"r": {"exit code: 0\nstdout:\nhello from the model\nstderr:\n"},
				"f": {"hello from the model"},
				"b": {"exit code: 0", "[33616 bytes cut: the last 16384 follow]", "END\n", "stderr:\nwarn\n"},
				"s": {"timed out after 200ms: the command was stopped", "exit code: 124", "partial"},
				"n": {"exit code: 2", "sh: nope: not found"},
				"x": {"error: /missing: no such file"},
			}
			for id, subs := range want {
				for _, sub := range subs {
					if !strings.Contains(got[id], sub) {
						t.Errorf("result of %s = %.300q, want it to hold %q", id, got[id], sub)
					}
				}
			}
			if n := len(got["b"]); n > termtools.MaxStreamText+200 {
				t.Errorf("result of the long command is %d bytes, want about %d", n, termtools.MaxStreamText)
			}
			if d := sh.timeout("sleep"); d != 200*time.Millisecond {
				t.Errorf("sleep ran with timeout %s, want the 200ms asked", d)
			}
			if d := sh.timeout("cat /work/a.txt"); d > 30*time.Second || d < 25*time.Second {
				t.Errorf("a command without timeout_sec ran with %s, want the default capped by the 30s wall time left", d)
			}

			var calls, results []string
			for _, l := range readLines(t, tr.Path()) {
				switch l.Kind {
				case agent.KindToolCall:
					calls = append(calls, l.CallID+":"+l.Tool)
				case agent.KindToolResult:
					results = append(results, fmt.Sprintf("%s:%s:%v", l.CallID, l.Tool, l.IsError))
				}
			}
			if g, w := strings.Join(calls, " "), "w:write_file r:run_command f:read_file b:run_command s:run_command n:run_command x:read_file"; g != w {
				t.Errorf("tool_call lines = %s, want %s", g, w)
			}
			if g, w := strings.Join(results, " "), "w:write_file:false r:run_command:false f:read_file:false b:run_command:false s:run_command:true n:run_command:false x:read_file:true"; g != w {
				t.Errorf("tool_result lines = %s, want %s", g, w)
			}
		})
	}
}

// TestTerminalBeside offers a gateway whose tool is also called run_command beside a
// terminal: the gateway's keeps its name, the terminal's gets a suffix, and each call reaches
// its own; the trajectory names both run_command.
func TestTerminalBeside(t *testing.T) {
	var gatewayCalls int
	srv := mcp.NewServer(&mcp.Implementation{Name: "gw", Version: "v1"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "run_command", Description: "the env's own"}, func(ctx context.Context, req *mcp.CallToolRequest, a struct{}) (*mcp.CallToolResult, any, error) {
		gatewayCalls++
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "from the gateway"}}}, nil, nil
	})
	hs := httptest.NewServer(mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil))
	t.Cleanup(hs.Close)

	m := modeltest.New(t,
		callReply("g", "run_command", `{}`),
		callReply("t", "run_command_2", `{"command":"cat /f"}`),
		modeltest.Reply{Text: "done"},
	)
	a, err := model.New(model.Config{Provider: model.OpenAI, BaseURL: m.OpenAIURL(), Model: "m"})
	if err != nil {
		t.Fatal(err)
	}
	sh := newShell()
	sh.files["/f"] = "from the terminal"
	tr, err := agent.Create(filepath.Join(t.TempDir(), "tr.ndjson"))
	if err != nil {
		t.Fatal(err)
	}
	ans, err := a.Prompt(t.Context(), agent.Prompt{Text: "x", Gateway: agent.Gateway{URL: hs.URL}, Terminal: sh}, tr)
	tr.Close()
	if err != nil || ans.ToolCalls != 2 {
		t.Fatalf("Prompt = %+v, %v", ans, err)
	}
	got := toolResults(t, m.Requests()[2])
	if gatewayCalls != 1 || got["g"] != "from the gateway" || !strings.Contains(got["t"], "from the terminal") {
		t.Errorf("gateway calls %d, results %v", gatewayCalls, got)
	}
	for _, l := range readLines(t, tr.Path()) {
		if l.Kind == agent.KindToolCall && l.Tool != "run_command" {
			t.Errorf("tool_call line names %q, want run_command", l.Tool)
		}
	}
	if _, err := a.Prompt(t.Context(), agent.Prompt{Text: "x"}, &agent.Trajectory{}); err == nil || !strings.Contains(err.Error(), "neither a gateway nor a terminal") {
		t.Errorf("Prompt without gateway or terminal = %v", err)
	}
}
