package task_test

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent/model/modeltest"
	"github.com/agentenv/agentenv/task"
)

// modelSettings is a task.ModelSource of fixed values.
type modelSettings map[string]string

func (m modelSettings) Get(key string) (string, error) { return m[key], nil }

func addNoteCall(id, name, args string) modeltest.Reply {
	return modeltest.Reply{Calls: []modeltest.Call{{ID: id, Name: name, Args: args}}, InputTokens: 1000, OutputTokens: 50}
}

// loadAgentTask loads examples/notes-task/agent-task.yaml with its agent set to kind.
func loadAgentTask(tb testing.TB, kind string) *task.Task {
	tb.Helper()
	const path = "../examples/notes-task/agent-task.yaml"
	if kind != task.AgentOpenAI {
		b, err := os.ReadFile(path)
		if err != nil {
			tb.Fatal(err)
		}
		env, _ := filepath.Abs("../examples/notes/env.yaml")
		text := strings.Replace(string(b), "agent: openai", "agent: "+kind, 1)
		text = strings.Replace(text, "file: ../notes/env.yaml", "file: "+env, 1)
		tmp := filepath.Join(tb.TempDir(), "agent-task.yaml")
		if err := os.WriteFile(tmp, []byte(text), 0o600); err != nil {
			tb.Fatal(err)
		}
		tk, err := task.Load(tmp)
		if err != nil {
			tb.Fatalf("Load(agent-task.yaml as %s) = %v", kind, err)
		}
		return tk
	}
	tk, err := task.Load(path)
	if err != nil {
		tb.Fatalf("Load(agent-task.yaml) = %v", err)
	}
	return tk
}

// TestModelAgent runs examples/notes-task/agent-task.yaml with the built-in model agent on
// each SDK against the scripted model server and the in-test notes gateway.
func TestModelAgent(t *testing.T) {
	for _, tc := range []struct{ kind, base, auth string }{
		{task.AgentOpenAI, "/v1", "Bearer sk-test-s3cret"},
		{task.AgentAnthropic, "/", "sk-test-s3cret"},
	} {
		t.Run(tc.kind, func(t *testing.T) { testModelAgent(t, tc.kind, tc.base) })
	}
}

