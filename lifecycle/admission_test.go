package lifecycle_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
)

// admissionRig is a manager over the fake provider with cfg's admission settings.
func admissionRig(t *testing.T, cfg lifecycle.Config) (*lifecycle.Manager, agentenv.Ledger, *fake.Provider) {
	t.Helper()
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	fp := fake.New("fake")
	cfg.Ledger, cfg.Providers = led, map[string]agentenv.Provider{"fake": fp}
	m, err := lifecycle.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close)
	return m, led, fp
}

// admit is one Admit call run in the background.
type admit struct {
	ctx     context.Context
	release func()
	err     error
	done    chan struct{}
}

func startAdmit(ctx context.Context, m *lifecycle.Manager) *admit {
	a := &admit{done: make(chan struct{})}
	go func() {
		defer close(a.done)
		a.ctx, a.release, _, a.err = m.Admit(ctx, "fake")
	}()
	return a
}

// waitQueued waits (bounded) until n callers are queued on the fake provider.
func waitQueued(t *testing.T, m *lifecycle.Manager, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for m.Queue("fake").Waiting != n {
		if time.Now().After(deadline) {
			t.Fatalf("queued = %d, want %d", m.Queue("fake").Waiting, n)
		}
		time.Sleep(time.Millisecond)
	}
}

func isDone(a *admit) bool {
	select {
	case <-a.done:
		return true
	default:
		return false
	}
}

func TestAdmitFirstComeFirstServed(t *testing.T) {
	m, _, _ := admissionRig(t, lifecycle.Config{MaxParallelCreates: 2})
	ctx := t.Context()
	var held []func()
	for range 2 {
		_, release, a, err := m.Admit(ctx, "fake")
		if err != nil {
			t.Fatal(err)
		}
		if a.Slots != 2 {
			t.Errorf("slots = %d, want 2", a.Slots)
		}
		held = append(held, release)
	}
	first := startAdmit(ctx, m)
	waitQueued(t, m, 1)
	second := startAdmit(ctx, m)
	waitQueued(t, m, 2)
	if isDone(first) || isDone(second) {
		t.Fatal("admitted past the limit")
	}
	held[0]()
	<-first.done
	if first.err != nil {
		t.Fatal(first.err)
	}
	if isDone(second) {
		t.Fatal("the second in the queue went before the limit allowed")
	}
	held[0]() // a release is idempotent: a second call frees nothing more
	if m.Queue("fake").Waiting != 1 {
		t.Fatalf("queued = %d after a repeated release, want 1", m.Queue("fake").Waiting)
	}
	first.release()
	<-second.done
	if second.err != nil {
		t.Fatal(second.err)
	}
	second.release()
	held[1]()
}

func TestAdmitCancelledWaiterLeavesTheQueue(t *testing.T) {
	m, _, _ := admissionRig(t, lifecycle.Config{MaxParallelCreates: 1})
	_, release, _, err := m.Admit(t.Context(), "fake")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	gone := startAdmit(ctx, m)
	waitQueued(t, m, 1)
	next := startAdmit(t.Context(), m)
	waitQueued(t, m, 2)
	cancel()
	<-gone.done // at once: the waiter does not wait for a slot to leave
	if !errors.Is(gone.err, context.Canceled) {
		t.Fatalf("cancelled Admit = %v, want context.Canceled", gone.err)
	}
	waitQueued(t, m, 1)
	release()
	<-next.done // the slot goes to the next in line, not to the one that left
	if next.err != nil {
		t.Fatal(next.err)
	}
	next.release()
	if q := m.Queue("fake"); q.Waiting != 0 {
		t.Errorf("queue = %+v, want empty", q)
	}
}

func TestAdmitWaitIsBounded(t *testing.T) {
	m, _, _ := admissionRig(t, lifecycle.Config{MaxParallelCreates: 1, AdmitWait: 50 * time.Millisecond})
	_, release, _, err := m.Admit(t.Context(), "fake")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	_, _, _, err = m.Admit(t.Context(), "fake")
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Admit past admit_wait = %v, want DeadlineExceeded", err)
	}
	if q := m.Queue("fake"); q.Waiting != 0 {
		t.Errorf("queue = %+v after a timed-out wait, want empty", q)
	}
}

