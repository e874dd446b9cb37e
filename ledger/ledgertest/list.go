package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/google/go-cmp/cmp"
)

func testList(t *testing.T, l agentenv.Ledger) {
	a := agentenv.Owner{Host: "host-a", PID: 10, Start: 100}
	b := agentenv.Owner{Host: "host-b", PID: 10, Start: 100}
	c := agentenv.Owner{Host: "host-a", PID: 10, Start: 101} // a's pid, reused by a later process
	at := func(i int) time.Time { return base().Add(time.Duration(i) * time.Second) }
	// Put out of Created order, so that List must sort by Created, not by insertion.
	for _, r := range []agentenv.Record{
		{ID: "a", State: agentenv.StateCreating, Run: "r1", Deployment: "d1", Provider: "docker", Owner: a, Created: at(3)},
		{ID: "b", State: agentenv.StateLive, Run: "r1", Deployment: "d2", Provider: "modal", Owner: b, Created: at(1)},
		{ID: "c", State: agentenv.StateGone, Run: "r2", Deployment: "d1", Provider: "docker", Owner: a, Created: at(2)},
		{ID: "d", State: agentenv.StateTerminateFailed, Run: "r2", Provider: "e2b", Created: at(4)},
		{ID: "e", State: agentenv.StateLive, Deployment: "d2", Provider: "docker", Owner: a, Created: at(0)},
		{ID: "f", State: agentenv.StateAbandoned, Run: "r3", Provider: "docker", Owner: c, Created: at(5)},
	} {
		mustPut(t, l, r)
	}
	zero, unknown := agentenv.Owner{}, agentenv.Owner{Host: "nobody", PID: 1, Start: 1}
	tests := []struct {
		name string
		f    agentenv.Filter
		want []string
	}{
		{"all", agentenv.Filter{}, []string{"e", "b", "c", "a", "d", "f"}},
		{"state", agentenv.Filter{States: []agentenv.State{agentenv.StateLive}}, []string{"e", "b"}},
		{"states", agentenv.Filter{States: []agentenv.State{agentenv.StateCreating, agentenv.StateTerminateFailed}}, []string{"a", "d"}},
		{"state none", agentenv.Filter{States: []agentenv.State{agentenv.StateTerminating}}, []string{}},
		{"run", agentenv.Filter{Run: "r1"}, []string{"b", "a"}},
		{"deployment", agentenv.Filter{Deployment: "d1"}, []string{"c", "a"}},
		{"provider", agentenv.Filter{Provider: "docker"}, []string{"e", "c", "a", "f"}},
		{"owner", agentenv.Filter{Owner: &a}, []string{"e", "c", "a"}},
		{"owner other host", agentenv.Filter{Owner: &b}, []string{"b"}},
		{"owner zero", agentenv.Filter{Owner: &zero}, []string{"d"}},
		{"owner unknown", agentenv.Filter{Owner: &unknown}, []string{}},
		{"state and provider", agentenv.Filter{States: []agentenv.State{agentenv.StateLive}, Provider: "docker"}, []string{"e"}},
		{"run and owner", agentenv.Filter{Run: "r2", Owner: &a}, []string{"c"}},
		{"all fields", agentenv.Filter{States: []agentenv.State{agentenv.StateCreating, agentenv.StateGone}, Run: "r1", Deployment: "d1", Provider: "docker", Owner: &a}, []string{"a"}},
	}
	for _, tt := range tests {
		rs, err := l.List(t.Context(), tt.f)
		if err != nil {
			t.Errorf("List(%s) = %v", tt.name, err)
			continue
		}
		if diff := cmp.Diff(tt.want, ids(rs)); diff != "" {
			t.Errorf("List(%s) ids (-want +got):\n%s", tt.name, diff)
		}
	}
	rs, err := l.List(t.Context(), agentenv.Filter{Run: "r1"})
	if err != nil || len(rs) != 2 {
		t.Fatalf("List(run r1) = %d records, %v; want 2", len(rs), err)
	}
	if got := mustGet(t, l, "b"); !cmp.Equal(got, rs[0], microseconds()) {
		t.Errorf("List(run r1)[0] = %+v, want what Get returns: %+v", rs[0], got)
	}
}

