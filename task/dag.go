package task

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/agentenv/agentenv"
)

// Defaults for the zero values of Runner and RunOptions.
const (
	DefaultDrainTimeout    = 30 * time.Second
	DefaultTeardownTimeout = 2 * time.Minute
	DefaultStepConcurrency = 8
)

// errCancelled marks a run stopped by its caller.
var errCancelled = errors.New("run cancelled")

// runDAG runs the episode's steps: each as soon as its dependencies have ended, at most
// StepConcurrency at once. A step whose dependency was skipped or cancelled, or is a verifier
// whose gate closed (it scored below its min_score, or its own Result.Gate), is skipped: a
// closed gate ends that branch of the episode as a scored result, not as an error. A failing step with fail_task_on_error stops dispatch and cancels
// the steps in flight; so does a cancelled ctx. Either way it waits for the steps in flight,
// up to the drain timeout. It returns the fatal failure (or errCancelled), nil if none.
func (e *episode) runDAG(ctx context.Context) error {
	steps := e.t.Steps
	limit := e.opts.StepConcurrency
	if limit <= 0 {
		limit = DefaultStepConcurrency
	}
	dctx, cancel := context.WithCancel(ctx)
	defer cancel()

	type done struct {
		i   int
		res Result
		err error
	}
	doneCh := make(chan done, len(steps)) // buffered: a step that outlives the drain never blocks
	status := make([]agentenv.StepStatus, len(steps))
	gated := make([]string, len(steps)) // why each step's gate closed; "" while open
	for i := range status {
		status[i] = agentenv.StepPending
	}
	pos := map[string]int{}
	for i, s := range steps {
		pos[s.ID] = i
	}
	var fatal error
	running := 0
	cancelled := ctx.Done()
	var drain <-chan time.Time
	cancels := make([]context.CancelFunc, len(steps))
	retried := map[string]int{} // span retries used, by the retrying step
	var retry *spanRetry        // a span waiting for its steps in flight before it runs again

	stop := func(err error) {
		if fatal == nil {
			fatal = err
			cancel()
			drain = time.After(e.r.drainTimeout())
		}
	}
	for {
		if retry != nil && fatal == nil && !retry.inFlight(steps, status) {
			if err := e.resetSpan(ctx, retry, retried[retry.step.ID]); err != nil {
				stop(err)
			} else {
				for i, s := range steps {
					if retry.span[s.ID] {
						status[i], gated[i] = agentenv.StepPending, ""
					}
				}
			}
			retry = nil
		}
		if fatal == nil && retry == nil {
			for i, s := range steps {
				if status[i] != agentenv.StepPending || running >= limit {
					continue
				}
				ready, blocked := true, ""
				for _, dep := range s.DependsOn {
					switch status[pos[dep]] {
					case agentenv.StepPending, agentenv.StepRunning:
						ready = false
					case agentenv.StepSkipped, agentenv.StepCancelled:
						blocked = dep
					case agentenv.StepPassed:
						if gated[pos[dep]] != "" {
							blocked = dep
						}
					}
				}
				if !ready {
					continue
				}
				if blocked != "" {
					status[i] = agentenv.StepSkipped
					why := fmt.Sprintf("dependency %s did not run", blocked)
					if g := gated[pos[blocked]]; g != "" {
						why = fmt.Sprintf("the gate of %s closed: %s", blocked, g)
					}
					e.skip(ctx, s, agentenv.StepSkipped, why)
					continue
				}
				status[i] = agentenv.StepRunning
				running++
				e.transition(ctx, s, func(st *stepState) {
					st.rec.Status, st.rec.Started = agentenv.StepRunning, time.Now().UTC()
				})
				sctx, scancel := context.WithCancel(dctx)
				cancels[i] = scancel
				go func() {
					defer scancel()
					res, err := e.runStep(sctx, s)
					doneCh <- done{i, res, err}
				}()
			}
		}
		if running == 0 {
			break
		}
		select {
		case d := <-doneCh:
			running--
			s := steps[d.i]
			if retry != nil && retry.span[s.ID] {
				status[d.i] = agentenv.StepCancelled // stopped for its span's retry; reset with it
				e.transition(ctx, s, func(st *stepState) {
					st.rec.Status, st.rec.Ended, st.rec.Error = agentenv.StepCancelled, time.Now().UTC(), "stopped: its span runs again"
				})
				continue
			}
			st, gate := e.finish(ctx, dctx, s, d.res, d.err)
			status[d.i], gated[d.i] = st, gate
			if st == agentenv.StepFailed && fatal == nil && retry == nil && ctx.Err() == nil && s.Retry != nil &&
				retried[s.ID] < s.Retry.Max && classify(s.Type, d.err) == agentenv.StepErrorInfra {
				retried[s.ID]++
				retry = e.newSpanRetry(s, d.err)
				for j, o := range steps {
					if retry.span[o.ID] && status[j] == agentenv.StepRunning {
						cancels[j]()
					}
				}
				continue
			}
			if st == agentenv.StepFailed && s.FailTaskOnError {
				stop(withKind(classify(s.Type, d.err), fmt.Errorf("step %s: %w", s.ID, d.err)))
			}
		case <-cancelled:
			cancelled = nil
			stop(errCancelled)
		case <-drain:
			for i, s := range steps {
				if status[i] == agentenv.StepRunning {
					status[i] = agentenv.StepCancelled
					e.transition(ctx, s, func(st *stepState) {
						st.rec.Status, st.rec.Ended = agentenv.StepCancelled, time.Now().UTC()
						st.rec.Error = fmt.Sprintf("did not stop within %s of the cancellation", e.r.drainTimeout())
					})
				}
			}
			running = 0
		}
	}
	why := agentenv.StepSkipped
	if errors.Is(fatal, errCancelled) {
		why = agentenv.StepCancelled
	}
	for i, s := range steps {
		if status[i] == agentenv.StepPending {
			e.skip(ctx, s, why, "not started: "+fatal.Error())
		}
	}
	return fatal
}

