package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"

	"github.com/agentenv/agentenv/agent"
)

// echoAgent answers with what it was given; it is the agent under the real A2A server.
type echoAgent struct {
	mu   sync.Mutex
	got  []agent.Prompt
	err  error
	data json.RawMessage
}

func (a *echoAgent) Prompt(ctx context.Context, p agent.Prompt, tr *agent.Trajectory) (agent.Answer, error) {
	a.mu.Lock()
	a.got = append(a.got, p)
	a.mu.Unlock()
	tr.Write(agent.Line{Kind: agent.KindToolCall, Tool: "notes_add", Arguments: json.RawMessage(`{"title":"x"}`)})
	tr.Write(agent.Line{Kind: agent.KindToolResult, Tool: "notes_add", Text: "ok"})
	if a.err != nil {
		return agent.Answer{}, a.err
	}
	return agent.Answer{Text: "echo: " + p.Text, Structured: a.data, Stop: agent.StopAnswer}, nil
}

func (a *echoAgent) last(t *testing.T) agent.Prompt {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.got) == 0 {
		t.Fatal("the agent was never prompted")
	}
	return a.got[len(a.got)-1]
}

// front sits before a real Server: it records the extension calls and can strip the card's
// extensions or serve the card only at the legacy path.
type front struct {
	srv        *Server
	keep       map[string]bool // extensions the card keeps; nil keeps all
	legacyOnly bool
	fields     []string // if set, the agent-config fields the card lists

	mu    sync.Mutex
	calls map[string][]string // path -> bodies
}

func (f *front) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if strings.HasPrefix(r.URL.Path, "/ext/") {
		b, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		if f.calls == nil {
			f.calls = map[string][]string{}
		}
		f.calls[r.URL.Path] = append(f.calls[r.URL.Path], string(b))
		f.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	if r.URL.Path == CardPath || r.URL.Path == LegacyCardPath {
		if f.legacyOnly && r.URL.Path == CardPath {
			http.NotFound(w, r)
			return
		}
		c := f.srv.Card("http://" + r.Host)
		var exts []sdk.AgentExtension
		for _, e := range c.Capabilities.Extensions {
			if f.keep != nil && !f.keep[e.URI] {
				continue
			}
			if e.URI == ExtAgentConfig && f.fields != nil {
				e.Params = map[string]any{"endpoint": "/ext/agent-config", "methods": map[string]any{"set": map[string]any{"request": map[string]any{"optional": f.fields}}}}
			}
			exts = append(exts, e)
		}
		c.Capabilities.Extensions = exts
		writeJSON(w, http.StatusOK, c)
		return
	}
	f.srv.ServeHTTP(w, r)
}

func (f *front) bodies(path string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[path]
}

