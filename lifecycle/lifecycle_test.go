package lifecycle_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/fault"
	"github.com/agentenv/agentenv/lifecycle"
)

func hostname(t *testing.T) string {
	t.Helper()
	h, err := os.Hostname()
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func hostnameOrEmpty() string { h, _ := os.Hostname(); return h }

func TestCreateRecordsIntentBeforeProvider(t *testing.T) {
	r := newRig(t)
	rec, sb, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Run: "run-1", Spec: agentenv.SandboxSpec{Image: "img"}})
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != agentenv.StateLive || rec.SandboxID != sb.ID {
		t.Errorf("record = %s/%q, want live/%q", rec.State, rec.SandboxID, sb.ID)
	}
	for _, k := range []string{agentenv.LabelRecord, agentenv.LabelRun, agentenv.LabelDeployment, agentenv.LabelOwner, agentenv.LabelExpires} {
		if _, ok := sb.Labels[k]; !ok {
			t.Errorf("sandbox lacks label %s: %v", k, sb.Labels)
		}
	}
	if sb.Labels[agentenv.LabelRecord] != rec.ID {
		t.Errorf("record label %q, want %q", sb.Labels[agentenv.LabelRecord], rec.ID)
	}
}

func TestLostResponseIsReclaimedByLabel(t *testing.T) {
	r := newRig(t)
	r.fp.Plan = fault.NewPlan(fault.Rule{Op: "create", Call: 1, Action: fault.Lost})
	rec, _, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "img"}})
	if !errors.Is(err, fault.ErrInjected) {
		t.Fatalf("Create error = %v, want the injected one", err)
	}
	if live := r.fake.Live(); len(live) != 0 {
		t.Errorf("a create whose response was lost left %v", live)
	}
	got, err := r.led.Get(t.Context(), rec.ID)
	if err != nil || got.State != agentenv.StateGone {
		t.Errorf("record = %v, %v; want gone", got.State, err)
	}
}

func TestCancelledCreateFinishesAndIsUndone(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithCancel(t.Context())
	r.fp.Plan = fault.NewPlan(fault.Rule{Op: "create", Call: 1, Action: fault.Cancel, Cancel: cancel})
	_, _, err := r.mgr.Create(ctx, lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "img"}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Create error = %v, want context.Canceled", err)
	}
	if live := r.fake.Live(); len(live) != 0 {
		t.Errorf("cancelled create left %v", live)
	}
	r.assertClean(t, "after a cancelled create")
}

func TestHungCreateIsAbandonedThenReclaimedWhenItEnds(t *testing.T) {
	r := newRig(t)
	ctx, cancel := context.WithCancel(t.Context())
	// Create hangs past ReclaimWait; it ends at CreateTimeout, and its sandbox (made by a later
	// call that succeeds) must not survive.
	r.fp.Plan = fault.NewPlan(fault.Rule{Op: "create", Call: 1, Action: fault.Hang})
	go func() { time.Sleep(20 * time.Millisecond); cancel() }()
	rec, _, err := r.mgr.Create(ctx, lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "img"}})
	if err == nil {
		t.Fatal("Create succeeded, want cancellation")
	}
	got, _ := r.led.Get(t.Context(), rec.ID)
	if got.State != agentenv.StateAbandoned {
		t.Errorf("record state after giving up = %s, want abandoned", got.State)
	}
	waitPending(t, r.mgr)
	got, _ = r.led.Get(t.Context(), rec.ID)
	if got.State != agentenv.StateGone {
		t.Errorf("record state after the create ended = %s, want gone", got.State)
	}
}

func TestAChosenIDIsClaimedOnceUntilItsRecordIsGone(t *testing.T) {
	r := newRig(t)
	req := lifecycle.CreateRequest{Provider: "fake", ID: "snap-seeded", Spec: agentenv.SandboxSpec{Image: "img"}}
	const n = 8
	errs := make(chan error, n)
	for range n {
		go func() { _, _, err := r.mgr.Create(t.Context(), req); errs <- err }()
	}
	won := 0
	for range n {
		switch err := <-errs; {
		case err == nil:
			won++
		case !errors.Is(err, agentenv.ErrConflict):
			t.Errorf("a losing create: %v, want ErrConflict", err)
		}
	}
	if won != 1 || len(r.fake.Live()) != 1 {
		t.Fatalf("%d of %d creates of one id succeeded, %d sandboxes made; want 1 and 1", won, n, len(r.fake.Live()))
	}
	if _, err := r.mgr.TeardownIDs(t.Context(), req.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := r.mgr.Create(t.Context(), req); err != nil {
		t.Fatalf("create of an id whose record is gone: %v", err)
	}
	if _, err := r.mgr.TeardownIDs(t.Context(), req.ID); err != nil {
		t.Fatal(err)
	}
	r.assertClean(t, "after two claims of one id")
}

func TestTeardownAlreadyGoneIsNotAFailure(t *testing.T) {
	r := newRig(t)
	var ids []string
	for range 3 {
		rec, _, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "img"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.ID)
	}
	recs := make([]agentenv.Record, len(ids))
	for i, id := range ids {
		recs[i], _ = r.led.Get(t.Context(), id)
	}
	r.fake.Remove(recs[0].SandboxID)    // removed behind our back
	r.fake.Kill(recs[1].SandboxID, 137) // killed
	rc, err := r.mgr.TeardownIDs(t.Context(), ids...)
	if err != nil {
		t.Fatalf("Teardown: %v", err)
	}
	want := []agentenv.Outcome{agentenv.OutcomeAlreadyGone, agentenv.OutcomeAlreadyGone, agentenv.OutcomeTerminated}
	for i, it := range rc.Items {
		if it.Outcome != want[i] {
			t.Errorf("item %d outcome = %s, want %s", i, it.Outcome, want[i])
		}
	}
	if rc.Count(agentenv.OutcomeStillListed)+rc.Count(agentenv.OutcomeFailed) != 0 {
		t.Errorf("receipt reports failures: %+v", rc)
	}
	r.assertClean(t, "after teardown")
}

