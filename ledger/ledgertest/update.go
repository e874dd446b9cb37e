package ledgertest

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/google/go-cmp/cmp"
)

func testUpdate(t *testing.T, l agentenv.Ledger) {
	mustPut(t, l, fullRecord("rec-update"))
	old := mustGet(t, l, "rec-update")
	lease := time.Date(2032, 1, 1, 0, 0, 0, 1000, zone())

	got, err := l.Update(t.Context(), "rec-update", func(r *agentenv.Record) error {
		r.State = agentenv.StateLive
		r.SandboxID = "sb-new"
		r.LeaseUntil = lease
		r.Attrs["phase"] = "two"
		return nil
	})
	if err != nil {
		t.Fatalf("Update(rec-update) = %v", err)
	}
	wantUTC(t, "Update", recordTimes(got)...)
	stored := mustGet(t, l, "rec-update")
	if diff := cmp.Diff(stored, got, microseconds()); diff != "" {
		t.Errorf("Update returned a record that differs from Get (-get +update):\n%s", diff)
	}
	want := old
	want.State, want.SandboxID, want.LeaseUntil = agentenv.StateLive, "sb-new", lease
	want.Attrs = map[string]string{"endpoint.8080": "127.0.0.1:49153", "phase": "two"}
	want.Updated = stored.Updated
	if diff := cmp.Diff(want, stored, microseconds()); diff != "" {
		t.Errorf("Get after Update differs (-want +got):\n%s", diff)
	}
	if stored.Updated.Before(old.Updated) {
		t.Errorf("Updated went back from %v to %v", old.Updated, stored.Updated)
	}
}

// testUpdateConcurrent checks that no update is lost: goroutines x increments updates of one
// counter must leave it at their product, and each must have seen a distinct value.
func testUpdateConcurrent(t *testing.T, l agentenv.Ledger) {
	const goroutines, increments = 16, 20
	mustPut(t, l, agentenv.Record{ID: "rec-counter", State: agentenv.StateLive})
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seen []int
		errs []error
	)
	for g := range goroutines {
		wg.Go(func() {
			for range increments {
				r, err := l.Update(t.Context(), "rec-counter", func(r *agentenv.Record) error {
					n, err := strconv.Atoi(r.Attrs["n"])
					if err != nil && r.Attrs["n"] != "" {
						return err
					}
					if r.Attrs == nil {
						r.Attrs = map[string]string{}
					}
					r.Attrs["n"] = strconv.Itoa(n + 1)
					r.Attrs[fmt.Sprintf("g%d", g)] = "x"
					return nil
				})
				n, aerr := strconv.Atoi(r.Attrs["n"])
				mu.Lock()
				if err != nil {
					errs = append(errs, err)
				} else if aerr != nil {
					errs = append(errs, fmt.Errorf("update returned counter %q: %w", r.Attrs["n"], aerr))
				} else {
					seen = append(seen, n)
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	for _, err := range errs[:min(len(errs), 5)] {
		t.Errorf("Update(rec-counter) = %v", err)
	}
	got := mustGet(t, l, "rec-counter")
	if want := strconv.Itoa(goroutines * increments); got.Attrs["n"] != want {
		t.Errorf("counter = %s after %d concurrent increments, want %s (lost updates)", got.Attrs["n"], goroutines*increments, want)
	}
	slices.Sort(seen)
	if len(errs) == 0 {
		for i, n := range seen {
			if n != i+1 {
				t.Errorf("Update returned counters %v..., want each of 1..%d once", seen[:i+1], goroutines*increments)
				break
			}
		}
	}
	if len(got.Attrs) != goroutines+1 {
		t.Errorf("Attrs has %d keys, want %d (the counter and one per goroutine)", len(got.Attrs), goroutines+1)
	}
}

func testUpdateFnError(t *testing.T, l agentenv.Ledger) {
	mustPut(t, l, fullRecord("rec-fn-error"))
	before := mustGet(t, l, "rec-fn-error")
	errBoom := errors.New("boom")
	_, err := l.Update(t.Context(), "rec-fn-error", func(r *agentenv.Record) error {
		r.State = agentenv.StateGone
		r.Attrs["written"] = "yes"
		r.Labels = nil
		return errBoom
	})
	if !errors.Is(err, errBoom) {
		t.Errorf("Update with a failing fn = %v, want %v", err, errBoom)
	}
	after := mustGet(t, l, "rec-fn-error")
	if diff := cmp.Diff(before, after); diff != "" {
		t.Errorf("Update with a failing fn wrote (-before +after):\n%s", diff)
	}
}

func testUpdateNotFound(t *testing.T, l agentenv.Ledger) {
	called := false
	_, err := l.Update(t.Context(), "rec-absent", func(r *agentenv.Record) error {
		called = true
		return nil
	})
	if !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Update(rec-absent) = %v, want ErrNotFound", err)
	}
	if called {
		t.Errorf("Update(rec-absent) called fn")
	}
	if _, err := l.Get(t.Context(), "rec-absent"); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Get(rec-absent) after Update = %v, want ErrNotFound", err)
	}
}

func testUpdateChangesID(t *testing.T, l agentenv.Ledger) {
	mustPut(t, l, fullRecord("rec-id"))
	before := mustGet(t, l, "rec-id")
	_, err := l.Update(t.Context(), "rec-id", func(r *agentenv.Record) error {
		r.ID = "rec-other"
		r.State = agentenv.StateGone
		return nil
	})
	if !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Update that changes the id = %v, want ErrInvalid", err)
	}
	_, err = l.Update(t.Context(), "rec-id", func(r *agentenv.Record) error {
		r.State = "bogus"
		return nil
	})
	if !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Update that sets state %q = %v, want ErrInvalid", "bogus", err)
	}
	if diff := cmp.Diff(before, mustGet(t, l, "rec-id")); diff != "" {
		t.Errorf("invalid Updates wrote (-before +after):\n%s", diff)
	}
	if _, err := l.Get(t.Context(), "rec-other"); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Get(rec-other) = %v, want ErrNotFound", err)
	}
}