func serve(t *testing.T, ag agent.Agent, f *front) string {
	t.Helper()
	srv, err := NewServer(ag, ServerOptions{Name: "echo", Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	f.srv = srv
	ts := httptest.NewServer(f)
	t.Cleanup(ts.Close)
	return ts.URL
}

func trajectory(t *testing.T) (*agent.Trajectory, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "t.jsonl")
	tr, err := agent.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr, path
}

func testPrompt() agent.Prompt {
	return agent.Prompt{
		Text: "add a note", Model: "m1", SystemPrompt: "be brief", MaxTurns: 3, Timeout: 20 * time.Second,
		Gateway: agent.Gateway{Name: "notes", URL: "http://gw:8080/mcp", Headers: map[string]string{"Authorization": "Bearer tok"}},
	}
}

func TestParseCard(t *testing.T) {
	tests := []struct {
		name     string
		card     string
		endpoint string
		exts     []string
		fields   []string
	}{
		{"no extensions", `{"name":"a","url":"http://0.0.0.0:9/a2a","preferredTransport":"JSONRPC"}`, "http://h:1/a2a", nil, nil},
		{"three extensions, own endpoint", `{"name":"a","url":"http://inside:9/rpc","capabilities":{"extensions":[
			{"uri":"urn:agentenv:mcp-config/v1","params":{"endpoint":"/x/mcp"}},
			{"uri":"urn:agentenv:agent-config/v1","params":{"methods":{"set":{"request":{"supported":["model","max_turns"]}}}}},
			{"uri":"urn:agentenv:trajectory/v1"},
			{"uri":"urn:other:thing/v1"}]}}`, "http://h:1/rpc",
			[]string{ExtAgentConfig, ExtMCPConfig, ExtTrajectory}, []string{"model", "max_turns"}},
		{"jsonrpc as an additional interface", `{"name":"a","url":"http://h/g","preferredTransport":"GRPC","additionalInterfaces":[{"url":"http://x/j","transport":"JSONRPC"}]}`, "http://h:1/j", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := ParseCard("http://h:1", []byte(tt.card))
			if err != nil {
				t.Fatal(err)
			}
			if c.Endpoint != tt.endpoint {
				t.Errorf("endpoint %q, want %q", c.Endpoint, tt.endpoint)
			}
			var got []string
			for _, u := range []string{ExtAgentConfig, ExtMCPConfig, ExtTrajectory} {
				if c.Has(u) {
					got = append(got, u)
				}
			}
			if strings.Join(got, ",") != strings.Join(tt.exts, ",") {
				t.Errorf("extensions %v, want %v", got, tt.exts)
			}
			if f := c.Extensions[ExtAgentConfig].Fields; strings.Join(f, ",") != strings.Join(tt.fields, ",") {
				t.Errorf("agent-config fields %v, want %v", f, tt.fields)
			}
			if c.Has(ExtMCPConfig) && c.Extensions[ExtMCPConfig].Endpoint != "http://h:1/x/mcp" {
				t.Errorf("mcp-config endpoint %q", c.Extensions[ExtMCPConfig].Endpoint)
			}
		})
	}
	if _, err := ParseCard("http://h:1", []byte(`{"name":"a","preferredTransport":"GRPC"}`)); err == nil || !strings.Contains(err.Error(), "no JSONRPC") {
		t.Errorf("a gRPC-only card: %v, want no JSONRPC interface", err)
	}
	if _, err := ParseCard("http://h:1", []byte(`{`)); err == nil {
		t.Error("a broken card parsed")
	}
}

func TestPromptWithExtensions(t *testing.T) {
	ag := &echoAgent{}
	f := &front{}
	base := serve(t, ag, f)
	tr, path := trajectory(t)
	ans, err := New(base, Options{}).Prompt(context.Background(), testPrompt(), tr)
	if err != nil {
		t.Fatal(err)
	}
	if ans.Text != "echo: add a note" || ans.Stop != agent.StopAnswer {
		t.Errorf("answer %+v", ans)
	}
	p := ag.last(t)
	if p.Gateway.URL != "http://gw:8080/mcp" || p.Gateway.Headers["Authorization"] != "Bearer tok" || p.Gateway.Name != "notes" {
		t.Errorf("the agent got gateway %+v", p.Gateway)
	}
	if p.Model != "m1" || p.SystemPrompt != "be brief" || p.MaxTurns != 3 || p.Timeout != 20*time.Second {
		t.Errorf("the agent got config %+v", p)
	}
	if b := f.bodies("/ext/mcp-config"); len(b) != 1 || !strings.Contains(b[0], `"url":"http://gw:8080/mcp"`) {
		t.Errorf("mcp-config calls %q", b)
	}
	tr.Close()
	raw, _ := os.ReadFile(path)
	if !strings.Contains(string(raw), `"kind":"tool_call"`) || !strings.Contains(string(raw), `"tool":"notes_add"`) || ans.ToolCalls != 1 {
		t.Errorf("trajectory (%d tool calls):\n%s", ans.ToolCalls, raw)
	}
}