func TestFailedTerminateIsRetriedByGC(t *testing.T) {
	r := newRig(t)
	rec, _, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "img"}})
	if err != nil {
		t.Fatal(err)
	}
	r.fp.Plan = fault.NewPlan(fault.Rule{Op: "terminate", Call: 1, Action: fault.Error})
	rc, err := r.mgr.TeardownIDs(t.Context(), rec.ID)
	if err == nil || rc.Items[0].Outcome != agentenv.OutcomeFailed {
		t.Fatalf("teardown = %+v, %v; want a failed item", rc, err)
	}
	got, _ := r.led.Get(t.Context(), rec.ID)
	if got.State != agentenv.StateTerminateFailed || got.Error == "" {
		t.Errorf("record = %s %q, want terminate_failed with the error", got.State, got.Error)
	}
	rep, err := r.mgr.GC(t.Context(), lifecycle.GCOptions{})
	if err != nil || len(rep.Actions) != 1 || rep.Actions[0].Outcome != agentenv.OutcomeTerminated {
		t.Fatalf("GC = %+v, %v; want one terminated", rep, err)
	}
	r.assertClean(t, "after gc")
}

func TestGCLeavesLiveOwnersAlone(t *testing.T) {
	r := newRig(t)
	// Owned by this very test process: alive.
	me, err := lifecycle.CurrentOwner()
	if err != nil {
		t.Fatal(err)
	}
	owner := r.manager(t, me, time.Now)
	if _, _, err := owner.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "img"}}); err != nil {
		t.Fatal(err)
	}
	// Handed to its expiry, which counts from the hand-over: also kept.
	rec2, _, err := owner.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "img"}, TTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	until := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	if err := owner.Release(t.Context(), until, rec2.ID); err != nil {
		t.Fatal(err)
	}
	if got, _ := r.led.Get(t.Context(), rec2.ID); !got.Expires.Equal(until) || !got.Owner.IsZero() {
		t.Errorf("released record expires %v owned by %+v, want %v and no owner", got.Expires, got.Owner, until)
	}
	// A gc two seconds on: past the create-time TTL, before the hand-over's.
	other := r.manager(t, agentenv.Owner{Host: me.Host, PID: 99, Start: 99}, func() time.Time { return time.Now().Add(2 * time.Second) })
	rep, err := other.GC(t.Context(), lifecycle.GCOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Actions) != 0 || rep.Kept != 2 {
		t.Errorf("gc collected %+v (kept %d), want nothing collected and 2 kept", rep.Actions, rep.Kept)
	}
	if n := len(r.fake.Live()); n != 2 {
		t.Errorf("fake holds %d sandboxes, want 2", n)
	}
	// Past expiry, the released one goes; the one whose owner still works stays (gc --help).
	later := r.manager(t, agentenv.Owner{Host: me.Host, PID: 99, Start: 99}, func() time.Time { return time.Now().Add(4 * time.Hour) })
	if rep, err := later.GC(t.Context(), lifecycle.GCOptions{}); err != nil || len(rep.Actions) != 1 || rep.Actions[0].Record != rec2.ID {
		t.Fatalf("gc past expiry = %+v, %v; want only the released record collected", rep, err)
	}
	if n := len(r.fake.Live()); n != 1 {
		t.Errorf("fake holds %d sandboxes past expiry, want the live owner's 1", n)
	}
	owner.Close()
	if _, err := owner.TeardownIDs(t.Context(), mustIDs(r)...); err != nil {
		t.Fatal(err)
	}
	r.assertClean(t, "after the owner's teardown")
}

