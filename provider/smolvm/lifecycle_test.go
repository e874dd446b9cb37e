package smolvm_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/lifecycle/lifecycletest"
	"github.com/agentenv/agentenv/provider/smolvm"
	"github.com/agentenv/agentenv/provider/smolvm/smolvmemu"
)

// TestLifecycle runs the lifecycle cases every cloud provider runs, on the smolvm emulator.
func TestLifecycle(t *testing.T) {
	lifecycletest.Run(t, lifecycletest.Kit[*smolvmemu.Server]{
		Name:     "smol_vm",
		Emulator: emulator,
		Provider: func(t *testing.T, emu *smolvmemu.Server, name string) agentenv.Provider {
			return newProvider(t, emu, smolvm.Config{Name: name, Image: "python:3.12-alpine"}, nil)
		},
		CreateLost: createLost,
		Command:    serve,
	})
}

// createLost posts a create as the provider would, whose answer is lost: the machine exists,
// made but never started, with no labels file (they are written after the start).
func createLost(t *testing.T, emu *smolvmemu.Server, record string) {
	t.Helper()
	body, _ := json.Marshal(map[string]any{"name": record, "image": "python:3.12-alpine", "cmd": serve, "network": true,
		"entrypoint": []string{"/bin/sh", "-c", `"$@"`, "agentenv"}, "restart": map[string]any{"policy": "never"}})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, emu.URL()+"/api/v1/machines", bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	emu.SetCreateFault(&smolvmemu.CreateFault{Lost: true, Times: 1})
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("create answered %s, want the answer lost", resp.Status)
	}
}

// managed is a smol_vm provider on an emulator under a lifecycle manager with a bbolt ledger.
func managed(t *testing.T) (*smolvmemu.Server, *smolvm.Provider, agentenv.Ledger, *lifecycle.Manager) {
	t.Helper()
	emu := emulator(t)
	p := newProvider(t, emu, smolvm.Config{Image: "python:3.12-alpine"}, nil)
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"smol_vm": p}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mgr.Close)
	return emu, p, led, mgr
}

// TestGCCollectsAnExpiredMachine: smolvm machines have no lifetime of their own, so gc by the
// expiry label is what bounds them. A machine whose expiry passed is collected whether this
// ledger recorded it or not (another ledger's, read from the labels file in the machine).
func TestGCCollectsAnExpiredMachine(t *testing.T) {
	emu, p, _, mgr := managed(t)
	past := time.Now().Add(-time.Minute)
	// Unrecorded: made by a process whose ledger this is not, expired a minute ago.
	foreign := spec("sb-foreign")
	foreign.Expires = past
	if _, err := p.Create(t.Context(), foreign); err != nil {
		t.Fatal(err)
	}
	// Recorded, and live past its expiry.
	rec, _, err := mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "smol_vm", ID: "sb-expired", Spec: agentenv.SandboxSpec{Command: serve}, TTL: time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.Release(t.Context(), time.Time{}, rec.ID); err != nil {
		t.Fatal(err)
	}
	// Not expired, unrecorded: left alone.
	young := spec("sb-young")
	young.Expires = time.Now().Add(time.Hour)
	if _, err := p.Create(t.Context(), young); err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(t.Context(), "sb-young")
	time.Sleep(10 * time.Millisecond)
	rep, err := mgr.GC(t.Context(), lifecycle.GCOptions{})
	if err != nil || !rep.Clean() || len(rep.Actions) != 2 {
		t.Fatalf("GC = %+v, %v; want the two expired machines collected", rep, err)
	}
	if got := emu.Running(); !slices.Equal(got, []string{"sb-young"}) {
		t.Errorf("machines left %v, want only the one not expired", got)
	}
}

// TestGCCollectsAStoppedMachineWhoseRecordIsGone: a machine stopped outside agentenv cannot have
// its labels read, yet gc still finds it by name when its record is gone (a teardown that listed
// by deployment missed it) and deletes it.
func TestGCCollectsAStoppedMachineWhoseRecordIsGone(t *testing.T) {
	emu, _, led, mgr := managed(t)
	rec, _, err := mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "smol_vm", ID: "sb-stopped", Spec: agentenv.SandboxSpec{Command: serve}})
	if err != nil {
		t.Fatal(err)
	}
	post(t, http.MethodPost, emu.URL()+"/api/v1/machines/sb-stopped/stop", nil)
	if _, err := led.Update(t.Context(), rec.ID, func(r *agentenv.Record) error { r.State = agentenv.StateGone; return nil }); err != nil {
		t.Fatal(err)
	}
	rep, err := mgr.GC(t.Context(), lifecycle.GCOptions{})
	if err != nil || !rep.Clean() || len(rep.Actions) != 1 || rep.Actions[0].Reason != "listed but its record is gone" {
		t.Fatalf("GC = %+v, %v; want the stopped machine collected as a leak", rep, err)
	}
	if left := emu.Running(); len(left) != 0 {
		t.Errorf("machines left %v", left)
	}
}
