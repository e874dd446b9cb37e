package model_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
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
	"github.com/agentenv/agentenv/agent/model"
	"github.com/agentenv/agentenv/agent/model/modeltest"
)

// notes is a real MCP server (the official SDK over streamable HTTP) with one tool, add.note,
// whose name a model may not use as is; it refuses requests without the token.
type notes struct {
	url string
	mu  sync.Mutex
	got []string
}

func newNotes(t testing.TB, token string) *notes {
	n := &notes{}
	srv := mcp.NewServer(&mcp.Implementation{Name: "notes", Version: "v1"}, nil)
	type in struct {
		Title string `json:"title"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "add.note", Description: "add a note"}, func(ctx context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
		n.mu.Lock()
		n.got = append(n.got, a.Title)
		n.mu.Unlock()
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "added " + a.Title}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+token {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	n.url = hs.URL
	return n
}

func (n *notes) titles() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]string(nil), n.got...)
}

func addNote(id, title string, out int64) modeltest.Reply {
	return modeltest.Reply{Calls: []modeltest.Call{{ID: id, Name: "add_note", Args: `{"title":"` + title + `"}`}}, InputTokens: 100, OutputTokens: out}
}

// readLines reads a trajectory file.
func readLines(t *testing.T, path string) []agent.Line {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []agent.Line
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l agent.Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("trajectory line %q: %v", sc.Text(), err)
		}
		out = append(out, l)
	}
	return out
}

// TestCaps runs each cap against the scripted model server on both APIs: the loop ends with
// the cap's Stop, an ErrAgent naming it, and a stop line with the total usage.
func TestCaps(t *testing.T) {
	prices := model.Prices{Input: 3, Output: 15} // USD per million tokens
	tests := []struct {
		name   string
		script []modeltest.Reply
		prompt agent.Prompt
		stop   string
		err    string // "" for an answer
		usage  agent.Usage
		calls  int
	}{
		{"answer", []modeltest.Reply{addNote("c1", "milk", 20), {Text: "done", InputTokens: 150, OutputTokens: 5}},
			agent.Prompt{}, agent.StopAnswer, "", agent.Usage{InputTokens: 250, OutputTokens: 25, CostUSD: (250*3 + 25*15) / 1e6}, 1},
		{"turns", []modeltest.Reply{addNote("c1", "a", 1), addNote("c2", "b", 1), addNote("c3", "c", 1)},
			agent.Prompt{MaxTurns: 2}, agent.StopMaxTurns, "turn budget of 2 exhausted", agent.Usage{InputTokens: 200, OutputTokens: 2, CostUSD: (200*3 + 2*15) / 1e6}, 2},
		{"output tokens", []modeltest.Reply{addNote("c1", "a", 60), addNote("c2", "b", 60), addNote("c3", "c", 60)},
			agent.Prompt{MaxOutputTokens: 100}, agent.StopMaxOutputTokens, "output token budget of 100 exhausted", agent.Usage{InputTokens: 200, OutputTokens: 120, CostUSD: (200*3 + 120*15) / 1e6}, 1},
		{"cost", []modeltest.Reply{addNote("c1", "a", 1000), addNote("c2", "b", 1000), addNote("c3", "c", 1000)},
			agent.Prompt{MaxCostUSD: 0.03}, agent.StopMaxCost, "cost budget of $0.03 exhausted", agent.Usage{InputTokens: 200, OutputTokens: 2000, CostUSD: (200*3 + 2000*15) / 1e6}, 1},
		{"time", []modeltest.Reply{addNote("c1", "a", 1), {Text: "late", Delay: 5 * time.Second}},
			agent.Prompt{Timeout: 300 * time.Millisecond}, agent.StopTimeout, "wall time of 300ms exhausted", agent.Usage{InputTokens: 100, OutputTokens: 1, CostUSD: (100*3 + 1*15) / 1e6}, 1},
	}
	for _, provider := range []string{model.OpenAI, model.Anthropic} {
		for _, tc := range tests {
			t.Run(provider+"/"+tc.name, func(t *testing.T) {
				srv := modeltest.New(t, tc.script...)
				g := newNotes(t, "role-token")
				base := srv.OpenAIURL()
				if provider == model.Anthropic {
					base = srv.AnthropicURL()
				}
				a, err := model.New(model.Config{Provider: provider, BaseURL: base, APIKey: "sk-test", Model: "m1", Prices: prices})
				if err != nil {
					t.Fatal(err)
				}
				tr, err := agent.Create(filepath.Join(t.TempDir(), "tr.ndjson"))
				if err != nil {
					t.Fatal(err)
				}
				p := tc.prompt
				p.Text = "add a note"
				p.SystemPrompt = "be brief"
				p.Gateway = agent.Gateway{Name: "notes", URL: g.url, Headers: map[string]string{"Authorization": "Bearer role-token"}}
				ans, err := a.Prompt(t.Context(), p, tr)
				agent.Finish(tr, ans, err)
				tr.Close()
				if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err) || !errors.Is(err, agent.ErrAgent)) {
					t.Fatalf("Prompt error = %v, want %q (an ErrAgent)", err, tc.err)
				}
				if ans.Stop != tc.stop || ans.ToolCalls != tc.calls || ans.Usage.InputTokens != tc.usage.InputTokens || ans.Usage.OutputTokens != tc.usage.OutputTokens || !near(ans.Usage.CostUSD, tc.usage.CostUSD) {
					t.Errorf("answer = %+v, want stop %s, %d calls, usage %+v", ans, tc.stop, tc.calls, tc.usage)
				}
				if got := g.titles(); len(got) != tc.calls {
					t.Errorf("notes added = %v, want %d", got, tc.calls)
				}
				lines := readLines(t, tr.Path())
				last := lines[len(lines)-1]
				if last.Kind != agent.KindStop || last.Text != tc.stop || last.Usage == nil || last.Usage.OutputTokens != tc.usage.OutputTokens {
					t.Errorf("last line = %+v, want a stop line %s with the total usage", last, tc.stop)
				}
				for _, l := range lines {
					if l.Kind == agent.KindModel && (l.Usage == nil || l.Usage.InputTokens != 100 && l.Usage.InputTokens != 150) {
						t.Errorf("model line without its turn's usage: %+v", l)
					}
					if l.Kind == agent.KindToolCall && l.Tool != "add.note" {
						t.Errorf("tool call line names %q, want the gateway's name add.note", l.Tool)
					}
				}
				reqs := srv.Requests()
				if len(reqs) == 0 {
					t.Fatal("the model saw no request")
				}
				first := reqs[0]
				if first.Body["model"] != "m1" || !strings.Contains(first.Auth, "sk-test") {
					t.Errorf("first request: model %v, auth %q", first.Body["model"], first.Auth)
				}
				tools, _ := json.Marshal(first.Body["tools"])
				if !strings.Contains(string(tools), `"name":"add_note"`) {
					t.Errorf("tools offered = %s, want add_note", tools)
				}
				if tc.name == "output tokens" {
					if k := map[string]string{model.OpenAI: "max_completion_tokens", model.Anthropic: "max_tokens"}[provider]; reqs[1].Body[k] != float64(40) {
						t.Errorf("second request's %s = %v, want the 40 tokens left", k, reqs[1].Body[k])
					}
				}
				if len(reqs) > 1 {
					msgs, _ := json.Marshal(reqs[1].Body["messages"])
					if !strings.Contains(string(msgs), "added ") || !strings.Contains(string(msgs), `c1`) {
						t.Errorf("second request's messages = %s, want the result of call c1", msgs)
					}
				}
			})
		}
	}
}

func near(a, b float64) bool { return a-b < 1e-12 && b-a < 1e-12 }

// TestFailures: an unreachable gateway or model, and an endpoint error, are the
// infrastructure's errors, not ErrAgent.
func TestFailures(t *testing.T) {
	g := newNotes(t, "tok")
	gw := agent.Gateway{URL: g.url, Headers: map[string]string{"Authorization": "Bearer tok"}}
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close()
	tests := []struct {
		name string
		cfg  model.Config
		gw   agent.Gateway
		want string
	}{
		{"wrong token", model.Config{Provider: model.OpenAI, BaseURL: modeltest.New(t).OpenAIURL(), Model: "m"}, agent.Gateway{URL: g.url}, "connect to gateway"},
		{"model unreachable", model.Config{Provider: model.OpenAI, BaseURL: dead.URL + "/v1", Model: "m"}, gw, "model endpoint"},
		{"openai error", model.Config{Provider: model.OpenAI, BaseURL: modeltest.New(t).OpenAIURL(), Model: "m"}, gw, "script exhausted"},
		{"anthropic error", model.Config{Provider: model.Anthropic, BaseURL: modeltest.New(t).AnthropicURL(), Model: "m"}, gw, "script exhausted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, err := model.New(tc.cfg)
			if err != nil {
				t.Fatal(err)
			}
			ans, err := a.Prompt(t.Context(), agent.Prompt{Text: "x", Gateway: tc.gw}, &agent.Trajectory{})
			if err == nil || !strings.Contains(err.Error(), tc.want) || errors.Is(err, agent.ErrAgent) {
				t.Errorf("Prompt = %v, want an infrastructure error naming %q", err, tc.want)
			}
			if ans.Stop != agent.StopError {
				t.Errorf("stop = %q, want %q", ans.Stop, agent.StopError)
			}
		})
	}
	if _, err := model.New(model.Config{Provider: "gemini", BaseURL: "http://x"}); err == nil || !strings.Contains(err.Error(), "model.provider") {
		t.Errorf("New(gemini) = %v, want an error naming model.provider", err)
	}
}

// BenchmarkPrompt is one prompt of the built-in agent against the scripted model server and a
// real MCP server on loopback: connect, list tools, two model turns and one tool call.
func BenchmarkPrompt(b *testing.B) {
	for _, provider := range []string{model.OpenAI, model.Anthropic} {
		b.Run(provider, func(b *testing.B) {
			var script []modeltest.Reply
			for range b.N {
				script = append(script, addNote("c1", "x", 5), modeltest.Reply{Text: "done", InputTokens: 1, OutputTokens: 1})
			}
			srv := modeltest.New(b, script...)
			g := newNotes(b, "tok")
			base := srv.OpenAIURL()
			if provider == model.Anthropic {
				base = srv.AnthropicURL()
			}
			a, err := model.New(model.Config{Provider: provider, BaseURL: base, Model: "m"})
			if err != nil {
				b.Fatal(err)
			}
			p := agent.Prompt{Text: "x", Gateway: agent.Gateway{URL: g.url, Headers: map[string]string{"Authorization": "Bearer tok"}}}
			b.ResetTimer()
			for range b.N {
				if _, err := a.Prompt(b.Context(), p, &agent.Trajectory{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
