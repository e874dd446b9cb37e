// Package ledgertest is the conformance suite every agentenv.Ledger passes. An implementation's
// test calls [Run] with a function that opens a new, empty ledger:
//
//	func TestLedger(t *testing.T) {
//		ledgertest.Run(t, func(t *testing.T) agentenv.Ledger {
//			l, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
//			if err != nil {
//				t.Fatal(err)
//			}
//			t.Cleanup(func() { l.Close() })
//			return l
//		})
//	}
//
// The suite checks the contracts written on agentenv.Ledger and agentenv.DocStore, plus what
// every ledger of this module promises beyond them: times round-trip to the microsecond and
// come back in UTC, Put keeps a stored Created when given a zero one, records with the same
// Created list in the order they were first put, an empty id or an undefined state is
// agentenv.ErrInvalid, and so is an Update that changes the id or a RenewLease of the zero owner.
package ledgertest

import (
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/google/go-cmp/cmp"
)

// Run runs the conformance suite as subtests of t, each on a ledger of its own. open returns
// a new, empty ledger and arranges for it to be closed when its t ends; the suite closes some
// ledgers itself, so that second Close must not fail the test.
func Run(t *testing.T, open func(t *testing.T) agentenv.Ledger) {
	tests := []struct {
		name string
		fn   func(t *testing.T, l agentenv.Ledger)
	}{
		{"PutGet", testPutGet},
		{"PutGetZero", testPutGetZero},
		{"PutSetsCreated", testPutSetsCreated},
		{"PutReplaces", testPutReplaces},
		{"PutInvalid", testPutInvalid},
		{"GetNotFound", testGetNotFound},
		{"Insert", testInsert},
		{"InsertConcurrent", testInsertConcurrent},
		{"Update", testUpdate},
		{"UpdateConcurrent", testUpdateConcurrent},
		{"UpdateFnError", testUpdateFnError},
		{"UpdateNotFound", testUpdateNotFound},
		{"UpdateChangesID", testUpdateChangesID},
		{"List", testList},
		{"ListTies", testListTies},
		{"RenewLease", testRenewLease},
		{"Deployments", testDeployments},
		{"Runs", testRuns},
		{"Page", testPage},
		{"DocsInvalid", testDocsInvalid},
		{"Close", testClose},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { tt.fn(t, open(t)) })
	}
}

// microseconds compares times to the microsecond, the precision every ledger keeps.
func microseconds() cmp.Option {
	return cmp.Comparer(sameTime)
}

// sameTime reports whether a and b are the same time to the microsecond.
func sameTime(a, b time.Time) bool {
	return a.Truncate(time.Microsecond).Equal(b.Truncate(time.Microsecond))
}

// zone is a time zone other than UTC, to check that ledgers return times in UTC.
func zone() *time.Location { return time.FixedZone("UTC+05:30", 5*3600+30*60) }

// base is the first time of the fixtures: in the future, with nanoseconds, not in UTC.
func base() time.Time { return time.Date(2031, 2, 3, 4, 5, 6, 123456789, zone()) }

// wantUTC fails t unless every non-zero time in ts is in UTC.
func wantUTC(t *testing.T, what string, ts ...time.Time) {
	t.Helper()
	for _, ts := range ts {
		if !ts.IsZero() && ts.Location() != time.UTC {
			t.Errorf("%s: time %v is in %v, want UTC", what, ts, ts.Location())
		}
	}
}

// recordTimes returns the times of r.
func recordTimes(r agentenv.Record) []time.Time {
	return []time.Time{r.LeaseUntil, r.Expires, r.Created, r.Updated}
}

// mustPut puts r or fails t.
func mustPut(t *testing.T, l agentenv.Ledger, r agentenv.Record) {
	t.Helper()
	if err := l.Put(t.Context(), r); err != nil {
		t.Fatalf("Put(%s) = %v", r.ID, err)
	}
}

// mustGet gets id or fails t.
func mustGet(t *testing.T, l agentenv.Ledger, id string) agentenv.Record {
	t.Helper()
	r, err := l.Get(t.Context(), id)
	if err != nil {
		t.Fatalf("Get(%s) = %v", id, err)
	}
	return r
}

// ids returns the ids of rs, in order.
func ids(rs []agentenv.Record) []string {
	out := []string{}
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}