func TestPromptWithoutExtensions(t *testing.T) {
	ag := &echoAgent{}
	f := &front{keep: map[string]bool{}}
	base := serve(t, ag, f)
	tr, _ := trajectory(t)
	if _, err := New(base, Options{}).Prompt(context.Background(), testPrompt(), tr); err != nil {
		t.Fatal(err)
	}
	if len(f.calls) != 0 {
		t.Errorf("extension routes called though the card lists none: %v", f.calls)
	}
	p := ag.last(t)
	if p.Gateway.URL != "http://gw:8080/mcp" || p.Gateway.Headers["Authorization"] != "Bearer tok" {
		t.Errorf("without mcp-config the agent got gateway %+v, want it from the metadata", p.Gateway)
	}
	if p.Model != "" {
		t.Errorf("agent-config sent without the extension: %+v", p)
	}
}

func TestAgentConfigOnlyListedFields(t *testing.T) {
	ag := &echoAgent{}
	f := &front{fields: []string{"model", "effort"}}
	base := serve(t, ag, f)
	tr, _ := trajectory(t)
	if _, err := New(base, Options{}).Prompt(context.Background(), testPrompt(), tr); err != nil {
		t.Fatal(err)
	}
	b := f.bodies("/ext/agent-config")
	if len(b) != 1 || strings.TrimSpace(b[0]) != `{"model":"m1"}` {
		t.Errorf("agent-config bodies %q, want only the model", b)
	}
}

func TestLegacyCardPath(t *testing.T) {
	ag := &echoAgent{}
	base := serve(t, ag, &front{legacyOnly: true})
	tr, _ := trajectory(t)
	ans, err := New(base, Options{}).Prompt(context.Background(), testPrompt(), tr)
	if err != nil || ans.Text != "echo: add a note" {
		t.Fatalf("through the legacy card: %+v, %v", ans, err)
	}
}

func TestFailedTaskSaysWhoseFailure(t *testing.T) {
	tests := []struct {
		name  string
		err   error
		agent bool
	}{
		{"the agent's own", fmt.Errorf("model refused: %w", agent.ErrAgent), true},
		{"its model endpoint", errors.New("model endpoint unreachable"), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := serve(t, &echoAgent{err: tt.err}, &front{})
			tr, _ := trajectory(t)
			_, err := New(base, Options{}).Prompt(context.Background(), testPrompt(), tr)
			if err == nil || !strings.Contains(err.Error(), strings.TrimSuffix(tt.err.Error(), ": agent error")) {
				t.Fatalf("a failed task: %v, want its reason", err)
			}
			if errors.Is(err, agent.ErrAgent) != tt.agent {
				t.Errorf("errors.Is(%v, ErrAgent) = %v, want %v", err, !tt.agent, tt.agent)
			}
		})
	}
}

func TestStructuredAnswer(t *testing.T) {
	ag := &echoAgent{data: json.RawMessage(`{"count":2}`)}
	base := serve(t, ag, &front{})
	tr, _ := trajectory(t)
	ans, err := New(base, Options{}).Prompt(context.Background(), testPrompt(), tr)
	if err != nil || string(ans.Structured) != `{"count":2}` {
		t.Errorf("structured %s, %v", ans.Structured, err)
	}
}

func TestCardNeverAppears(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	defer ts.Close()
	start := time.Now()
	_, err := New(ts.URL, Options{CardWait: 600 * time.Millisecond}).Prompt(context.Background(), testPrompt(), nil)
	if err == nil || !strings.Contains(err.Error(), ts.URL) || errors.Is(err, agent.ErrAgent) {
		t.Fatalf("no card: %v, want an infrastructure error naming %s", err, ts.URL)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("gave up after %s, want about the card wait", d)
	}
}

func newBenchServer(b *testing.B, h http.Handler) string {
	ts := httptest.NewServer(h)
	b.Cleanup(ts.Close)
	return ts.URL
}
