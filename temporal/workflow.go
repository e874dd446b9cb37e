package temporal

import (
	"errors"
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/agentenv/agentenv/eval"
)

// Names under which the workflows and activities are registered: the contract between a
// submitter and the workers of any version.
const (
	groupWorkflow   = "agentenv.group"
	episodeWorkflow = "agentenv.episode"
	planActivity    = "agentenv.plan"
	slotActivity    = "agentenv.run_slot"
	teardownAct     = "agentenv.teardown_slot"
	finishActivity  = "agentenv.finish"
)

// GroupInput starts a group's workflow. It names the group: everything else is in the ledger,
// so no secret and no file enters the workflow's history.
type GroupInput struct {
	Group       string  `json:"group"`
	Concurrency int     `json:"concurrency"`
	MaxCostUSD  float64 `json:"max_cost_usd,omitempty"`
}

// GroupOutput is how a group's workflow ended.
type GroupOutput struct {
	Slots   int     `json:"slots"`             // slots it ran
	Stopped string  `json:"stopped,omitempty"` // why it stopped early: "cancelled", the cost cap
	CostUSD float64 `json:"cost_usd,omitempty"`
}

// EpisodeInput is one slot of a group, the input of its episode's workflow and activities.
type EpisodeInput struct {
	Group string       `json:"group"`
	Slot  eval.SlotKey `json:"slot"`
}

// PlanOutput is what the plan activity found: the slots still to run.
type PlanOutput struct {
	Slots []eval.SlotKey `json:"slots"`
}

// Bounds of the activities. An episode's activity has no useful start-to-close bound of its
// own (the task's step timeouts bound it); a worker that dies is noticed by its heartbeat.
const (
	shortActivityTimeout = 2 * time.Minute
	episodeTimeout       = 24 * time.Hour
	teardownTimeout      = 15 * time.Minute
	// heartbeatTimeout is how long an episode's worker may be silent before Temporal gives its
	// slot to another worker; workers heartbeat at a third of it.
	heartbeatTimeout = 30 * time.Second
	// slotAttempts bounds how many workers may take one slot in turn (each lost in the middle).
	slotAttempts = 4
)

// errInvalid is the type of the application errors that no retry can mend (bad input: a group
// whose files changed, a slot that does not exist).
const errInvalid = "invalid"

// GroupWorkflow runs a group: it plans the slots still to run, runs each as a child workflow
// (at most in.Concurrency at once, none started once the summed cost passes in.MaxCostUSD or
// once cancelled) and, whatever happened, writes the group's end on a context of its own.
func GroupWorkflow(ctx workflow.Context, in GroupInput) (GroupOutput, error) {
	var out GroupOutput
	short := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: shortActivityTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 5, NonRetryableErrorTypes: []string{errInvalid}},
	})
	var plan PlanOutput
	perr := workflow.ExecuteActivity(short, planActivity, in.Group).Get(ctx, &plan)

	limit := max(in.Concurrency, 1)
	running := 0
	sel := workflow.NewSelector(ctx)
	var childErrs []error
	if perr == nil {
		for _, k := range plan.Slots {
			for running >= limit {
				sel.Select(ctx)
			}
			if ctx.Err() != nil {
				break
			}
			if in.MaxCostUSD > 0 && out.CostUSD > in.MaxCostUSD {
				out.Stopped = eval.ErrCostCap.Error()
				break
			}
			cctx := workflow.WithChildOptions(ctx, workflow.ChildWorkflowOptions{
				WorkflowID:          fmt.Sprintf("%s/%d/%d/%d", in.Group, k.Task, k.Instance, k.Attempt),
				WaitForCancellation: true,
			})
			f := workflow.ExecuteChildWorkflow(cctx, episodeWorkflow, EpisodeInput{Group: in.Group, Slot: k})
			running++
			out.Slots++
			sel.AddFuture(f, func(f workflow.Future) {
				running--
				var res eval.SlotResult
				if err := f.Get(ctx, &res); err != nil {
					childErrs = append(childErrs, fmt.Errorf("slot %s: %w", k, err))
				}
				out.CostUSD += res.CostUSD
			})
		}
		for running > 0 {
			sel.Select(ctx)
		}
	}
	if ctx.Err() != nil {
		out.Stopped = "cancelled"
	} else if perr != nil {
		out.Stopped = "not planned: " + perr.Error()
	}
	dctx, _ := workflow.NewDisconnectedContext(short)
	ferr := workflow.ExecuteActivity(dctx, finishActivity, in.Group, out.Stopped).Get(dctx, nil)
	if ctx.Err() != nil {
		return out, temporal.NewCanceledError()
	}
	if len(childErrs) > 0 {
		workflow.GetLogger(ctx).Warn("episodes ended on errors", "count", len(childErrs), "first", childErrs[0])
	}
	return out, errors.Join(perr, ferr)
}

// teardownOnErrorOnly is the change id of the episode workflow that skips the teardown
// activity after an episode activity that answered; histories from before it replay as they ran.
const teardownOnErrorOnly = "teardown-on-error-only"

// EpisodeWorkflow runs one slot: its episode as an activity that heartbeats (so that a worker
// that dies hands the slot to another, which tears down what the lost one made first), then,
// whatever else ended it (an error, a cancel, the attempts spent), the slot's teardown as an
// activity on a context the cancel does not reach. An episode activity that answered has torn
// down what it made already (RunSlot errs when that teardown fails), so it needs none: one
// activity and one workflow task fewer per episode.
func EpisodeWorkflow(ctx workflow.Context, in EpisodeInput) (eval.SlotResult, error) {
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: episodeTimeout,
		HeartbeatTimeout:    heartbeatTimeout,
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: slotAttempts, InitialInterval: time.Second,
			NonRetryableErrorTypes: []string{errInvalid}},
	})
	var res eval.SlotResult
	err := workflow.ExecuteActivity(actx, slotActivity, in).Get(ctx, &res)

	if err == nil && workflow.GetVersion(ctx, teardownOnErrorOnly, workflow.DefaultVersion, 1) == 1 {
		return res, nil
	}
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	dctx = workflow.WithActivityOptions(dctx, workflow.ActivityOptions{
		StartToCloseTimeout: teardownTimeout,
		HeartbeatTimeout:    heartbeatTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 10, NonRetryableErrorTypes: []string{errInvalid}},
	})
	terr := workflow.ExecuteActivity(dctx, teardownAct, in).Get(dctx, nil)
	if terr != nil {
		terr = fmt.Errorf("teardown: %w", terr)
	}
	return res, errors.Join(err, terr)
}