// A holder of a slot never waits for another: a deploy's creates run on its slot.
func TestAdmitHolderNeverWaitsAgain(t *testing.T) {
	m, _, fp := admissionRig(t, lifecycle.Config{MaxParallelCreates: 1})
	hctx, release, _, err := m.Admit(t.Context(), "fake")
	if err != nil {
		t.Fatal(err)
	}
	defer release()
	if !lifecycle.Holds(hctx) {
		t.Fatal("Admit's context does not say it holds a slot")
	}
	ctx, cancel := context.WithTimeout(hctx, 10*time.Second)
	defer cancel()
	if _, _, _, err := m.Admit(ctx, "fake"); err != nil {
		t.Fatalf("a holder waited for a second slot: %v", err)
	}
	if _, _, err := m.Create(ctx, lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "img"}}); err != nil {
		t.Fatalf("a create on a held slot: %v", err)
	}
	if n := len(fp.Live()); n != 1 {
		t.Errorf("live = %d, want 1", n)
	}
}

// A create outside a slot queues before its record is written, so a caller that gives up in
// the queue leaves nothing, not even history.
func TestCreateQueuesBeforeItsRecord(t *testing.T) {
	m, led, fp := admissionRig(t, lifecycle.Config{MaxParallelCreates: 1})
	_, release, _, err := m.Admit(t.Context(), "fake")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, _, err := m.Create(ctx, lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "img"}})
		done <- err
	}()
	waitQueued(t, m, 1)
	if recs, _ := led.List(t.Context(), agentenv.Filter{}); len(recs) != 0 {
		t.Errorf("a queued create wrote %d records", len(recs))
	}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled create = %v, want context.Canceled", err)
	}
	release()
	recs, _ := led.List(t.Context(), agentenv.Filter{})
	if len(recs) != 0 || len(fp.Live()) != 0 {
		t.Errorf("a create cancelled in the queue left %d records, %d sandboxes", len(recs), len(fp.Live()))
	}
	// Once the slot is free, creates go through and hand it back.
	for range 3 {
		if _, _, err := m.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "img"}}); err != nil {
			t.Fatal(err)
		}
	}
}

func TestAdmissionSizedFromCapacity(t *testing.T) {
	calls := 0
	m, _, _ := admissionRig(t, lifecycle.Config{Capacity: map[string]lifecycle.CapacityFunc{
		"fake": func(context.Context) (lifecycle.Capacity, error) {
			calls++
			return lifecycle.Capacity{CPUs: 2, Memory: 23 << 30}, nil
		},
	}})
	for range 2 {
		_, release, a, err := m.Admit(t.Context(), "fake")
		if err != nil {
			t.Fatal(err)
		}
		release()
		if a.Slots != 4 {
			t.Errorf("slots = %d, want 4 (2 per CPU)", a.Slots)
		}
	}
	if calls != 1 {
		t.Errorf("capacity asked %d times, want once", calls)
	}
	// Without a limit or a capacity, nothing queues.
	free, _, _ := admissionRig(t, lifecycle.Config{})
	if _, _, a, err := free.Admit(t.Context(), "fake"); err != nil || a.Slots != 0 {
		t.Errorf("unlimited Admit = %+v, %v; want no slots, no error", a, err)
	}
	if _, _, _, err := free.Admit(t.Context(), "nosuch"); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Admit to an unknown provider = %v, want ErrInvalid", err)
	}
}

func TestCapacitySlots(t *testing.T) {
	for _, tc := range []struct {
		c    lifecycle.Capacity
		want int
	}{
		{lifecycle.Capacity{}, 0},
		{lifecycle.Capacity{CPUs: 2, Memory: 23 << 30}, 4},
		{lifecycle.Capacity{CPUs: 16, Memory: 2 << 30}, 4}, // memory-bound
		{lifecycle.Capacity{CPUs: 8}, 16},
		{lifecycle.Capacity{Memory: 1 << 30}, 2},
		{lifecycle.Capacity{CPUs: 1, Memory: 100 << 20}, 1}, // never below one
	} {
		if got := tc.c.Slots(); got != tc.want {
			t.Errorf("%+v.Slots() = %d, want %d", tc.c, got, tc.want)
		}
	}
}
