//go:build integration

package main_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent/model/modeltest"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
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

// TestRunScriptInEnvComponent runs a script verifier's test suite in a component of a deployed
// env (the notes env's servicedb, in container mode) on the real engine.
func TestRunScriptInEnvComponent(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.buildRuntimeImage()
	dir := t.TempDir()
	envFile, err := filepath.Abs("../../examples/notes/env.yaml")
	if err != nil {
		t.Fatal(err)
	}
	suite := `#!/bin/sh
# Two checks of the service DB, from inside its container.
r1=false; pg_isready -q && r1=true
r2=false; [ -f "$PGDATA/PG_VERSION" ] && r2=true
n=0; [ $r1 = true ] && n=$((n + 1)); [ $r2 = true ] && n=$((n + 1))
echo "{\"score\": $(awk "BEGIN { print $n / 2 }"), \"results\": [{\"name\": \"accepts connections\", \"passed\": $r1}, {\"name\": \"has a data folder\", \"passed\": $r2}]}"
`
	writeTestFile(t, filepath.Join(dir, "suite.sh"), suite)
	writeTestFile(t, filepath.Join(dir, "task.yaml"), `name: db-suite
steps:
  - id: env
    type: deploy_env
    file: `+envFile+`
  - id: suite
    type: script
    env: env
    component: servicedb
    files: {/tmp/suite.sh: suite.sh}
    command: [sh, /tmp/suite.sh]
`)
	r := c.run(t.Context(), nil, "run", filepath.Join(dir, "task.yaml"))
	if r.code != 0 || !strings.Contains(r.stderr, "suite (script) passed score=1") {
		t.Fatalf("run db-suite: exit %d, want the suite passed\n%s%s", r.code, r.stdout, r.stderr)
	}
	get := c.run(t.Context(), nil, "runs", "get", runLine(r.stdout), "--json")
	if !strings.Contains(get.stdout, `\"name\": \"has a data folder\", \"passed\": true`) {
		t.Errorf("runs get: no results of the suite\n%s", get.stdout)
	}
	if left := c.deployLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}

func writeTestFile(t *testing.T, path, data string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestRunSpanRetry: a fault-injected create fails a step that has retry: {max: 1}; its span
// (the step and what depends on it) runs again on the real engine and the episode passes,
// with no episode retry (--retries 0) and nothing left.
func TestRunSpanRetry(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "task.yaml"), `name: span
steps:
  - id: box
    type: deploy_sandbox
    provider: docker
    image: agentenv-node:local
    command: [sleep, "300"]
    retry: {max: 1}
  - id: suite
    type: script
    sandbox: box
    command: [sh, -c, 'echo "{\"score\": 1, \"results\": []}"']
`)
	r := c.run(t.Context(), []string{"AGENTENV_FAULTS=docker/create:1:error"}, "run", filepath.Join(dir, "task.yaml"), "--retries", "0")
	if r.code != 0 || !strings.Contains(r.stderr, "retry: span box..box attempt 1 failed") {
		t.Fatalf("run: exit %d, want a pass after the span's retry\n%s%s", r.code, r.stdout, r.stderr)
	}
	get := c.run(t.Context(), nil, "runs", "get", runLine(r.stdout))
	if !strings.Contains(get.stdout, "retried: span box..box attempt 1") {
		t.Errorf("runs get: no retried span\n%s", get.stdout)
	}
	if left := c.runLeftovers(runLine(r.stdout)); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}
