package task

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/agentenv/agentenv"
)

// infraError returns the infrastructure error that makes the episode no sample, nil if none:
// the fatal step's error when it is the infrastructure's, else the error of the first
// verifier that failed on one (a score it could not give is no 0 of the agent's).
func (e *episode) infraError(fatal error) error {
	if errors.Is(fatal, errCancelled) {
		return nil
	}
	if fatal != nil {
		if classify("", fatal) == agentenv.StepErrorInfra {
			return fatal
		}
		return nil
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.t.Steps {
		rec := e.states[s.ID].rec
		if e.t.kinds[s.Type].verifier && rec.Status == agentenv.StepFailed && rec.ErrorKind == agentenv.StepErrorInfra {
			return withKind(agentenv.StepErrorInfra, fmt.Errorf("step %s: %s", s.ID, rec.Error))
		}
	}
	return nil
}

// failedStep returns the id of the first step that failed, or "".
func (e *episode) failedStep() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.t.Steps {
		if e.states[s.ID].rec.Status == agentenv.StepFailed {
			return s.ID
		}
	}
	return ""
}

// retryEpisode ends attempt n, which failed on cause: it tears down everything the attempt
// made, records the attempt with its receipt in the run document and resets the episode to
// run again from scratch. An error means the teardown failed and no retry may follow.
func (e *episode) retryEpisode(ctx context.Context, n int, started time.Time, cause error) error {
	e.closeLocal(ctx)
	rc, err := e.r.teardownRun(ctx, e.id, e.trackedDeployments())
	a := agentenv.RunAttempt{Attempt: n + len(e.opts.Prior), Step: e.failedStep(), ErrorKind: agentenv.StepErrorInfra,
		Started: started.UTC(), Elapsed: time.Since(started), Receipt: &rc}
	e.log.Info("episode retried after an infrastructure error", "attempt", n, "err", cause)
	e.mu.Lock()
	a.Error = e.redact(cause.Error())
	e.doc.Attempts = append(e.doc.Attempts, a)
	if err == nil {
		e.sandboxes, e.envs, e.envOrder = map[string]sandboxRef{}, map[string]*envRef{}, nil
		for _, s := range e.t.Steps {
			e.states[s.ID] = &stepState{rec: agentenv.StepRecord{ID: s.ID, Type: s.Type, Status: agentenv.StepPending}}
		}
	}
	e.mu.Unlock()
	e.emit(Event{Kind: EventRetry, Time: time.Now(), Run: e.id, Episode: e.num, Episodes: e.total, Step: a.Step,
		Status: fmt.Sprintf("attempt %d failed, running again", n), Error: a.Error, Elapsed: a.Elapsed})
	e.save(ctx)
	if err != nil {
		return withKind(agentenv.StepErrorInfra, fmt.Errorf("%w; teardown before a retry: %w", cause, err))
	}
	return nil
}

// spanRetry is a step's retry under way: the span of steps to run again.
type spanRetry struct {
	step *StepSpec       // the step whose infra error asked for it
	span map[string]bool // its retry.from and every step that depends on that, the step included
	err  error
}

// newSpanRetry returns the retry of s's span after its error err.
func (e *episode) newSpanRetry(s *StepSpec, err error) *spanRetry {
	from := s.Retry.From
	span := map[string]bool{from: true, s.ID: true}
	for _, o := range e.t.Steps {
		if e.t.anc[o.ID][from] {
			span[o.ID] = true
		}
	}
	return &spanRetry{step: s, span: span, err: err}
}

// inFlight reports whether a step of the span still runs.
func (r *spanRetry) inFlight(steps []*StepSpec, status []agentenv.StepStatus) bool {
	for i, s := range steps {
		if r.span[s.ID] && status[i] == agentenv.StepRunning {
			return true
		}
	}
	return false
}

// resetSpan tears down what the span's steps made (their sandboxes, every record labelled with
// their role, their deployments), records attempt n of the span with its receipt and sets the
// span's steps back to pending, their outputs gone. Steps outside the span and what they made
// are kept. An error means the teardown failed: the span does not run again.
func (e *episode) resetSpan(ctx context.Context, r *spanRetry, n int) error {
	from := r.step.Retry.From
	rc := agentenv.Receipt{Started: time.Now().UTC()}
	var errs []error
	e.mu.Lock()
	started := e.states[from].rec.Started
	var records, deployments []string
	for id := range r.span {
		if sb, ok := e.sandboxes[id]; ok {
			records = append(records, sb.Record)
		}
		if env := e.envs[id]; env != nil && !env.tornDown && env.local == nil {
			deployments = append(deployments, env.ID)
		}
	}
	e.mu.Unlock()
	e.closeLocal(ctx, slices.Collect(maps.Keys(r.span))...)
	for _, id := range deployments {
		if e.r.Deployer == nil {
			errs = append(errs, fmt.Errorf("deployment %s: no env deployer", id))
			continue
		}
		drc, err := e.r.Deployer.Teardown(ctx, id)
		rc.Items = append(rc.Items, drc.Items...)
		if err != nil {
			errs = append(errs, fmt.Errorf("deployment %s: %w", id, err))
		}
	}
	if l := e.r.ledger(); l != nil {
		recs, err := l.List(ctx, agentenv.Filter{Run: e.id})
		if err != nil {
			errs = append(errs, fmt.Errorf("list records: %w", err))
		}
		for _, rec := range recs {
			for id := range r.span {
				if rec.Role == agentenv.TaskRole(id) && rec.State != agentenv.StateGone && !slices.Contains(records, rec.ID) {
					records = append(records, rec.ID)
				}
			}
		}
	}
	if len(records) > 0 {
		mrc, err := e.r.Manager.TeardownIDs(ctx, records...)
		rc.Items = append(rc.Items, mrc.Items...)
		if err != nil {
			errs = append(errs, err)
		}
	}
	rc.Finished = time.Now().UTC()
	terr := errors.Join(errs...)
	a := agentenv.RunAttempt{Attempt: n, Span: from + ".." + r.step.ID, Step: r.step.ID, ErrorKind: agentenv.StepErrorInfra,
		Started: started, Elapsed: time.Since(started), Receipt: &rc}
	e.log.Info("span retried after an infrastructure error", "span", a.Span, "attempt", n, "err", r.err)
	e.mu.Lock()
	a.Error = e.redact(r.err.Error())
	e.doc.Attempts = append(e.doc.Attempts, a)
	if terr == nil {
		for id := range r.span {
			delete(e.sandboxes, id)
			if _, ok := e.envs[id]; ok {
				delete(e.envs, id)
				e.envOrder = slices.DeleteFunc(e.envOrder, func(x string) bool { return x == id })
			}
			s := e.t.step(id)
			e.states[id] = &stepState{rec: agentenv.StepRecord{ID: id, Type: s.Type, Status: agentenv.StepPending}}
		}
	}
	e.mu.Unlock()
	e.emit(Event{Kind: EventRetry, Time: time.Now(), Run: e.id, Episode: e.num, Episodes: e.total, Step: r.step.ID,
		Status: fmt.Sprintf("span %s attempt %d failed, running it again", a.Span, n), Error: a.Error, Elapsed: a.Elapsed})
	e.save(ctx)
	if terr != nil {
		return withKind(agentenv.StepErrorInfra, fmt.Errorf("step %s: %w; teardown of its span before a retry: %w", r.step.ID, r.err, terr))
	}
	return nil
}