func testListTies(t *testing.T, l agentenv.Ledger) {
	same := base()
	for _, id := range []string{"z", "x", "y"} {
		mustPut(t, l, agentenv.Record{ID: id, State: agentenv.StateLive, Created: same})
	}
	// Replacing a record keeps its place.
	mustPut(t, l, agentenv.Record{ID: "z", State: agentenv.StateGone, Created: same})
	rs, err := l.List(t.Context(), agentenv.Filter{})
	if err != nil {
		t.Fatalf("List() = %v", err)
	}
	if diff := cmp.Diff([]string{"z", "x", "y"}, ids(rs)); diff != "" {
		t.Errorf("List() of records with the same Created, want the order of the first Put (-want +got):\n%s", diff)
	}
}

func testRenewLease(t *testing.T, l agentenv.Ledger) {
	a := agentenv.Owner{Host: "host-a", PID: 10, Start: 100}
	b := agentenv.Owner{Host: "host-b", PID: 10, Start: 100}
	reused := agentenv.Owner{Host: "host-a", PID: 10, Start: 200}
	old := base()
	recs := []agentenv.Record{
		{ID: "a-live", State: agentenv.StateLive, Owner: a, LeaseUntil: old},
		{ID: "a-creating", State: agentenv.StateCreating, Owner: a},
		{ID: "a-failed", State: agentenv.StateTerminateFailed, Owner: a, LeaseUntil: old},
		{ID: "a-gone", State: agentenv.StateGone, Owner: a, LeaseUntil: old},
		{ID: "b-live", State: agentenv.StateLive, Owner: b, LeaseUntil: old},
		{ID: "reused-live", State: agentenv.StateLive, Owner: reused, LeaseUntil: old},
		{ID: "nobody-live", State: agentenv.StateLive, LeaseUntil: old},
	}
	before := map[string]agentenv.Record{}
	for _, r := range recs {
		mustPut(t, l, r)
		before[r.ID] = mustGet(t, l, r.ID)
	}
	until := old.Add(90*time.Second + 7*time.Microsecond)
	n, err := l.RenewLease(t.Context(), a, until)
	if err != nil || n != 3 {
		t.Errorf("RenewLease(%s) = %d, %v; want 3, nil", a, n, err)
	}
	for _, r := range recs {
		got := mustGet(t, l, r.ID)
		want := before[r.ID]
		if r.Owner == a && r.State != agentenv.StateGone {
			want.LeaseUntil = until
		}
		// Whether a renewal touches Updated is the ledger's choice.
		if diff := cmp.Diff(want, got, microseconds(), cmp.FilterPath(isUpdated, cmp.Ignore())); diff != "" {
			t.Errorf("Get(%s) after RenewLease (-want +got):\n%s", r.ID, diff)
		}
		wantUTC(t, "Get after RenewLease", got.LeaseUntil)
	}
	if n, err := l.RenewLease(t.Context(), agentenv.Owner{Host: "nobody", PID: 1, Start: 1}, until); err != nil || n != 0 {
		t.Errorf("RenewLease(unknown owner) = %d, %v; want 0, nil", n, err)
	}
	if _, err := l.RenewLease(t.Context(), agentenv.Owner{}, until); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("RenewLease(zero owner) = %v, want ErrInvalid", err)
	}
	if got := mustGet(t, l, "nobody-live"); !sameTime(got.LeaseUntil, old) {
		t.Errorf("RenewLease(zero owner) renewed an unowned record: lease %v, want %v", got.LeaseUntil, old)
	}
}

// isUpdated reports whether p is Record.Updated.
func isUpdated(p cmp.Path) bool {
	sf, ok := p.Last().(cmp.StructField)
	return ok && sf.Name() == "Updated"
}
