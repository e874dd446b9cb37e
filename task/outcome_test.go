package task_test

import (
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

func TestOutcomeOf(t *testing.T) {
	one, half, zero := 1.0, 0.5, 0.0
	for _, c := range []struct {
		name string
		run  agentenv.Run
		want task.Outcome
	}{
		{"decided by the runner", agentenv.Run{Status: agentenv.RunFailed, Attrs: map[string]string{"outcome": "failed"}}, task.OutcomeFailed},
		{"a decision its status contradicts", agentenv.Run{Status: agentenv.RunCancelled, Attrs: map[string]string{"outcome": "passed"}, Score: &one}, task.OutcomeCancelled},
		{"an unknown word", agentenv.Run{Status: agentenv.RunCompleted, Attrs: map[string]string{"outcome": "fine"}, Score: &one}, task.OutcomePassed},
		{"running", agentenv.Run{Status: agentenv.RunRunning}, task.OutcomeRunning},
		{"completed with 1", agentenv.Run{Status: agentenv.RunCompleted, Score: &one}, task.OutcomePassed},
		{"completed with 0.5", agentenv.Run{Status: agentenv.RunCompleted, Score: &half}, task.OutcomeScoredBelow},
		{"completed with 0", agentenv.Run{Status: agentenv.RunCompleted, Score: &zero}, task.OutcomeScoredBelow},
		{"completed without verifiers", agentenv.Run{Status: agentenv.RunCompleted}, task.OutcomeUnscored},
		{"a fatal step failed", agentenv.Run{Status: agentenv.RunFailed, Score: &zero}, task.OutcomeFailed},
		{"the infrastructure failed", agentenv.Run{Status: agentenv.RunError}, task.OutcomeError},
		{"cancelled", agentenv.Run{Status: agentenv.RunCancelled}, task.OutcomeCancelled},
	} {
		if got := task.OutcomeOf(c.run); got != c.want {
			t.Errorf("%s: OutcomeOf = %q, want %q", c.name, got, c.want)
		}
	}
	// SetOutcome and OutcomeOf agree on every outcome.
	for _, o := range task.Outcomes() {
		var r agentenv.Run
		task.SetOutcome(&r, o)
		if got := task.OutcomeOf(r); got != o {
			t.Errorf("SetOutcome(%q) then OutcomeOf = %q", o, got)
		}
	}
}
