package task_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/fault"
	"github.com/agentenv/agentenv/task"
)

func TestExamples(t *testing.T) {
	for _, path := range []string{"../examples/notes-task", "../examples/notes-task/agent-task.yaml", "../examples/hello", "../examples/graded-task", "../examples/shop-task", "../examples/shop-task/model-task.yaml"} {
		tk, err := task.LoadPath(path)
		if err != nil {
			t.Errorf("LoadPath(%s) = %v", path, err)
			continue
		}
		if len(tk.Verifiers()) == 0 {
			t.Errorf("%s has no verifier", path)
		}
	}
	tk, err := task.LoadPath("../examples/notes-task")
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, s := range tk.Steps {
		types = append(types, s.Type)
	}
	want := "deploy_env load_data prompt_agent response_matches tool_result sql data_get aggregate"
	if got := strings.Join(types, " "); got != want {
		t.Errorf("notes-task steps = %s, want %s", got, want)
	}
}

// TestNotesTaskWithoutDeployer checks that deploy_env without a deployer fails clearly.
func TestNotesTaskWithoutDeployer(t *testing.T) {
	tk, err := task.LoadPath("../examples/notes-task")
	if err != nil {
		t.Fatal(err)
	}
	r := newRig(t, nil)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	if ep.Outcome != task.OutcomeError || !strings.Contains(ep.Error, "none is configured") || *ep.Score != 0 {
		t.Errorf("episode = %s %q score %v, want error naming the missing deployer, score 0", ep.Outcome, ep.Error, *ep.Score)
	}
}

// runsLedger is a ledger whose run documents fail on chosen Put calls (package fault wraps
// records only).
type runsLedger struct {
	agentenv.Ledger
	failOn map[int64]bool
	calls  *atomic.Int64
}

type failingRuns struct {
	agentenv.DocStore[agentenv.Run]
	l *runsLedger
}

func (l *runsLedger) Runs() agentenv.DocStore[agentenv.Run] {
	return failingRuns{l.Ledger.Runs(), l}
}

func (f failingRuns) Put(ctx context.Context, d agentenv.Run) error {
	n := f.l.calls.Add(1)
	if f.l.failOn[n] {
		return fault.ErrInjected
	}
	if f.l.failOn[-1] {
		panic("run store exploded")
	}
	return f.DocStore.Put(ctx, d)
}

func TestRunRecordFaults(t *testing.T) {
	t.Run("record put fails: deploy fails, nothing left", func(t *testing.T) {
		r := newRig(t, func(l agentenv.Ledger) agentenv.Ledger {
			return fault.WrapLedger(l, fault.NewPlan(fault.Rule{Op: "put", Call: 1, Action: fault.Error}))
		})
		sum, err := r.runner.Run(t.Context(), task.Hello(), task.RunOptions{})
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
		ep := sum.Episodes[0]
		if ep.Outcome != task.OutcomeError || !strings.Contains(ep.Error, "injected fault") {
			t.Errorf("episode = %s %q, want error with the injected fault", ep.Outcome, ep.Error)
		}
		r.assertClean(t)
	})
	for _, tc := range []struct {
		name   string
		failOn map[int64]bool
		want   string
	}{
		{"run put 2 fails", map[int64]bool{2: true}, "injected fault"},
		{"every run put fails", map[int64]bool{1: true, 2: true, 3: true, 4: true, 5: true, 6: true, 7: true, 8: true, 9: true, 10: true, 11: true, 12: true, 13: true, 14: true}, "injected fault"},
		{"run store panics", map[int64]bool{-1: true}, "panic: run store exploded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, func(l agentenv.Ledger) agentenv.Ledger {
				return &runsLedger{Ledger: l, failOn: tc.failOn, calls: &atomic.Int64{}}
			})
			sum, err := r.runner.Run(t.Context(), task.Hello(), task.RunOptions{})
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
			ep := sum.Episodes[0]
			if ep.Outcome != task.OutcomePassed {
				t.Errorf("episode = %s %q, want passed: a lost run record does not change the verdict", ep.Outcome, ep.Error)
			}
			if len(ep.Warnings) == 0 || !strings.Contains(strings.Join(ep.Warnings, "\n"), tc.want) {
				t.Errorf("warnings = %v, want one naming %q", ep.Warnings, tc.want)
			}
			r.assertClean(t)
		})
	}
}

func TestConcurrentEpisodes(t *testing.T) {
	r := newRig(t, nil)
	sum, err := r.runner.Run(t.Context(), task.Hello(), task.RunOptions{K: 6, Concurrency: 3})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	if len(sum.Episodes) != 6 || sum.Passed != 6 || sum.PassAt["1"] != 1 || sum.PassAt["6"] != 1 {
		t.Errorf("summary = %+v, want 6 passed, pass@1 = pass@6 = 1", sum)
	}
	ids := map[string]bool{}
	for _, ep := range sum.Episodes {
		ids[ep.Run] = true
	}
	if len(ids) != 6 {
		t.Errorf("run ids = %v, want 6 distinct", ids)
	}
	runs, _ := r.ledger.Runs().List(t.Context(), []string{string(agentenv.RunCompleted)}, 0)
	if len(runs) != 6 {
		t.Errorf("%d completed run records, want 6", len(runs))
	}
	r.assertClean(t)
}

