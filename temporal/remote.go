package temporal

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/eval"
	"github.com/agentenv/agentenv/internal/cleanup"
)

// cancelWait bounds how long a submitter interrupted by the user waits for its cancelled
// group's episodes to tear down.
const cancelWait = 10 * time.Minute

// Remote hands groups to the workers of a Temporal task queue: it is the eval.Remote of
// `agentenv run --runner temporal`.
type Remote struct {
	client client.Client
	cfg    Config
}

// NewRemote returns the Remote that submits to cfg's task queue through c.
func NewRemote(c client.Client, cfg Config) *Remote {
	return &Remote{client: c, cfg: cfg.withDefaults()}
}

// Name implements eval.Remote.
func (r *Remote) Name() string { return "temporal" }

// Submit implements eval.Remote: it starts g's workflow, whose id is the group's, so that a
// group runs once at a time (a second submit while its workers still run it is refused).
func (r *Remote) Submit(ctx context.Context, g eval.Group) error {
	_, err := r.client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                                       g.ID,
		TaskQueue:                                r.cfg.TaskQueue,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
	}, groupWorkflow, GroupInput{Group: g.ID, Concurrency: g.Concurrency, MaxCostUSD: g.MaxCostUSD})
	if temporal.IsWorkflowExecutionAlreadyStartedError(err) {
		return fmt.Errorf("group %s: its workers on %s still run it: %w", g.ID, r.cfg.Address, agentenv.ErrConflict)
	}
	if err != nil {
		return fmt.Errorf("submit group %s to %s queue %s: %w", g.ID, r.cfg.Address, r.cfg.TaskQueue, err)
	}
	return nil
}

// Wait implements eval.Remote.
func (r *Remote) Wait(ctx context.Context, id string) error {
	ended := make(chan error, 1)
	// The group may run for hours: following it has no bound of its own, and ends with ctx.
	wctx, stop := context.WithCancel(cleanup.Unbounded(ctx))
	defer stop()
	go func() { ended <- r.client.GetWorkflow(wctx, id, "").Get(wctx, nil) }()
	select {
	case err := <-ended:
		var canceled *temporal.CanceledError
		if errors.As(err, &canceled) {
			return fmt.Errorf("group %s was cancelled on temporal", id)
		}
		return err
	case <-ctx.Done():
	}
	// Bounded, and cut short by a second Ctrl-C (the hard stop).
	cctx, cancel := cleanup.Context(ctx, cancelWait)
	defer cancel()
	return errors.Join(ctx.Err(), r.Cancel(cctx, id))
}

// Cancel implements eval.Remote: it asks Temporal to cancel group id's workflow, whose workers
// then tear its episodes down and write its end, and waits (at most cancelWait) for that end.
// A workflow that has ended, however, is left as it is.
func (r *Remote) Cancel(ctx context.Context, id string) error {
	ctx, cancel := context.WithTimeout(ctx, cancelWait)
	defer cancel()
	err := r.client.CancelWorkflow(ctx, id, "")
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return nil // it ended before the cancel
	}
	if err != nil {
		return fmt.Errorf("cancel group %s on %s: %w", id, r.cfg.Address, err)
	}
	err = r.client.GetWorkflow(ctx, id, "").Get(ctx, nil)
	var ended *temporal.WorkflowExecutionError
	var canceled *temporal.CanceledError
	switch {
	case err == nil, errors.As(err, &ended), errors.As(err, &canceled):
		return nil
	case ctx.Err() != nil:
		return fmt.Errorf("group %s: its episodes did not end within %s of the cancel: %w", id, cancelWait, ctx.Err())
	}
	return fmt.Errorf("group %s: waiting for its end: %w", id, err)
}
