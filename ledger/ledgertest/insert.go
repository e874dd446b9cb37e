package ledgertest

import (
	"errors"
	"sync"
	"testing"

	"github.com/agentenv/agentenv"
)

// testInsert checks that Insert writes an absent record, refuses a taken id with ErrConflict
// and leaves the record that holds it as it was.
func testInsert(t *testing.T, l agentenv.Ledger) {
	first := agentenv.Record{ID: "rec-claim", State: agentenv.StateCreating, Deployment: "dep-a"}
	if err := l.Insert(t.Context(), first); err != nil {
		t.Fatalf("Insert(absent) = %v", err)
	}
	got, err := l.Get(t.Context(), first.ID)
	if err != nil || got.Deployment != "dep-a" || got.Created.IsZero() || got.Updated.IsZero() {
		t.Fatalf("Get after Insert = %+v, %v; want dep-a with Created and Updated set", got, err)
	}
	err = l.Insert(t.Context(), agentenv.Record{ID: first.ID, State: agentenv.StateLive, Deployment: "dep-b"})
	if !errors.Is(err, agentenv.ErrConflict) {
		t.Fatalf("Insert(taken) = %v, want ErrConflict", err)
	}
	if got, _ := l.Get(t.Context(), first.ID); got.Deployment != "dep-a" || got.State != agentenv.StateCreating {
		t.Errorf("a refused Insert changed the record: %+v", got)
	}
	if err := l.Insert(t.Context(), agentenv.Record{}); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Insert(no id) = %v, want ErrInvalid", err)
	}
}

// testInsertConcurrent races inserts of one id: exactly one wins, every other gets ErrConflict.
func testInsertConcurrent(t *testing.T, l agentenv.Ledger) {
	const n = 16
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			errs[i] = l.Insert(t.Context(), agentenv.Record{ID: "rec-race", State: agentenv.StateCreating, Attrs: map[string]string{"by": string(rune('a' + i))}})
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, agentenv.ErrConflict):
			t.Errorf("Insert = %v, want nil or ErrConflict", err)
		}
	}
	if won != 1 {
		t.Errorf("%d of %d concurrent inserts of one id won, want exactly 1", won, n)
	}
}