// TestCancelTearsDown cancels a run while a step blocks in a live sandbox, and checks that the
// episode is cancelled, the step drained and the sandbox torn down.
func TestCancelTearsDown(t *testing.T) {
	r := newRig(t, nil)
	tk := mustParse(t, "c.yaml", `
steps:
- {id: sb, type: deploy_sandbox, provider: process}
- {id: wait, type: exec, sandbox: sb, command: [sleep, "30"]}
- {id: check, type: command_succeeds, sandbox: sb, command: ["true"]}
`)
	ctx, cancel := context.WithCancel(t.Context())
	r.runner.Progress = func(ev task.Event) {
		if ev.Step == "wait" && ev.Status == string(agentenv.StepRunning) {
			time.AfterFunc(50*time.Millisecond, cancel)
		}
	}
	start := time.Now()
	sum, err := r.runner.Run(ctx, tk, task.RunOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Errorf("Run took %s after the cancel", time.Since(start))
	}
	ep := sum.Episodes[0]
	if ep.Outcome != task.OutcomeCancelled || ep.Receipt == nil || !ep.Receipt.Clean() || len(ep.Receipt.Items) != 1 {
		t.Errorf("episode = %s, receipt %+v; want cancelled with a clean receipt of one sandbox", ep.Outcome, ep.Receipt)
	}
	if ep.Steps[1].Status != agentenv.StepCancelled || ep.Steps[2].Status != agentenv.StepCancelled {
		t.Errorf("steps = %+v, want wait and check cancelled", ep.Steps)
	}
	doc, _ := r.ledger.Runs().Get(t.Context(), ep.Run)
	if doc.Status != agentenv.RunCancelled {
		t.Errorf("run record status = %s, want cancelled", doc.Status)
	}
	r.assertClean(t)
}

// TestSandboxSteps covers the sandbox verifiers, exec outputs and teardown_sandboxes on the
// process and fake providers.
func TestSandboxSteps(t *testing.T) {
	r := newRig(t, nil)
	tk := mustParse(t, "s.yaml", `
score: weighted_average
steps:
- {id: sb, type: deploy_sandbox, provider: process}
- {id: w, type: write_file, sandbox: sb, path: dir/a.txt, content: "alpha beta\n"}
- {id: x, type: exec, sandbox: sb, command: [sh, -c, "cat dir/a.txt; echo oops >&2; exit 3"], allow_failure: true}
- {id: f1, type: file_contains, sandbox: sb, path: dir/a.txt, contains: beta, regex: "^alpha"}
- {id: f2, type: file_contains, sandbox: sb, path: dir/a.txt, contains: gamma, regex: "^alpha"}
- {id: f3, type: file_contains, sandbox: sb, path: nope.txt, contains: x}
- {id: c1, type: command_succeeds, sandbox: sb, command: [sh, -c, "exit 1"], weight: 2}
- {id: c2, type: command_succeeds, sandbox: sb, command: [cat, dir/a.txt], stdout_regex: "(?m)beta$"}
- {id: r1, type: response_matches, step: x, output: stderr, equals: "oops\n"}
- {id: fk, type: deploy_sandbox, provider: fake, depends_on: []}
- {id: down, type: teardown_sandboxes, steps: [sb, fk]}
`)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	got := map[string]agentenv.StepRecord{}
	for _, s := range ep.Steps {
		got[s.ID] = s
	}
	for id, want := range map[string]float64{"f1": 1, "f2": 0.5, "f3": 0, "c1": 0, "c2": 1, "r1": 1} {
		if s := got[id].Score; s == nil || *s != want {
			t.Errorf("%s: score %v (rows %s, error %q), want %v", id, s, got[id].Outputs["rows"], got[id].Error, want)
		}
	}
	if x := got["x"].Outputs; x["exit_code"] != "3" || x["stdout"] != "alpha beta\n" {
		t.Errorf("exec outputs = %v", x)
	}
	if d := got["down"]; d.Status != agentenv.StepPassed || d.Outputs["terminated"] != "2" {
		t.Errorf("teardown_sandboxes = %+v, want 2 terminated", d)
	}
	// weighted_average over f1 1, f2 .5, f3 0, c1 0 (weight 2), c2 1, r1 1: 3.5 / 7.
	if ep.Score == nil || *ep.Score != 0.5 {
		t.Errorf("score = %v, want 0.5", ep.Score)
	}
	if ep.Receipt == nil || len(ep.Receipt.Items) != 0 {
		t.Errorf("final receipt = %+v, want empty: teardown_sandboxes took both", ep.Receipt)
	}
	r.assertClean(t)
}

func TestKeepThenTeardown(t *testing.T) {
	r := newRig(t, nil)
	sum, err := r.runner.Run(t.Context(), task.Hello(), task.RunOptions{Keep: true})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	if !ep.Kept || ep.Receipt != nil || ep.Outcome != task.OutcomePassed {
		t.Errorf("episode = %+v, want passed and kept without a receipt", ep)
	}
	live, _ := r.ledger.List(t.Context(), agentenv.Filter{Run: ep.Run, States: []agentenv.State{agentenv.StateLive}})
	if len(live) != 1 {
		t.Fatalf("live records of the kept run = %d, want 1", len(live))
	}
	rc, err := r.runner.Teardown(t.Context(), ep.Run)
	if err != nil || len(rc.Items) != 1 || !rc.Clean() {
		t.Errorf("Teardown(%s) = %+v, %v; want one sandbox down", ep.Run, rc, err)
	}
	if doc, _ := r.ledger.Runs().Get(t.Context(), ep.Run); doc.Receipt == nil {
		t.Errorf("run record has no receipt after Teardown")
	}
	r.assertClean(t)
}
