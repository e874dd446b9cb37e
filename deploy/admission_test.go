package deploy

import (
	"context"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
	"github.com/agentenv/agentenv/spec"
)

// A deploy that waits in the admission queue longer than its whole budget still deploys: the
// budget counts from admission. Its wait is in the result and in the progress events.
func TestDeployBudgetCountsFromAdmission(t *testing.T) {
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	fp := fake.New("fake")
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"fake": fp}, MaxParallelCreates: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mgr.Close)
	d := New(mgr, nil)
	d.ready = func(*stack, context.Context, spec.Component, string) error { return nil }
	env, err := spec.Load(filepath.Join("..", "examples", "notes", "env.yaml"))
	if err != nil {
		t.Fatal(err)
	}

	_, release, _, err := mgr.Admit(t.Context(), "fake") // another deploy holds the only slot
	if err != nil {
		t.Fatal(err)
	}
	const budget = 2 * time.Second
	var mu sync.Mutex // progress comes from every component's goroutine
	var events []Event
	done := make(chan error, 1)
	var res *Result
	go func() {
		var err error
		res, err = d.Deploy(t.Context(), env, Options{Provider: "fake", Budget: budget, Own: true,
			Progress: func(e Event) { mu.Lock(); events = append(events, e); mu.Unlock() }})
		done <- err
	}()
	deadline := time.Now().Add(10 * time.Second)
	for mgr.Queue("fake").Waiting != 1 {
		if time.Now().After(deadline) {
			t.Fatal("the deploy never queued")
		}
		time.Sleep(time.Millisecond)
	}
	time.Sleep(budget + budget/4) // queued past the budget
	if n := len(fp.Live()); n != 0 {
		t.Fatalf("a queued deploy created %d sandboxes", n)
	}
	release()
	if err := <-done; err != nil {
		t.Fatalf("a deploy queued past its budget failed: %v", err)
	}
	if res.Queued < budget {
		t.Errorf("queued = %s, want at least %s", res.Queued, budget)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(events) == 0 || events[0].Component != "admission" || events[0].Phase != "admitted" || events[0].Elapsed != res.Queued {
		t.Errorf("first event = %+v, want the admission with the wait", events[0])
	}
	if _, err := d.Teardown(t.Context(), res.Doc.ID); err != nil {
		t.Fatal(err)
	}
	if n := len(fp.Live()); n != 0 {
		t.Errorf("teardown left %d sandboxes", n)
	}
}
