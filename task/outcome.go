package task

import (
	"slices"

	"github.com/agentenv/agentenv"
)

// Outcome is how an episode ended: the one word for it that `agentenv run`, `runs get`, the
// explorer and the exports all say, decided by the runner when the episode ends and read back
// from its run document by [OutcomeOf].
type Outcome string

// Episode outcomes. An episode passed when no fatal step failed, its teardown was clean and its
// score is 1; scored below 1 when its score is less (0 included: a verifier that failed);
// unscored when the task has no verifier. Failed is a fatal step's failure, the agent's (part
// of the score); error is the infrastructure's, after the episode's retries, and like
// cancelled it is no sample: neither counts in the mean score or in pass@k. Running has not
// ended yet.
const (
	OutcomePassed      Outcome = "passed"
	OutcomeScoredBelow Outcome = "scored below 1"
	OutcomeUnscored    Outcome = "unscored"
	OutcomeFailed      Outcome = "failed"
	OutcomeError       Outcome = "error"
	OutcomeCancelled   Outcome = "cancelled"
	OutcomeRunning     Outcome = "running"
)

// Outcomes returns every outcome, in the order summaries and pages show them.
func Outcomes() []Outcome {
	return []Outcome{OutcomePassed, OutcomeScoredBelow, OutcomeUnscored, OutcomeFailed, OutcomeError, OutcomeCancelled, OutcomeRunning}
}

// Finished reports whether an episode with outcome o is a sample: it ran to an end the agent
// is answerable for (passed, scored below 1, unscored or failed), not error, cancelled or
// running.
func (o Outcome) Finished() bool {
	switch o {
	case OutcomePassed, OutcomeScoredBelow, OutcomeUnscored, OutcomeFailed:
		return true
	}
	return false
}

// Status is the run status of an episode with outcome o.
func (o Outcome) Status() agentenv.RunStatus {
	switch o {
	case OutcomeFailed:
		return agentenv.RunFailed
	case OutcomeError:
		return agentenv.RunError
	case OutcomeCancelled:
		return agentenv.RunCancelled
	case OutcomeRunning:
		return agentenv.RunRunning
	}
	return agentenv.RunCompleted
}

// outcomeAttr is the run document attribute that holds the outcome the runner decided.
const outcomeAttr = "outcome"

// OutcomeOf is the outcome of the episode whose run document is r: the one its runner decided
// and wrote with the run's end, or, for a document without one (still running, or settled by
// gc), what its status and score say.
func OutcomeOf(r agentenv.Run) Outcome {
	if o := Outcome(r.Attrs[outcomeAttr]); slices.Contains(Outcomes(), o) && o.Status() == r.Status {
		return o
	}
	switch r.Status {
	case agentenv.RunRunning:
		return OutcomeRunning
	case agentenv.RunFailed:
		return OutcomeFailed
	case agentenv.RunError:
		return OutcomeError
	case agentenv.RunCompleted:
		switch {
		case r.Score == nil:
			return OutcomeUnscored
		case *r.Score >= 1:
			return OutcomePassed
		}
		return OutcomeScoredBelow
	}
	return OutcomeCancelled
}

// SetOutcome records o in run document r, with the status it implies.
func SetOutcome(r *agentenv.Run, o Outcome) {
	if r.Attrs == nil {
		r.Attrs = map[string]string{}
	}
	r.Attrs[outcomeAttr] = string(o)
	r.Status = o.Status()
}
