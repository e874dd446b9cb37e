package lifecycle_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/procinfo"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
)

// Two agentenv processes in two containers with one host name share a ledger. A pid of one
// container means nothing in the other, so gc from either judges the other's records by their
// lease, and leaves the live ones alone (before, a shared host name made gc check the pid in its
// own PID namespace, find it dead, and tear down the other's live sandbox).
func TestGCDoesNotJudgeAnotherPIDNamespaceByPID(t *testing.T) {
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	fk := fake.New("fake")
	manager := func(o agentenv.Owner) *lifecycle.Manager {
		m, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"fake": fk}, Owner: o})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(m.Close)
		return m
	}
	// The same host name and pid in both containers; the host ids differ (procinfo.HostID).
	a := manager(agentenv.Owner{Host: "box@aaaaaaaaaaaa", PID: 1 << 30, Start: 7})
	b := manager(agentenv.Owner{Host: "box@bbbbbbbbbbbb", PID: 1 << 30, Start: 7})
	rec, _, err := a.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "img"}})
	if err != nil {
		t.Fatal(err)
	}
	rep, err := b.GC(context.Background(), lifecycle.GCOptions{})
	if err != nil || len(rep.Actions) != 0 {
		t.Fatalf("gc from the other container = %+v, %v; want nothing collected", rep, err)
	}
	if got, _ := led.Get(t.Context(), rec.ID); got.State != agentenv.StateLive || len(fk.Live()) != 1 {
		t.Errorf("after gc from the other container: record %s, provider holds %v; want it live", got.State, fk.Live())
	}
	// Once its lease runs out (the process died and stopped renewing it), the other gc collects.
	m, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"fake": fk},
		Owner: agentenv.Owner{Host: "box@bbbbbbbbbbbb", PID: 3, Start: 3}, Now: func() time.Time { return time.Now().Add(10 * time.Minute) }})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if rep, err := m.GC(context.Background(), lifecycle.GCOptions{}); err != nil || len(rep.Actions) != 1 || len(fk.Live()) != 0 {
		t.Errorf("gc after the lease ran out = %+v, %v, left %v; want the record collected", rep, err, fk.Live())
	}
}

// This process's owner names its PID namespace, not only its host name.
func TestCurrentOwnerNamesThePIDSpace(t *testing.T) {
	o, err := lifecycle.CurrentOwner()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(o.Host, "@"+procinfo.HostID()) {
		t.Errorf("CurrentOwner().Host = %q, want the host name @ procinfo.HostID()", o.Host)
	}
}

// A record past its expiry whose owner still works is left alone (gc --help says so): a run
// longer than its TTL is not torn down under it.
func TestGCLeavesAnExpiredRecordOfALiveOwner(t *testing.T) {
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	fk := fake.New("fake")
	me, err := lifecycle.CurrentOwner()
	if err != nil {
		t.Fatal(err)
	}
	m, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"fake": fk}, Owner: me})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if _, _, err := m.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", TTL: time.Second, Spec: agentenv.SandboxSpec{Image: "img"}}); err != nil {
		t.Fatal(err)
	}
	other, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"fake": fk},
		Owner: agentenv.Owner{Host: me.Host, PID: 1 << 30, Start: 1}, Now: func() time.Time { return time.Now().Add(time.Hour) }})
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	if rep, err := other.GC(context.Background(), lifecycle.GCOptions{}); err != nil || len(rep.Actions) != 0 || len(fk.Live()) != 1 {
		t.Errorf("gc of an expired record whose owner lives = %+v, %v; want it kept", rep, err)
	}
}

// A teardown is most often asked for by a caller that was just cancelled (the first Ctrl-C):
// TeardownIDs with a cancelled context still tears down.
func TestTeardownIDsAfterCancellation(t *testing.T) {
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	fk := fake.New("fake")
	m, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"fake": fk}})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	rec, _, err := m.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "img"}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if rc, err := m.TeardownIDs(ctx, rec.ID); err != nil || !rc.Clean() || len(fk.Live()) != 0 {
		t.Errorf("TeardownIDs after cancellation = %+v, %v, left %v; want it torn down", rc, err, fk.Live())
	}
}
