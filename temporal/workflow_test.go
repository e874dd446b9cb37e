package temporal

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/eval"
	"github.com/agentenv/agentenv/task"
)

// fakeWorker stands in for the eval runner behind the activities, recording what the workflows
// asked of it. The workflows run in the SDK's test environment (testsuite), which replays them
// in memory; package temporal's integration tier runs them on a real server.
type fakeWorker struct {
	mu        sync.Mutex
	slots     []eval.SlotKey
	planErr   error
	failing   int // the attempt number of the slot whose episode activity fails (bad input)
	cost      float64
	ran       []eval.SlotKey
	torn      []eval.SlotKey
	finished  []string
	running   int
	maxAtOnce int
}

func (f *fakeWorker) env(t *testing.T) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	s.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(GroupWorkflow, workflow.RegisterOptions{Name: groupWorkflow})
	env.RegisterWorkflowWithOptions(EpisodeWorkflow, workflow.RegisterOptions{Name: episodeWorkflow})
	env.RegisterActivityWithOptions(func(ctx context.Context, group string) (PlanOutput, error) {
		return PlanOutput{Slots: f.slots}, wrap(f.planErr)
	}, activity.RegisterOptions{Name: planActivity})
	env.RegisterActivityWithOptions(func(ctx context.Context, in EpisodeInput) (eval.SlotResult, error) {
		f.mu.Lock()
		f.running++
		f.maxAtOnce = max(f.maxAtOnce, f.running)
		f.ran = append(f.ran, in.Slot)
		f.mu.Unlock()
		time.Sleep(5 * time.Millisecond)
		f.mu.Lock()
		f.running--
		f.mu.Unlock()
		if in.Slot.Attempt == f.failing {
			return eval.SlotResult{}, wrap(errors.Join(errors.New("task file changed"), agentenv.ErrInvalid))
		}
		one := 1.0
		return eval.SlotResult{Run: "run-x", Outcome: task.OutcomePassed, Score: &one, CostUSD: f.cost}, nil
	}, activity.RegisterOptions{Name: slotActivity})
	env.RegisterActivityWithOptions(func(ctx context.Context, in EpisodeInput) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.torn = append(f.torn, in.Slot)
		return nil
	}, activity.RegisterOptions{Name: teardownAct})
	env.RegisterActivityWithOptions(func(ctx context.Context, group, stopped string) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.finished = append(f.finished, stopped)
		return nil
	}, activity.RegisterOptions{Name: finishActivity})
	return env
}

func slots(n int) []eval.SlotKey {
	out := make([]eval.SlotKey, n)
	for i := range out {
		out[i] = eval.SlotKey{Task: 0, Instance: 0, Attempt: i + 1}
	}
	return out
}

// TestGroupWorkflowRunsEverySlotThenFinishes: every planned slot runs once; the one whose
// episode activity failed, and only it, gets the teardown activity (an episode that answered has
// torn down already); the group's end is written once, completed.
func TestGroupWorkflowRunsEverySlotThenFinishes(t *testing.T) {
	f := &fakeWorker{slots: slots(7), failing: 3}
	env := f.env(t)
	env.ExecuteWorkflow(groupWorkflow, GroupInput{Group: "group-1", Concurrency: 3})
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var out GroupOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if out.Slots != 7 || out.Stopped != "" || len(f.ran) != 7 {
		t.Errorf("out %+v, ran %d; want 7 each", out, len(f.ran))
	}
	if len(f.torn) != 1 || f.torn[0].Attempt != 3 {
		t.Errorf("teardown activities for %v; want one, for the failed slot (attempt 3)", f.torn)
	}
	if len(f.finished) != 1 || f.finished[0] != "" {
		t.Errorf("finish calls = %q, want one, completed", f.finished)
	}
}

// TestGroupWorkflowStopsAtTheCostCap: with each episode costing 1 and a cap of 2.5, one at a
// time, the third episode's end passes the cap and no fourth starts; the group ends stopped
// by the cap.
func TestGroupWorkflowStopsAtTheCostCap(t *testing.T) {
	f := &fakeWorker{slots: slots(6), cost: 1}
	env := f.env(t)
	env.ExecuteWorkflow(groupWorkflow, GroupInput{Group: "group-1", Concurrency: 1, MaxCostUSD: 2.5})
	var out GroupOutput
	if err := env.GetWorkflowResult(&out); err != nil {
		t.Fatal(err)
	}
	if out.Slots != 3 || out.Stopped != eval.ErrCostCap.Error() || len(f.finished) != 1 || f.finished[0] != eval.ErrCostCap.Error() {
		t.Errorf("out %+v, finished %q; want 3 slots, stopped by the cost cap", out, f.finished)
	}
}

// TestGroupWorkflowBadGroupIsNotRetried: a plan refused as bad input is not retried, runs no
// slot, and the group's end still gets written, saying why.
func TestGroupWorkflowBadGroupIsNotRetried(t *testing.T) {
	f := &fakeWorker{planErr: errors.Join(errors.New("eval file changed"), agentenv.ErrInvalid)}
	env := f.env(t)
	env.ExecuteWorkflow(groupWorkflow, GroupInput{Group: "group-1", Concurrency: 2})
	if err := env.GetWorkflowError(); err == nil {
		t.Fatal("workflow of a bad group succeeded")
	}
	if len(f.ran) != 0 || len(f.finished) != 1 || f.finished[0] == "" {
		t.Errorf("ran %v, finished %q; want nothing run and the end written with why", f.ran, f.finished)
	}
}

// TestGroupWorkflowCancelledStillFinishes: a group cancelled while its episodes run still
// tears down each started slot and writes its end, cancelled.
func TestGroupWorkflowCancelledStillFinishes(t *testing.T) {
	f := &fakeWorker{slots: slots(20)}
	env := f.env(t)
	env.RegisterDelayedCallback(env.CancelWorkflow, time.Millisecond)
	env.ExecuteWorkflow(groupWorkflow, GroupInput{Group: "group-1", Concurrency: 2})
	if len(f.finished) != 1 || f.finished[0] != "cancelled" {
		t.Errorf("finish calls = %q, want one, cancelled", f.finished)
	}
	// A slot cancelled before its episode's activity started is torn down all the same.
	if len(f.ran) >= 20 || len(f.torn) < len(f.ran) || len(f.torn) == 0 {
		t.Errorf("ran %d, torn down %d; want fewer than 20, each started slot torn down", len(f.ran), len(f.torn))
	}
}
