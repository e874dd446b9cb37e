package task

import (
	"context"
	"errors"
	"fmt"
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
	rc, err := e.r.teardownRun(ctx, e.id, e.trackedDeployments())
	a := agentenv.RunAttempt{Attempt: n, Step: e.failedStep(), ErrorKind: agentenv.StepErrorInfra,
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