func TestChainMemberThatFailsCleansUpBeforeNext(t *testing.T) {
	r := newRig(t)
	r.fp.Plan = fault.NewPlan(fault.Rule{Op: "create", Call: 1, Action: fault.Lost})
	m, err := lifecycle.New(lifecycle.Config{Ledger: r.led, Providers: map[string]agentenv.Provider{"a": r.fp, "b": r.fake}, Owner: alive})
	if err != nil {
		t.Fatal(err)
	}
	members, err := m.ParseChain("a,b")
	if err != nil {
		t.Fatal(err)
	}
	rec, _, err := m.CreateChain(t.Context(), members, lifecycle.CreateRequest{Spec: agentenv.SandboxSpec{Image: "img"}})
	if err != nil {
		t.Fatal(err)
	}
	if rec.Provider != "b" {
		t.Errorf("winner = %s, want b", rec.Provider)
	}
	if n := len(r.fake.Live()); n != 1 {
		t.Errorf("fake holds %d sandboxes, want only the winner's", n)
	}
	if _, err := m.ParseChain("a,nope"); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("ParseChain(unknown) = %v, want ErrInvalid", err)
	}
}

// located gives a provider a Location, as a cloud provider has.
type located struct{ agentenv.Provider }

func (located) Location() string { return "app agentenv, region eu-west" }

func TestExitWithACreatePendingWarnsWhereItIs(t *testing.T) {
	r := newRig(t)
	var logs bytes.Buffer
	m, err := lifecycle.New(lifecycle.Config{
		Ledger: r.fl, Providers: map[string]agentenv.Provider{"cloud": located{r.fp}}, Owner: alive,
		ReclaimWait: 50 * time.Millisecond, CreateTimeout: 300 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	r.fp.Plan = fault.NewPlan(fault.Rule{Op: "create", Call: 1, Action: fault.Hang})
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Millisecond)
	defer cancel()
	rec, _, err := m.Create(ctx, lifecycle.CreateRequest{Provider: "cloud", Spec: agentenv.SandboxSpec{Image: "img:1"}})
	if err == nil {
		t.Fatal("Create succeeded, want cancellation")
	}
	m.Close() // the process exits with the create still pending
	var warning string
	for line := range strings.Lines(logs.String()) {
		if strings.Contains(line, "exiting with a create still pending") {
			warning = line
		}
	}
	for _, want := range []string{"record_id=" + rec.ID, "provider=cloud", "image=img:1", `where="app agentenv, region eu-west"`} {
		if !strings.Contains(warning, want) {
			t.Errorf("exit warning %q lacks %s; the log:\n%s", warning, want, &logs)
		}
	}
	waitPending(t, m)
}

func TestRefusedCreateOnAnUnlistableProviderClosesItsRecord(t *testing.T) {
	for _, tc := range []struct {
		createErr error
		want      agentenv.State
	}{
		// Refused up front (no credential): nothing was made, though nothing can be listed.
		{fmt.Errorf("no credentials: %w: %w", agentenv.ErrInvalid, agentenv.ErrUnavailable), agentenv.StateGone},
		// Failed for another reason: what it made may exist, and gc must look again.
		{fmt.Errorf("connection reset: %w", agentenv.ErrUnavailable), agentenv.StateTerminateFailed},
	} {
		r := newRig(t)
		r.fp.Plan = fault.NewPlan(
			fault.Rule{Op: "create", Call: 1, Action: fault.Error, Err: tc.createErr},
			fault.Rule{Op: "list", Action: fault.Error, Err: agentenv.ErrUnavailable},
		)
		rec, _, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "img"}})
		if !errors.Is(err, tc.createErr) {
			t.Errorf("Create = %v, want %v", err, tc.createErr)
		}
		if got, _ := r.led.Get(t.Context(), rec.ID); got.State != tc.want {
			t.Errorf("after a create failing with %q on a provider that cannot list: record %s, want %s", tc.createErr, got.State, tc.want)
		}
	}
}

// A spec that joins a second network is refused, before any record, on a provider that cannot
// join one (the fake); as is a negative shm size.
func TestCreateRefusesWhatTheProviderCannotJoin(t *testing.T) {
	r := newRig(t)
	for _, sp := range []agentenv.SandboxSpec{
		{Image: "img", Network: "net-1", Join: []agentenv.NetworkJoin{{Network: "net-2"}}},
		{Image: "img", ShmSize: -1},
	} {
		if _, _, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Spec: sp}); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("create %+v = %v, want ErrInvalid", sp, err)
		}
	}
	recs, err := r.mgr.Ledger().List(t.Context(), agentenv.Filter{})
	if err != nil || len(recs) != 0 {
		t.Errorf("records after refused creates: %v %v", recs, err)
	}
}

// A sandbox's user reaches only a provider that runs sandboxes as a user (Capabilities.User):
// elsewhere the create is refused before any record is written.
func TestCreateUserNeedsTheCapability(t *testing.T) {
	r := newRig(t)
	_, _, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "img", User: "nobody"}})
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), `user "nobody": provider fake cannot run a sandbox as a given user`) {
		t.Errorf("Create with a user on the fake = %v, want ErrInvalid naming the user and the provider", err)
	}
	recs, err := r.led.List(t.Context(), agentenv.Filter{})
	if err != nil || len(recs) != 0 {
		t.Errorf("the refused create wrote records %v (%v)", recs, err)
	}
}
