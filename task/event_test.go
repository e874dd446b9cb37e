package task

import (
	"testing"
	"time"
)

func TestEventStringSaysTheQueueWait(t *testing.T) {
	ev := Event{Kind: EventStep, Run: "run-1", Episode: 2, Episodes: 4, Step: "env", Type: TypeDeployEnv,
		Status: "passed", Elapsed: 3 * time.Second, Queued: 1200 * time.Millisecond}
	if got, want := ev.String(), "[2/4] run-1 env (deploy_env) passed 3s (queued 1.2s)"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	ev.Queued = 0
	if got, want := ev.String(), "[2/4] run-1 env (deploy_env) passed 3s"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
}
