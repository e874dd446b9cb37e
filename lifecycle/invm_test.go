package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/lifecycle"
)

// vmOf makes a VM on the rig's fake provider, owned by the rig's manager.
func vmOf(t *testing.T, r *rig) agentenv.Record {
	t.Helper()
	vm, _, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Kind: agentenv.KindVM})
	if err != nil {
		t.Fatal(err)
	}
	return vm
}

func addReq(dep, name string) lifecycle.CreateRequest {
	return lifecycle.CreateRequest{Deployment: dep, Role: agentenv.RoleMCPServer, Spec: agentenv.SandboxSpec{Name: name, Image: "img", Ports: []int{80}}}
}

// N concurrent claims of one name in one VM, by as many managers sharing the ledger (as
// processes would): exactly one starts its container, every other is refused with ErrConflict.
func TestAddToVMClaimsANameOnce(t *testing.T) {
	r := newRig(t)
	vm := vmOf(t, r)
	const n = 12
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		m := r.manager(t, agentenv.Owner{Host: "test-host", PID: 100 + i, Start: 1}, time.Now)
		wg.Go(func() {
			_, _, errs[i] = m.AddToVM(t.Context(), vm.ID, addReq(fmt.Sprintf("dep-%d", i), "notes"))
		})
	}
	wg.Wait()
	won := 0
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case !errors.Is(err, agentenv.ErrConflict):
			t.Errorf("AddToVM = %v, want nil or ErrConflict", err)
		}
	}
	if won != 1 {
		t.Fatalf("%d of %d claims of one name won, want exactly 1: %v", won, n, errs)
	}
	if got := r.fake.InVM(vm.SandboxID); len(got) != 1 || got[0] != "notes" {
		t.Errorf("the vm's stack = %v, want [notes]", got)
	}

	// Once the winner is torn down, the name is free again.
	id := agentenv.InVMRecordID(vm.ID, "notes")
	rc, err := r.mgr.TeardownIDs(t.Context(), id)
	if err != nil || rc.Count(agentenv.OutcomeTerminated) != 1 {
		t.Fatalf("teardown = %+v, %v; want one terminated", rc, err)
	}
	if got := r.fake.InVM(vm.SandboxID); len(got) != 0 {
		t.Errorf("after teardown the vm's stack = %v, want empty", got)
	}
	rec, _, err := r.mgr.AddToVM(t.Context(), vm.ID, addReq("dep-again", "notes"))
	if err != nil || rec.State != agentenv.StateLive || rec.Deployment != "dep-again" {
		t.Fatalf("claim after teardown = %+v, %v; want live for dep-again", rec, err)
	}
}

// A deploy --into whose process died (kill -9) leaves live in_vm records with a dead owner:
// gc removes exactly that deploy's containers, and leaves the VM and another live deploy's
// containers in it alone.
func TestGCCollectsADeadDeploysContainersInACallersVM(t *testing.T) {
	r := newRig(t)
	vm := vmOf(t, r)
	dead := r.manager(t, agentenv.Owner{Host: hostname(t), PID: 1 << 30, Start: 7}, time.Now)
	for _, name := range []string{"a-gateway", "a-notes"} {
		if _, _, err := dead.AddToVM(t.Context(), vm.ID, addReq("dep-a", name)); err != nil {
			t.Fatal(err)
		}
	}
	live, _, err := r.mgr.AddToVM(t.Context(), vm.ID, addReq("dep-b", "b-notes"))
	if err != nil {
		t.Fatal(err)
	}
	// A claim the dead process wrote but never started (killed between the two).
	claimed := agentenv.Record{ID: agentenv.InVMRecordID(vm.ID, "a-kv"), Kind: agentenv.KindInVM, Provider: "fake",
		Deployment: "dep-a", State: agentenv.StateCreating, Owner: dead.Owner(), LeaseUntil: time.Now().Add(time.Minute),
		Attrs: map[string]string{agentenv.AttrVM: vm.ID, agentenv.AttrInVMName: "a-kv"}}
	if err := r.led.Insert(t.Context(), claimed); err != nil {
		t.Fatal(err)
	}

	gc := r.manager(t, agentenv.Owner{Host: hostname(t), PID: 3, Start: 3}, time.Now)
	rep, err := gc.GC(t.Context(), lifecycle.GCOptions{})
	if err != nil || !rep.Clean() {
		t.Fatalf("gc = %+v, %v", rep, err)
	}
	collected := map[string]bool{}
	for _, a := range rep.Actions {
		collected[a.Record] = true
	}
	for _, name := range []string{"a-gateway", "a-notes", "a-kv"} {
		if !collected[agentenv.InVMRecordID(vm.ID, name)] {
			t.Errorf("gc did not collect %s of the dead deploy: %+v", name, rep.Actions)
		}
	}
	if len(rep.Actions) != 3 {
		t.Errorf("gc did %d actions, want 3 (the dead deploy's): %+v", len(rep.Actions), rep.Actions)
	}
	if got := r.fake.InVM(vm.SandboxID); len(got) != 1 || got[0] != "b-notes" {
		t.Errorf("the vm's stack after gc = %v, want [b-notes]", got)
	}
	for id, want := range map[string]agentenv.State{vm.ID: agentenv.StateLive, live.ID: agentenv.StateLive} {
		if got, err := r.led.Get(t.Context(), id); err != nil || got.State != want {
			t.Errorf("record %s = %s, %v; want %s", id, got.State, err, want)
		}
	}
	if _, err := r.fake.Get(context.Background(), vm.SandboxID); err != nil {
		t.Errorf("the vm itself: %v, want it running", err)
	}
}

// An in_vm record whose VM is gone is already gone: its teardown is clean without the VM.
func TestTeardownOfAContainerWhoseVMIsGone(t *testing.T) {
	r := newRig(t)
	vm := vmOf(t, r)
	rec, _, err := r.mgr.AddToVM(t.Context(), vm.ID, addReq("dep-a", "notes"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.mgr.TeardownIDs(t.Context(), vm.ID); err != nil {
		t.Fatal(err)
	}
	rc, err := r.mgr.TeardownIDs(t.Context(), rec.ID)
	if err != nil || rc.Count(agentenv.OutcomeAlreadyGone) != 1 {
		t.Fatalf("teardown = %+v, %v; want one already gone", rc, err)
	}
	r.assertClean(t, "after both teardowns")
}
