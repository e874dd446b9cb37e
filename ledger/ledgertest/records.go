package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/google/go-cmp/cmp"
)

// fullRecord returns a record with every field set.
func fullRecord(id string) agentenv.Record {
	b := base()
	return agentenv.Record{
		ID:         id,
		Kind:       agentenv.KindVM,
		Provider:   "modal_vm",
		SandboxID:  "sb-" + id,
		Image:      "agentenv/hello:1",
		Run:        "run-1",
		Deployment: "dep-1",
		Role:       "mcp_server:notes",
		State:      agentenv.StateTerminateFailed,
		Owner:      agentenv.Owner{Host: "host-a.example", PID: 4242, Start: 987654321012},
		LeaseUntil: b.Add(time.Minute),
		Expires:    b.Add(time.Hour),
		Error:      "terminate: boom\nsecond line, ünïcode, 'quotes' \"too\"",
		Labels:     map[string]string{agentenv.LabelRecord: id, "team": "infra", "empty": ""},
		Attrs:      map[string]string{"endpoint.8080": "127.0.0.1:49153"},
		Created:    b,
	}
}

func testPutGet(t *testing.T, l agentenv.Ledger) {
	want := fullRecord("rec-full")
	before := time.Now()
	mustPut(t, l, want)
	after := time.Now()
	got := mustGet(t, l, want.ID)
	wantUTC(t, "Get", recordTimes(got)...)
	if got.Updated.Before(before.Truncate(time.Microsecond)) || got.Updated.After(after) {
		t.Errorf("Get(%s).Updated = %v, want the time of the Put, between %v and %v", want.ID, got.Updated, before, after)
	}
	want.Updated = got.Updated
	if diff := cmp.Diff(want, got, microseconds()); diff != "" {
		t.Errorf("Get(%s) after Put differs (-put +got):\n%s", want.ID, diff)
	}
}

func testPutGetZero(t *testing.T, l agentenv.Ledger) {
	want := agentenv.Record{ID: "rec-zero", State: agentenv.StateCreating, Created: base()}
	mustPut(t, l, want)
	got := mustGet(t, l, want.ID)
	want.Updated = got.Updated
	if diff := cmp.Diff(want, got, microseconds()); diff != "" {
		t.Errorf("Get(%s) of a record with zero fields differs (-put +got):\n%s", want.ID, diff)
	}
	if !got.Owner.IsZero() || !got.LeaseUntil.IsZero() || !got.Expires.IsZero() {
		t.Errorf("Get(%s) = owner %v, lease %v, expires %v; want zero values", want.ID, got.Owner, got.LeaseUntil, got.Expires)
	}
}

func testPutSetsCreated(t *testing.T, l agentenv.Ledger) {
	before := time.Now().Truncate(time.Microsecond)
	mustPut(t, l, agentenv.Record{ID: "rec-new", State: agentenv.StateCreating})
	after := time.Now()
	got := mustGet(t, l, "rec-new")
	wantUTC(t, "Get", recordTimes(got)...)
	if got.Created.Before(before) || got.Created.After(after) {
		t.Errorf("Created = %v, want the time of the Put, between %v and %v", got.Created, before, after)
	}
	if got.Updated.Before(got.Created) || got.Updated.After(after) {
		t.Errorf("Updated = %v, want between Created %v and %v", got.Updated, got.Created, after)
	}
}

func testPutReplaces(t *testing.T, l agentenv.Ledger) {
	first := fullRecord("rec-replace")
	mustPut(t, l, first)
	old := mustGet(t, l, first.ID)

	second := agentenv.Record{ID: first.ID, Kind: agentenv.KindSandbox, Provider: "docker", State: agentenv.StateGone,
		Labels: map[string]string{"other": "x"}}
	mustPut(t, l, second)
	got := mustGet(t, l, first.ID)
	want := second
	want.Created, want.Updated = old.Created, got.Updated // Created is kept when the Put gives none
	if diff := cmp.Diff(want, got, microseconds()); diff != "" {
		t.Errorf("Get(%s) after a second Put differs (-want +got):\n%s", first.ID, diff)
	}
	if got.Updated.Before(old.Updated) {
		t.Errorf("Updated went back from %v to %v", old.Updated, got.Updated)
	}

	third := second
	third.Created = base().Add(-time.Hour)
	mustPut(t, l, third)
	if got := mustGet(t, l, first.ID); !sameTime(got.Created, third.Created) {
		t.Errorf("Created = %v after a Put that sets it, want %v", got.Created, third.Created)
	}
	if rs, err := l.List(t.Context(), agentenv.Filter{}); err != nil || len(rs) != 1 {
		t.Errorf("List() = %d records, %v; want the one record", len(rs), err)
	}
}

func testPutInvalid(t *testing.T, l agentenv.Ledger) {
	for _, r := range []agentenv.Record{
		{ID: "", State: agentenv.StateCreating},
		{ID: "rec-no-state"},
		{ID: "rec-bad-state", State: "running"},
	} {
		if err := l.Put(t.Context(), r); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("Put(id %q, state %q) = %v, want ErrInvalid", r.ID, r.State, err)
		}
	}
	if rs, err := l.List(t.Context(), agentenv.Filter{}); err != nil || len(rs) != 0 {
		t.Errorf("List() after invalid Puts = %v, %v; want none", ids(rs), err)
	}
}

func testGetNotFound(t *testing.T, l agentenv.Ledger) {
	mustPut(t, l, agentenv.Record{ID: "rec-present", State: agentenv.StateLive})
	if _, err := l.Get(t.Context(), "rec-absent"); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Get(rec-absent) = %v, want ErrNotFound", err)
	}
}
