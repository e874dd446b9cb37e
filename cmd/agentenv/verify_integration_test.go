//go:build integration

package main_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/dockertest"
	"github.com/agentenv/agentenv/internal/modeltest"
)

// TestRunGradedTask runs examples/graded-task through `agentenv run` on the real engine: its
// script verifier runs the task's test suite in a Docker sandbox, its judge asks the scripted
// model server (a test double for a model endpoint), and a fault-injected create fails the
// first attempt, which the task's retries: {infra: 1} runs again from scratch. With
// --retries 0 the same fault makes the episode an error: exit 1, counted apart from the scores.
func TestRunGradedTask(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	judge := `{"score": 1, "reasons": "correct and commented"}`
	srv := modeltest.New(t, modeltest.Reply{Text: "```json\n" + judge + "\n```", InputTokens: 120, OutputTokens: 12})
	env := []string{"AGENTENV_MODEL_JUDGE_BASE_URL=" + srv.OpenAIURL(), "AGENTENV_MODEL_JUDGE_NAME=judge-test",
		"AGENTENV_FAULTS=docker/create:1:error"}
	r := c.run(t.Context(), env, "run", "../../examples/graded-task", "--json")
	var sum struct {
		Passed, Errors int
		MeanScore      float64 `json:"mean_score"`
		Episodes       []struct {
			Run, Outcome string
			Steps        []struct {
				ID      string
				Score   *float64
				Outputs map[string]string
			}
		}
	}
	if err := json.Unmarshal([]byte(r.stdout), &sum); err != nil || r.code != 0 || sum.Passed != 1 || sum.MeanScore != 1 {
		t.Fatalf("run graded-task: exit %d (%v), want 0 and one pass\n%s%s", r.code, err, r.stdout, r.stderr)
	}
	ep := sum.Episodes[0]
	outs := map[string]map[string]string{}
	for _, s := range ep.Steps {
		outs[s.ID] = s.Outputs
	}
	if res := outs["tests"]["results"]; !strings.Contains(res, `"name":"negative","passed":true`) || outs["tests"]["score"] != "1" {
		t.Errorf("script verifier outputs = %v", outs["tests"])
	}
	if o := outs["review"]; o["reasons"] != "correct and commented" || !strings.Contains(o["prompt"], "add()") || o["input_tokens"] != "120" {
		t.Errorf("judge outputs = %v", o)
	}
	get := c.run(t.Context(), nil, "runs", "get", ep.Run, "--json")
	var doc struct {
		Attempts []struct {
			Attempt   int
			Step      string
			Error     string
			ErrorKind string `json:"error_kind"`
			Receipt   *json.RawMessage
		}
	}
	if err := json.Unmarshal([]byte(get.stdout), &doc); err != nil || len(doc.Attempts) != 1 {
		t.Fatalf("runs get %s: %v, want one failed attempt\n%s", ep.Run, err, get.stdout)
	}
	if a := doc.Attempts[0]; a.Step != "box" || a.ErrorKind != "infra" || !strings.Contains(a.Error, "injected fault") || a.Receipt == nil {
		t.Errorf("attempt = %+v", a)
	}
	if left := c.runLeftovers(ep.Run); len(left) != 0 {
		t.Errorf("left %v", left)
	}

	r = c.run(t.Context(), env, "run", "../../examples/graded-task", "--retries", "0")
	if r.code != 1 || !strings.Contains(r.stdout, "1 error") || !strings.Contains(r.stdout, "injected fault") {
		t.Errorf("run with --retries 0: exit %d, want 1 and an error episode\n%s%s", r.code, r.stdout, r.stderr)
	}
	if left := c.runLeftovers(runLine(r.stdout)); len(left) != 0 {
		t.Errorf("left %v", left)
	}

	// No [model.judge]: bad input, before anything is deployed.
	r = c.run(t.Context(), nil, "run", "../../examples/graded-task")
	if r.code != 2 || !strings.Contains(r.stderr, "step review: judge") || !strings.Contains(r.stderr, "model.judge.base_url") {
		t.Errorf("run without a judge model: exit %d, want 2 naming the step\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// runLeftovers lists what the engine still has of run id.
func (c *cli) runLeftovers(id string) []string {
	c.t.Helper()
	if id == "" {
		c.t.Fatal("no run id")
	}
	left, err := dockertest.Leftovers(context.Background(), c.dc, map[string]string{agentenv.LabelRun: id})
	if err != nil {
		c.t.Fatal(err)
	}
	return left
}