// skip records that s did not run.
func (e *episode) skip(ctx context.Context, s *StepSpec, status agentenv.StepStatus, reason string) {
	e.transition(ctx, s, func(st *stepState) {
		st.rec.Status, st.rec.Error = status, reason
		if e.t.kinds[s.Type].verifier {
			zero := 0.0
			st.rec.Score = &zero
		}
	})
}

// finish records how step s ended and returns its status and, for a verifier that passed with
// its gate closed, why (kept as its output "gate").
func (e *episode) finish(ctx, dctx context.Context, s *StepSpec, res Result, err error) (agentenv.StepStatus, string) {
	status := agentenv.StepPassed
	switch {
	case err != nil && dctx.Err() != nil && !errors.Is(err, errStepTimeout):
		status = agentenv.StepCancelled
	case err != nil:
		status = agentenv.StepFailed
	}
	if err != nil {
		res.Score = nil // an errored verifier scores 0, never a silent pass
	}
	gate := ""
	if status == agentenv.StepPassed && e.t.kinds[s.Type].verifier {
		gate = gateOf(s, res)
	}
	if gate != "" {
		e.log.Debug("gate closed: the steps that depend on it are skipped", "step", s.ID, "why", gate)
		if res.Outputs == nil {
			res.Outputs = map[string]string{}
		}
		res.Outputs["gate"] = "closed: " + gate
	}
	e.transition(ctx, s, func(st *stepState) {
		e.setOutputs(s, st, res)
		st.rec.Status, st.rec.Ended = status, time.Now().UTC()
		if err != nil {
			st.rec.Error = err.Error()
		}
		if status == agentenv.StepFailed {
			st.rec.ErrorKind = classify(s.Type, err)
		}
	})
	return status, gate
}

// gateOf is why the gate of verifier s closed with res, or "" if it is open: its own
// Result.Gate, else a score below its min_score.
func gateOf(s *StepSpec, res Result) string {
	if res.Gate != "" {
		return res.Gate
	}
	if s.MinScore == nil {
		return ""
	}
	score := 0.0
	if res.Score != nil {
		score = *res.Score
	}
	if score < *s.MinScore {
		return fmt.Sprintf("score %s is below min_score %s", formatScore(score), formatScore(*s.MinScore))
	}
	return ""
}

// errStepTimeout marks a step that ran out of its own time.
var errStepTimeout = errors.New("step timed out")

// runStep fills s's output references, decodes it and runs it within its timeout.
func (e *episode) runStep(ctx context.Context, s *StepSpec) (res Result, err error) {
	sctx, cancel := context.WithTimeout(ctx, s.Timeout)
	defer cancel()
	defer func() {
		if p := recover(); p != nil {
			e.log.Error("step panicked", "step", s.ID, "panic", p, "stack", string(debug.Stack()))
			err = fmt.Errorf("panic: %v", p)
		}
		if err != nil && errors.Is(sctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
			err = fmt.Errorf("%w after %s: %w", errStepTimeout, s.Timeout, err)
		}
	}()
	if e.t.kinds[s.Type].verifier {
		if err := e.failedAgent(s); err != nil {
			return Result{}, err
		}
	}
	fields, err := fillOutputs(s.Type, e.fields[s.ID], e.lookup)
	if err != nil {
		return Result{}, err
	}
	st, err := e.t.decodeFields(s, fields)
	if err != nil {
		return Result{}, err
	}
	sc := &scope{e: e, s: s, log: e.log.With("step", s.ID, "type", s.Type)}
	return st.Run(sctx, sc)
}

// failedAgent returns an error naming the first prompt_agent step s depends on that failed: the
// verifiers of an errored agent score 0 with its reason, whatever they check.
func (e *episode) failedAgent(s *StepSpec) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, dep := range e.t.Steps {
		if dep.Type != TypePromptAgent || !e.t.anc[s.ID][dep.ID] {
			continue
		}
		if st := e.states[dep.ID]; st.rec.Status != agentenv.StepPassed {
			kind := st.rec.ErrorKind
			if kind == "" {
				kind = agentenv.StepErrorInfra // it did not run: nothing the agent did
			}
			return withKind(kind, fmt.Errorf("agent step %s %s: %s", dep.ID, st.rec.Status, st.rec.Error))
		}
	}
	return nil
}
