package main

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/agent/a2a"
	"github.com/agentenv/agentenv/envsdk"
)

// scriptedChat is a test double for an OpenAI-compatible chat completions endpoint (a model
// we cannot reach here): it answers the scripted replies in turn, and records each request.
type scriptedChat struct {
	mu      sync.Mutex
	replies []string
	got     []map[string]any
}

func (m *scriptedChat) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req map[string]any
	_ = json.NewDecoder(r.Body).Decode(&req)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.got = append(m.got, req)
	reply := `{"role":"assistant","content":"out of script"}`
	if len(m.replies) > 0 {
		reply, m.replies = m.replies[0], m.replies[1:]
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"choices":[{"message":` + reply + `,"finish_reason":"stop"}]}`))
}

func TestServeAgentOverA2A(t *testing.T) {
	var mu sync.Mutex
	var notes []string
	srv := mcp.NewServer(&mcp.Implementation{Name: "notes"}, nil)
	mcp.AddTool(srv, &mcp.Tool{Name: "add_note", Description: "Add a note."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in struct {
			Title string `json:"title"`
		}) (*mcp.CallToolResult, map[string]int, error) {
			mu.Lock()
			defer mu.Unlock()
			notes = append(notes, in.Title)
			return nil, map[string]int{"id": len(notes)}, nil
		})
	mh := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	gw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer role-token" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mh.ServeHTTP(w, r)
	}))
	defer gw.Close()
	model := &scriptedChat{replies: []string{
		`{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"add_note","arguments":"{\"title\":\"dentist\"}"}}]}`,
		`{"role":"assistant","content":"added dentist"}`,
	}}
	ms := httptest.NewServer(model)
	defer ms.Close()

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		ag, err := newModelAgent(modelSettings{BaseURL: ms.URL, Model: "scripted"})
		if err != nil {
			done <- err
			return
		}
		done <- envsdk.ServeAgent(ctx, ln, ag, envsdk.AgentOptions{Name: "t"})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeAgent = %v", err)
		}
	}()

	path := filepath.Join(t.TempDir(), "t.jsonl")
	tr, err := agent.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	ans, err := a2a.New("http://"+ln.Addr().String(), a2a.Options{}).Prompt(t.Context(), agent.Prompt{
		Text: "note the dentist", Model: "m-from-config", MaxTurns: 4, Timeout: 30 * time.Second,
		Gateway: agent.Gateway{Name: "notes", URL: gw.URL, Headers: map[string]string{"Authorization": "Bearer role-token"}},
	}, tr)
	tr.Close()
	if err != nil {
		t.Fatalf("Prompt = %v", err)
	}
	if ans.Text != "added dentist" || ans.ToolCalls != 1 {
		t.Errorf("answer %+v", ans)
	}
	if len(notes) != 1 || notes[0] != "dentist" {
		t.Errorf("notes %v, want the one the model asked for", notes)
	}
	if m, _ := model.got[0]["model"].(string); m != "m-from-config" {
		t.Errorf("model asked %q, want agent-config's", m)
	}
	raw, _ := os.ReadFile(path)
	if !strings.Contains(string(raw), `"tool":"add_note"`) || !strings.Contains(string(raw), `"kind":"tool_result"`) {
		t.Errorf("trajectory read back over trajectory/v1:\n%s", raw)
	}
}
