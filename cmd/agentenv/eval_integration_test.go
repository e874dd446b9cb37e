//go:build integration

package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent/model/modeltest"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
)

// boxTask is a task of one Docker sandbox of the test image and a check run in it; with a
// pause, it also waits that long in a process sandbox (so that a test can stop it mid-way).
func boxTask(t *testing.T, dir, name, image string, pause string) string {
	t.Helper()
	src := `name: ` + name + `
steps:
  - id: box
    type: deploy_sandbox
    provider: docker
    image: ` + image + `
    command: [sleep]
`
	if pause != "" {
		src += `  - id: host
    type: deploy_sandbox
    provider: process
    depends_on: []
  - id: pause
    type: exec
    sandbox: host
    command: [sleep, "` + pause + `"]
`
	}
	src += `  - id: check
    type: command_succeeds
    sandbox: box
    command: [/agentenv, echo, ` + name + `]
    stdout_contains: ` + name + `
`
	p := filepath.Join(dir, name+".yaml")
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// groupJSON is what `agentenv run EVAL --json` prints.
type groupJSON struct {
	Group  string `json:"group"`
	Status string `json:"status"`
	Totals struct {
		Passed, Failed, Errors, Cancelled int
		PassAt                            map[string]float64 `json:"pass_at"`
	} `json:"totals"`
	Tasks []struct {
		Task   string             `json:"task"`
		Passed int                `json:"passed"`
		PassAt map[string]float64 `json:"pass_at"`
	} `json:"tasks"`
	Episodes []struct {
		Task    string `json:"task"`
		Run     string `json:"run"`
		Outcome string `json:"outcome"`
	} `json:"episodes"`
	Replaced int `json:"replaced"`
}

func decodeGroup(t *testing.T, r result) groupJSON {
	t.Helper()
	var g groupJSON
	if err := json.Unmarshal([]byte(r.stdout), &g); err != nil {
		t.Fatalf("run --json: %v (exit %d)\n%s%s", err, r.code, r.stdout, r.stderr)
	}
	return g
}

// sandboxLeftovers lists what the engine still runs of every record in this test's ledger.
func (c *cli) sandboxLeftovers() []string {
	c.t.Helper()
	out := c.run(context.Background(), nil, "ledger", "ls", "--all", "--json")
	var recs []struct{ ID string }
	if err := json.Unmarshal([]byte(out.stdout), &recs); err != nil {
		c.t.Fatalf("ledger ls: %v\n%s", err, out.stdout)
	}
	var left []string
	for _, r := range recs {
		l, err := dockertest.Leftovers(context.Background(), c.dc, map[string]string{agentenv.LabelRecord: r.ID})
		if err != nil {
			c.t.Fatal(err)
		}
		left = append(left, l...)
	}
	return append(left, c.deployLeftovers()...)
}

// TestEvalRetriesFaultedCreates runs an eval of two tasks × k=4, one episode at a time, with
// Docker's create failing on calls 1 and 5: those are the first attempts of two episodes
// (call 2 is the first one's retry). Both are retried from scratch, every episode passes, and
// the group's pass@k equals that of the same eval run without faults.
func TestEvalRetriesFaultedCreates(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	dir := t.TempDir()
	boxTask(t, dir, "alpha", c.image, "")
	boxTask(t, dir, "beta", c.image, "")
	evalFile := filepath.Join(dir, "eval.yaml")
	os.WriteFile(evalFile, []byte("name: faults\nconcurrency: 1\ntasks:\n  - task: alpha.yaml\n    k: 4\n  - task: beta.yaml\n    k: 4\n"), 0o600)

	cr := c.run(t.Context(), nil, "run", evalFile, "--json")
	clean := decodeGroup(t, cr)
	if cr.code != 0 || clean.Totals.Passed != 8 {
		t.Fatalf("run without faults: exit %d, totals %+v\n%s", cr.code, clean.Totals, cr.stderr)
	}
	faulted := c.run(t.Context(), []string{"AGENTENV_FAULTS=docker/create:1:error,docker/create:5:error"}, "run", evalFile, "--json", "--retries", "1")
	g := decodeGroup(t, faulted)
	if faulted.code != 0 || g.Totals.Passed != 8 || g.Totals.Errors != 0 {
		t.Fatalf("faulted run: exit %d, totals %+v\n%s", faulted.code, g.Totals, faulted.stderr)
	}
	for i := range g.Tasks {
		if got, want := g.Tasks[i].PassAt, clean.Tasks[i].PassAt; len(got) != 4 || !sameFloats(got, want) {
			t.Errorf("task %s pass@k = %v, without faults %v", g.Tasks[i].Task, got, want)
		}
	}
	if !sameFloats(g.Totals.PassAt, clean.Totals.PassAt) {
		t.Errorf("group pass@k = %v, without faults %v", g.Totals.PassAt, clean.Totals.PassAt)
	}
	retried := 0
	for _, ep := range g.Episodes {
		var doc agentenv.Run
		get := c.run(t.Context(), nil, "runs", "get", ep.Run, "--json")
		if err := json.Unmarshal([]byte(get.stdout), &doc); err != nil {
			t.Fatal(err)
		}
		if len(doc.Attempts) > 0 {
			retried++
			if a := doc.Attempts[0]; a.ErrorKind != agentenv.StepErrorInfra || !strings.Contains(a.Error, "injected") {
				t.Errorf("run %s attempt 1 = %+v, want the injected infra error", ep.Run, a)
			}
		}
		if doc.Attrs["group"] != g.Group {
			t.Errorf("run %s attrs.group = %q, want %s", ep.Run, doc.Attrs["group"], g.Group)
		}
	}
	if retried != 2 {
		t.Errorf("%d episodes were retried, want 2", retried)
	}
	if left := c.sandboxLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}

func sameFloats(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestEvalKilledThenGCThenResume SIGKILLs a group mid-way, runs gc, resumes it: the totals are
// an uninterrupted run's (every episode passes: 5 of 5, pass@k 1 for each k), the finished
// episodes keep their runs, nothing is left on the engine, and the group's export is one line
// per episode, each message valid in go-openai's chat message type with every tool result answering
// a call.
func TestEvalKilledThenGCThenResume(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.buildRuntimeImage()
	dir := t.TempDir()
	boxTask(t, dir, "slow", c.image, "2")
	notes, _ := filepath.Abs("../../examples/notes-task/task.yaml")
	evalFile := filepath.Join(dir, "eval.yaml")
	os.WriteFile(evalFile, []byte("name: killed\nconcurrency: 2\ntasks:\n  - task: "+notes+"\n    k: 2\n  - task: slow.yaml\n    k: 3\n"), 0o600)

	cmd := c.cmd(t.Context(), nil, "run", evalFile)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// Kill once two episodes have ended (progress lines name their outcome).
	sc := bufio.NewScanner(stderr)
	ended := 0
	deadline := time.AfterFunc(90*time.Second, func() { cmd.Process.Kill() })
	for sc.Scan() && ended < 2 {
		if strings.Contains(sc.Text(), " done ") {
			ended++
		}
	}
	deadline.Stop()
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	if ended < 2 {
		t.Fatalf("the group ended only %d episodes before its deadline", ended)
	}

	var groups []struct{ ID, Status string }
	ls := c.run(t.Context(), nil, "runs", "ls", "--group", "--json")
	if err := json.Unmarshal([]byte(ls.stdout), &groups); err != nil || len(groups) != 1 || groups[0].Status != "running" {
		t.Fatalf("runs ls --group after SIGKILL = %v %v\n%s", groups, err, ls.stdout)
	}
	id := groups[0].ID
	if r := c.run(t.Context(), nil, "gc"); r.code != 0 {
		t.Fatalf("gc: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if left := c.sandboxLeftovers(); len(left) != 0 {
		t.Errorf("after gc: left %v", left)
	}
	before := map[string]bool{}
	get := c.run(t.Context(), nil, "runs", "get", id, "--json")
	var prior groupJSON
	if err := json.Unmarshal([]byte(get.stdout), &prior); err != nil {
		t.Fatalf("runs get %s: %v\n%s", id, err, get.stdout)
	}
	for _, ep := range prior.Episodes {
		if ep.Outcome == "passed" {
			before[ep.Run] = true
		}
	}

	res := c.run(t.Context(), nil, "run", "--resume", id, "--json")
	g := decodeGroup(t, res)
	if res.code != 0 || g.Group != id || g.Totals.Passed != 5 || g.Totals.Cancelled != 0 || g.Status != "completed" {
		t.Fatalf("resume: exit %d, group %s %s totals %+v\n%s", res.code, g.Group, g.Status, g.Totals, res.stderr)
	}
	for _, k := range []string{"1", "2"} {
		if g.Totals.PassAt[k] != 1 {
			t.Errorf("pass@%s = %v, want 1 (an uninterrupted run's)", k, g.Totals.PassAt[k])
		}
	}
	kept := 0
	for _, ep := range g.Episodes {
		if before[ep.Run] {
			kept++
		}
	}
	if kept == len(g.Episodes) {
		t.Errorf("SIGKILL came after every episode had ended: nothing was resumed")
	}
	if kept != len(before) || len(before) < 2 {
		t.Errorf("resume kept %d of the %d episodes that had passed", kept, len(before))
	}
	if left := c.sandboxLeftovers(); len(left) != 0 {
		t.Errorf("after resume: left %v", left)
	}

	exp := c.run(t.Context(), nil, "runs", "export", id, "--format", "chat-jsonl")
	if exp.code != 0 {
		t.Fatalf("export: exit %d\n%s", exp.code, exp.stderr)
	}
	lines := strings.Split(strings.TrimSpace(exp.stdout), "\n")
	if len(lines) != 5 {
		t.Fatalf("export has %d lines, want 5", len(lines))
	}
	withTools := 0
	for i, line := range lines {
		var rec struct {
			Messages  []json.RawMessage `json:"messages"`
			Score     *float64          `json:"score"`
			Verifiers []struct{ Step string }
			Metadata  struct {
				Task    string
				Run     string
				Attempt int
			}
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		if rec.Score == nil || *rec.Score != 1 || rec.Metadata.Run == "" || rec.Metadata.Attempt < 1 || len(rec.Verifiers) == 0 {
			t.Errorf("line %d: %s", i+1, line)
		}
		open := map[string]bool{}
		var roles []string
		for _, m := range rec.Messages {
			var p openai.ChatCompletionMessage
			if err := json.Unmarshal(m, &p); err != nil || p.Role == "" {
				t.Fatalf("line %d: message %s: %v", i+1, m, err)
			}
			roles = append(roles, p.Role)
			if p.Role == openai.ChatMessageRoleAssistant {
				for _, tc := range p.ToolCalls {
					if tc.ID == "" || tc.Function.Name == "" {
						t.Errorf("line %d: tool call %s", i+1, m)
					}
					open[tc.ID] = true
				}
			}
			if p.Role == openai.ChatMessageRoleTool {
				if !open[p.ToolCallID] {
					t.Errorf("line %d: tool result %q answers no call before it", i+1, p.ToolCallID)
				}
				delete(open, p.ToolCallID)
				withTools++
			}
		}
		if len(open) > 0 {
			t.Errorf("line %d: calls without results %v", i+1, open)
		}
		if rec.Metadata.Task == "notes-task" && (len(roles) < 3 || roles[0] != "system" && roles[0] != "user") {
			t.Errorf("line %d: roles %v", i+1, roles)
		}
		if strings.Contains(line, "Bearer ") && !strings.Contains(line, "Bearer [redacted]") {
			t.Errorf("line %d holds a bearer credential", i+1)
		}
	}
	if withTools == 0 {
		t.Errorf("no tool results in the export of the notes episodes:\n%s", exp.stdout)
	}
	csv := c.run(t.Context(), nil, "runs", "export", id, "--format", "csv")
	if strings.Count(csv.stdout, "\n") != 6 {
		t.Errorf("csv export:\n%s", csv.stdout)
	}
}

// TestEvalBadInputDeploysNothing: an eval naming a missing task, and one whose task has a
// judge but no [model.judge], are refused with the file, line and field before anything is
// written or deployed.
func TestEvalBadInputDeploysNothing(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	dir := t.TempDir()
	boxTask(t, dir, "box", c.image, "")
	missing := filepath.Join(dir, "missing.yaml")
	os.WriteFile(missing, []byte("name: m\ntasks:\n  - task: box.yaml\n  - task: nowhere.yaml\n    k: 2\n"), 0o600)
	r := c.run(t.Context(), nil, "run", missing)
	if r.code != 2 || !strings.Contains(r.stderr, "missing.yaml:4: tasks[1].task: task ") || !strings.Contains(r.stderr, "nowhere.yaml") {
		t.Errorf("missing task: exit %d\n%s", r.code, r.stderr)
	}
	judged := filepath.Join(dir, "judged.yaml")
	os.WriteFile(judged, []byte("name: judged\nsteps:\n  - id: box\n    type: deploy_sandbox\n    provider: docker\n    image: "+c.image+"\n    command: [sleep]\n  - id: grade\n    type: judge\n    rubric: the answer is polite\n    inputs: {answer: thank you}\n"), 0o600)
	ev := filepath.Join(dir, "judge-eval.yaml")
	os.WriteFile(ev, []byte("name: j\ntasks:\n  - task: box.yaml\n  - task: judged.yaml\n"), 0o600)
	r = c.run(t.Context(), nil, "run", ev)
	if r.code != 2 || !strings.Contains(r.stderr, "judge-eval.yaml:4: tasks[1]") || !strings.Contains(r.stderr, "model.judge") {
		t.Errorf("judge without a model: exit %d\n%s", r.code, r.stderr)
	}
	ls := c.run(t.Context(), nil, "runs", "ls", "--json")
	groups := c.run(t.Context(), nil, "runs", "ls", "--group", "--json")
	if strings.TrimSpace(ls.stdout) != "[]" || strings.TrimSpace(groups.stdout) != "[]" {
		t.Errorf("bad input left runs %s and groups %s", ls.stdout, groups.stdout)
	}
	if left := c.sandboxLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
	recs := c.run(t.Context(), nil, "ledger", "ls", "--all", "--json")
	if out := strings.TrimSpace(recs.stdout); out != "[]" && out != "null" {
		t.Errorf("bad input wrote records: %s", recs.stdout)
	}
}

// TestEvalCostCapThenResume: the built-in model agent on the scripted model server (a test
// double for a model endpoint) costs $1 an episode at the configured price; with
// --max-cost-usd 1.5 and one episode at a time the group stops starting episodes after the
// second; --resume runs the two it never started, and the group ends with all four.
func TestEvalCostCapThenResume(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	dir := t.TempDir()
	env := c.kvEnvFile()
	replies := make([]modeltest.Reply, 4)
	for i := range replies {
		replies[i] = modeltest.Reply{Text: "ok", InputTokens: 1_000_000, OutputTokens: 10}
	}
	srv := modeltest.New(t, replies...)
	os.WriteFile(filepath.Join(dir, "priced.yaml"), []byte(`name: priced
steps:
  - id: env
    type: deploy_env
    file: `+env+`
  - id: agent
    type: prompt_agent
    env: env
    agent: openai
    prompt: say ok
  - id: said
    type: response_matches
    step: agent
    contains: ok
`), 0o600)
	evalFile := filepath.Join(dir, "eval.yaml")
	os.WriteFile(evalFile, []byte("name: capped\nconcurrency: 1\ntasks:\n  - task: priced.yaml\n    k: 4\n"), 0o600)
	model := []string{"AGENTENV_MODEL_BASE_URL=" + srv.OpenAIURL(), "AGENTENV_MODEL_NAME=m", "AGENTENV_MODEL_API_KEY=sk-test-secret-1234", "AGENTENV_MODEL_INPUT_PRICE=1"}

	r := c.run(t.Context(), model, "run", evalFile, "--json", "--max-cost-usd", "1.5")
	var g struct {
		groupJSON
		Stopped string  `json:"stopped"`
		NotRun  int     `json:"not_run"`
		Cost    float64 `json:"cost_usd"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &g); err != nil {
		t.Fatalf("run: %v\n%s%s", err, r.stdout, r.stderr)
	}
	if g.Totals.Passed != 2 || g.NotRun != 2 || g.Stopped == "" || g.Cost < 2 || g.Status != "cancelled" {
		t.Fatalf("capped run: exit %d, passed %d, not run %d, stopped %q, cost %v, status %s\n%s", r.code, g.Totals.Passed, g.NotRun, g.Stopped, g.Cost, g.Status, r.stderr)
	}
	res := c.run(t.Context(), model, "run", "--resume", g.Group, "--json")
	rg := decodeGroup(t, res)
	if res.code != 0 || rg.Totals.Passed != 4 || rg.Status != "completed" {
		t.Fatalf("resume: exit %d, totals %+v, status %s\n%s", res.code, rg.Totals, rg.Status, res.stderr)
	}
	if n := len(srv.Requests()); n != 4 {
		t.Errorf("the model was asked %d times, want 4", n)
	}
	exp := c.run(t.Context(), nil, "runs", "export", g.Group)
	if strings.Count(exp.stdout, "\n") != 4 || strings.Contains(exp.stdout, "sk-test-secret-1234") || !strings.Contains(exp.stdout, `"model":"`) {
		t.Errorf("export:\n%s", exp.stdout)
	}
	if left := c.sandboxLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}
