package temporal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/eval"
)

// workerStopTimeout bounds how long a stopping worker lets its episodes wind down (their
// contexts are cancelled, so they tear down) before it leaves.
const workerStopTimeout = 5 * time.Minute

// Work runs groups' workflows and their episodes as activities from cfg's task queue, at most
// cfg.Slots episodes at once, through runner (whose ledger the submitters share), until ctx is
// done; then it stops taking work, lets the episodes under way tear down (bounded) and returns.
func Work(ctx context.Context, c client.Client, cfg Config, runner *eval.Runner, log *slog.Logger) error {
	cfg = cfg.withDefaults()
	w := worker.New(c, cfg.TaskQueue, worker.Options{
		MaxConcurrentActivityExecutionSize: cfg.Slots,
		WorkerStopTimeout:                  workerStopTimeout,
		Identity:                           identity(),
	})
	w.RegisterWorkflowWithOptions(GroupWorkflow, workflow.RegisterOptions{Name: groupWorkflow})
	w.RegisterWorkflowWithOptions(EpisodeWorkflow, workflow.RegisterOptions{Name: episodeWorkflow})
	a := &activities{runner: runner, log: log}
	w.RegisterActivityWithOptions(a.plan, activity.RegisterOptions{Name: planActivity})
	w.RegisterActivityWithOptions(a.runSlot, activity.RegisterOptions{Name: slotActivity})
	w.RegisterActivityWithOptions(a.teardownSlot, activity.RegisterOptions{Name: teardownAct})
	w.RegisterActivityWithOptions(a.finish, activity.RegisterOptions{Name: finishActivity})
	if err := w.Start(); err != nil {
		return fmt.Errorf("temporal worker on %s queue %s: %w", cfg.Address, cfg.TaskQueue, err)
	}
	log.Info("worker started", "temporal", cfg.Address, "namespace", cfg.Namespace, "task_queue", cfg.TaskQueue, "slots", cfg.Slots)
	<-ctx.Done()
	log.Info("worker stopping: episodes under way tear down first")
	w.Stop()
	return nil
}

// activities are the worker's side of the workflows: each a call into the eval runner.
type activities struct {
	runner *eval.Runner
	log    *slog.Logger
}

func (a *activities) plan(ctx context.Context, group string) (PlanOutput, error) {
	_, slots, err := a.runner.Plan(ctx, group)
	return PlanOutput{Slots: slots}, wrap(err)
}

func (a *activities) runSlot(ctx context.Context, in EpisodeInput) (eval.SlotResult, error) {
	stop := heartbeat(ctx)
	defer stop()
	if n := activity.GetInfo(ctx).Attempt; n > 1 {
		a.log.Info("taking over a slot", "group", in.Group, "slot", in.Slot.String(), "attempt", n)
	}
	res, err := a.runner.RunSlot(ctx, in.Group, in.Slot)
	return res, wrap(err)
}

func (a *activities) teardownSlot(ctx context.Context, in EpisodeInput) error {
	stop := heartbeat(ctx)
	defer stop()
	rc, err := a.runner.TeardownSlot(ctx, in.Group, in.Slot)
	if len(rc.Items) > 0 {
		a.log.Info("slot torn down after its episode", "group", in.Group, "slot", in.Slot.String(), "items", len(rc.Items), "err", err)
	}
	return wrap(err)
}

func (a *activities) finish(ctx context.Context, group, stopped string) error {
	return wrap(a.runner.Finish(ctx, group, stopped))
}

// heartbeat records the activity's heartbeat at a third of heartbeatTimeout until stopped, so
// that Temporal knows its worker lives and can deliver a cancel to it.
// Stop returns once the last heartbeat is recorded: none may follow the activity's answer.
func heartbeat(ctx context.Context) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(heartbeatTimeout / 3)
		defer t.Stop()
		for {
			activity.RecordHeartbeat(ctx)
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { close(done); <-exited }
}

// wrap turns bad input into an application error no retry is made for; other errors are
// retried under the activity's policy.
func wrap(err error) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, agentenv.ErrInvalid) || errors.Is(err, agentenv.ErrNotFound) {
		return temporal.NewNonRetryableApplicationError(err.Error(), errInvalid, err)
	}
	return err
}