func testModelAgent(t *testing.T, kind, base string) {
	g := newNotesGateway(t)
	model := modeltest.New(t,
		addNoteCall("c1", "add_note", `{"title":"dentist","body":"Tuesday 10:00"}`),
		addNoteCall("c2", "search_notes", `{"query":"milk"}`),
		modeltest.Reply{Text: "The note that mentions milk is groceries.", InputTokens: 1200, OutputTokens: 10},
	)
	r := newRig(t, nil)
	r.runner.Deployer = &fakeDeployer{g: g}
	r.runner.Model = modelSettings{"model.base_url": model.URL + base, "model.name": "test-model", "model.api_key": "sk-test-s3cret",
		"model.input_price": "3", "model.output_price": "15"}

	sum, err := r.runner.Run(t.Context(), loadAgentTask(t, kind), task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	if ep.Outcome != task.OutcomePassed || ep.Score == nil || *ep.Score != 1 {
		t.Fatalf("episode: %s score %v error %q; steps %+v", ep.Outcome, ep.Score, ep.Error, ep.Steps)
	}
	var out map[string]string
	for _, s := range ep.Steps {
		if s.ID == "agent" {
			out = s.Outputs
		}
	}
	want := map[string]string{"response": "The note that mentions milk is groceries.", "turns": "3", "tool_calls": "2",
		"stop": "answer", "input_tokens": "3200", "output_tokens": "110", "cost_usd": "0.01125"}
	for k, v := range want {
		if out[k] != v {
			t.Errorf("agent output %s = %q, want %q (outputs %v)", k, out[k], v, out)
		}
	}

	// What the agent sent the model: the tools as functions, then the tool results.
	reqs := model.Requests()
	if len(reqs) != 3 {
		t.Fatalf("model saw %d requests, want 3", len(reqs))
	}
	if reqs[0].Body["model"] != "test-model" || !strings.Contains(reqs[0].Auth, "sk-test-s3cret") {
		t.Errorf("first request: model %v, auth %q", reqs[0].Body["model"], reqs[0].Auth)
	}
	tools, _ := json.Marshal(reqs[0].Body["tools"])
	if !strings.Contains(string(tools), `"name":"add_note"`) || !strings.Contains(string(tools), `"name":"search_notes"`) {
		t.Errorf("tools offered = %s, want add_note and search_notes", tools)
	}
	last, _ := json.Marshal(reqs[2].Body["messages"])
	if !strings.Contains(string(last), `c2`) || !strings.Contains(string(last), "groceries") {
		t.Errorf("last request's messages = %s, want the search result for call c2", last)
	}

	// The trajectory: one NDJSON line per model turn, tool call and result, then the end.
	f, err := os.Open(out["trajectory"])
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
	wantKinds := "prompt model tool_call tool_result model tool_call tool_result model response stop"
	if got := strings.Join(kinds, " "); got != wantKinds {
		t.Errorf("trajectory kinds = %s\nwant %s", got, wantKinds)
	}
	rec := recordJSON(t, r, ep.Run)
	if strings.Contains(rec, "sk-test-s3cret") || strings.Contains(rec, g.token) {
		t.Errorf("run record holds a secret: %s", rec)
	}
	if !strings.Contains(rec, `"output_tokens":"110"`) || !strings.Contains(rec, `"cost_usd":"0.01125"`) {
		t.Errorf("run record lacks the usage: %s", rec)
	}
	r.assertClean(t)
}

// TestModelAgentFails checks that an unreachable model and an exhausted turn budget fail the
// agent step with the reason, and score 0, never a silent pass.
func TestModelAgentFails(t *testing.T) {
	tests := []struct {
		name    string
		baseURL func(t *testing.T) string
		want    string
	}{
		{"unreachable", func(t *testing.T) string {
			srv := httptest.NewServer(http.NotFoundHandler())
			srv.Close() // nothing listens there any more
			return srv.URL + "/v1"
		}, "connection refused"},
		{"turn budget", func(t *testing.T) string {
			var replies []modeltest.Reply
			for range 10 {
				replies = append(replies, addNoteCall("c", "search_notes", `{"query":"x"}`))
			}
			return modeltest.New(t, replies...).OpenAIURL()
		}, "turn budget of 8 exhausted"},
		{"endpoint error", func(t *testing.T) string { return modeltest.New(t).OpenAIURL() }, "script exhausted"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			dep := &fakeDeployer{g: newNotesGateway(t)}
			r.runner.Deployer = dep
			r.runner.Model = modelSettings{"model.base_url": tc.baseURL(t), "model.name": "m"}
			sum, err := r.runner.Run(t.Context(), loadAgentTask(t, task.AgentOpenAI), task.RunOptions{})
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

// TestHarnessAgent runs a harness on the fake provider (whose exec echoes argv, or exits N for
// "exit N") and, for its wall-clock limit, on the process provider: the sandbox is recorded, its stdout is the response, a non-zero exit fails the
// step as the agent's error with a score of 0, and the sandbox is gone at the episode's end.
func TestHarnessAgent(t *testing.T) {
	for _, tc := range []struct {
		name, provider, image, command, want string
		pass                                 bool
	}{
		{"answers", "fake", "node", `[echo, hi]`, "[echo hi]", true},
		{"exits 3", "fake", "node", `[/bin/agent, exit, "3"]`, "harness /bin/agent exited 3", false},
		// real processes: the fake's exec never takes time
		{"runs out of time", "process", "host", `[sleep, "30"], timeout_seconds: 0.5`, "harness ran out of its wall time of 500ms", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			r.runner.Deployer = &fakeDeployer{g: newNotesGateway(t)}
			tk, err := task.Parse("h.yaml", []byte(`name: h
steps:
  - {id: env, type: deploy_env, file: env.yaml}
  - id: agent
    type: prompt_agent
    env: env
    prompt: add a note
    agent: {harness: {image: `+tc.image+`, command: `+tc.command+`}}
  - {id: answer, type: response_matches, step: agent, contains: "hi"}
`))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{Provider: tc.provider})
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("the run took %s, past the harness's limit", took)
			}
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
			ep := sum.Episodes[0]
			var agentStep agentenv.StepRecord
			for _, s := range ep.Steps {
				if s.ID == "agent" {
					agentStep = s
				}
			}
			if tc.pass {
				if ep.Outcome != task.OutcomePassed || agentStep.Outputs["response"] != tc.want || agentStep.Outputs["stop"] != "answer" {
					t.Errorf("episode %s; agent step %+v, want response %q", ep.Outcome, agentStep, tc.want)
				}
			} else if agentStep.Status != agentenv.StepFailed || !strings.Contains(agentStep.Error, tc.want) || ep.Score == nil || *ep.Score != 0 {
				t.Errorf("episode %s score %v; agent step %+v, want failed naming %q", ep.Outcome, ep.Score, agentStep, tc.want)
			}
			recs, err := r.ledger.List(t.Context(), agentenv.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			var harness int
			for _, rec := range recs {
				if rec.Role == agentenv.TaskRole("agent") {
					harness++
				}
			}
			if harness != 1 {
				t.Errorf("%d harness sandboxes recorded, want 1", harness)
			}
			r.assertClean(t)
		})
	}
}
