package task_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

// modelSettings is a task.ModelSource of fixed values.
type modelSettings map[string]string

func (m modelSettings) Get(key string) (string, error) { return m[key], nil }

// scriptedModel is a test double for an OpenAI-compatible chat completions endpoint, standing
// in for a model we cannot reach here: it answers each request with the next reply of a
// script, and keeps the requests so the test can check what the agent sent.
type scriptedModel struct {
	srv     *httptest.Server
	replies []string // JSON of each response's message

	mu       sync.Mutex
	requests []map[string]any
	auth     []string
}

func newScriptedModel(tb testing.TB, replies ...string) *scriptedModel {
	m := &scriptedModel{replies: replies}
	m.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/chat/completions" {
			http.NotFound(w, r)
			return
		}
		var req map[string]any
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m.mu.Lock()
		n := len(m.requests)
		m.requests = append(m.requests, req)
		m.auth = append(m.auth, r.Header.Get("Authorization"))
		m.mu.Unlock()
		if n >= len(m.replies) {
			http.Error(w, `{"error":{"message":"script exhausted"}}`, http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"choices":[{"finish_reason":"stop","message":` + m.replies[n] + `}]}`))
	}))
	tb.Cleanup(m.srv.Close)
	return m
}

func toolCallReply(id, name, args string) string {
	b, _ := json.Marshal(args)
	return `{"role":"assistant","content":"","tool_calls":[{"id":"` + id + `","type":"function","function":{"name":"` + name + `","arguments":` + string(b) + `}}]}`
}

func loadAgentTask(tb testing.TB) *task.Task {
	tb.Helper()
	tk, err := task.Load("../examples/notes-task/agent-task.yaml")
	if err != nil {
		tb.Fatalf("Load(agent-task.yaml) = %v", err)
	}
	return tk
}

// TestOpenAIAgent runs examples/notes-task/agent-task.yaml with the built-in openai agent
// against the scripted model and the in-test notes gateway.
func TestOpenAIAgent(t *testing.T) {
	g := newNotesGateway(t)
	model := newScriptedModel(t,
		toolCallReply("c1", "add_note", `{"title":"dentist","body":"Tuesday 10:00"}`),
		toolCallReply("c2", "search_notes", `{"query":"milk"}`),
		`{"role":"assistant","content":"The note that mentions milk is groceries."}`,
	)
	r := newRig(t, nil)
	r.runner.Deployer = &fakeDeployer{g: g}
	r.runner.Model = modelSettings{"model.base_url": model.srv.URL + "/v1", "model.name": "test-model", "model.api_key": "sk-test-s3cret"}

	sum, err := r.runner.Run(t.Context(), loadAgentTask(t), task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	if ep.Outcome != task.OutcomePassed || ep.Score == nil || *ep.Score != 1 {
		t.Fatalf("episode: %s score %v error %q; steps %+v", ep.Outcome, ep.Score, ep.Error, ep.Steps)
	}
	var agent map[string]string
	for _, s := range ep.Steps {
		if s.ID == "agent" {
			agent = s.Outputs
		}
	}
	if agent["response"] != "The note that mentions milk is groceries." || agent["turns"] != "3" || agent["tool_calls"] != "2" {
		t.Errorf("agent outputs = %v", agent)
	}

	// What the agent sent the model: the tools as functions, then the tool results.
	if len(model.requests) != 3 {
		t.Fatalf("model saw %d requests, want 3", len(model.requests))
	}
	first := model.requests[0]
	if first["model"] != "test-model" || model.auth[0] != "Bearer sk-test-s3cret" {
		t.Errorf("first request: model %v, auth %q", first["model"], model.auth[0])
	}
	tools, _ := json.Marshal(first["tools"])
	if !strings.Contains(string(tools), `"name":"add_note"`) || !strings.Contains(string(tools), `"name":"search_notes"`) {
		t.Errorf("tools offered = %s, want add_note and search_notes", tools)
	}
	last, _ := json.Marshal(model.requests[2]["messages"])
	if !strings.Contains(string(last), `"tool_call_id":"c2"`) || !strings.Contains(string(last), "groceries") {
		t.Errorf("last request's messages = %s, want the search result for call c2", last)
	}

	// The trajectory: one NDJSON line per model turn, tool call and result.
	f, err := os.Open(agent["trajectory"])
	if err != nil {
		t.Fatalf("trajectory: %v", err)
	}
	defer f.Close()
	var kinds []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var line struct {
			Kind string `json:"kind"`
			Seq  int    `json:"seq"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil {
			t.Fatalf("trajectory line %q: %v", sc.Text(), err)
		}
		kinds = append(kinds, line.Kind)
	}
	want := "prompt model tool_call tool_result model tool_call tool_result model response"
	if got := strings.Join(kinds, " "); got != want {
		t.Errorf("trajectory kinds = %s\nwant %s", got, want)
	}
	if rec := recordJSON(t, r, ep.Run); strings.Contains(rec, "sk-test-s3cret") || strings.Contains(rec, g.token) {
		t.Errorf("run record holds a secret: %s", rec)
	}
	r.assertClean(t)
}

// TestOpenAIAgentFails checks that an unreachable model and an exhausted turn budget fail the
// agent step with the reason, and score 0, never a silent pass.
func TestOpenAIAgentFails(t *testing.T) {
	tests := []struct {
		name    string
		baseURL func(t *testing.T) string
		want    string
	}{
		{"unreachable", func(t *testing.T) string {
			srv := httptest.NewServer(http.NotFoundHandler())
			srv.Close() // nothing listens there any more
			return srv.URL + "/v1"
		}, "model endpoint unreachable"},
		{"turn budget", func(t *testing.T) string {
			var replies []string
			for range 10 {
				replies = append(replies, toolCallReply("c", "search_notes", `{"query":"x"}`))
			}
			return newScriptedModel(t, replies...).srv.URL + "/v1"
		}, "turn budget of 8 exhausted"},
		{"endpoint error", func(t *testing.T) string { return newScriptedModel(t).srv.URL + "/v1" }, "script exhausted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			dep := &fakeDeployer{g: newNotesGateway(t)}
			r.runner.Deployer = dep
			r.runner.Model = modelSettings{"model.base_url": tc.baseURL(t), "model.name": "m"}
			sum, err := r.runner.Run(t.Context(), loadAgentTask(t), task.RunOptions{})
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
			ep := sum.Episodes[0]
			if ep.Score == nil || *ep.Score != 0 || ep.Outcome == task.OutcomePassed {
				t.Errorf("episode: %s score %v, want a score of 0", ep.Outcome, ep.Score)
			}
			for _, s := range ep.Steps {
				switch s.ID {
				case "agent":
					if s.Status != agentenv.StepFailed || !strings.Contains(s.Error, tc.want) || s.Outputs["trajectory"] == "" {
						t.Errorf("agent step = %+v, want failed with %q and a trajectory", s, tc.want)
					}
				case "answer":
					if s.Score == nil || *s.Score != 0 || !strings.Contains(s.Error, tc.want) {
						t.Errorf("answer verifier = %+v, want score 0 naming %q", s, tc.want)
					}
				}
			}
			if len(dep.open()) != 0 {
				t.Errorf("deployments left: %v", dep.open())
			}
			r.assertClean(t)
		})
	}
}
