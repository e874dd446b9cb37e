// Package lifecycletest is the kit of lifecycle cases every cloud provider runs against its
// emulator: a create answered after the cancel, a failing terminate then gc, a hanging create, a
// create finishing as the wait gives up, a refused create falling through a chain, a finished
// sandbox torn down, a lost answer reclaimed by the creator and a killed creator reclaimed by gc.
//
// A provider's test calls [Run] with a [Kit] over its emulator (a fake of the cloud, which cannot
// be reached here), which implements [Emulator] itself (internal/emuapi.Base gives it the fault
// setters and Kills); the manager, the bbolt ledger and the provider are the real ones.
package lifecycletest

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/emufault"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
)

// CreateFault is how the emulator handles the next creates: the fault the cloud emulators share.
type CreateFault = emufault.Create

// Emulator is what the kit needs of a cloud's emulator.
type Emulator interface {
	// SetCreateFault makes the next creates misbehave as f says; nil clears it.
	SetCreateFault(f *CreateFault)
	// SetKillFault makes the next times terminates (every one if times is 0) fail with HTTP
	// status code and leave the sandbox running; code 0 clears it.
	SetKillFault(code, times int)
	// Running returns the ids of the sandboxes that run now.
	Running() []string
	// Made returns the ids of every sandbox the emulator has made so far, in order.
	Made() []string
	// Kills returns how many terminate requests arrived.
	Kills() int
	// Expire ends a sandbox as if it finished on its own.
	Expire(id string)
}

// Kit is one cloud provider under test, on its emulator of type E.
type Kit[E Emulator] struct {
	// Name is the provider's default name ("e2b", "tensorlake").
	Name string
	// Emulator starts a fresh emulator, failing the test if it still runs a sandbox at the end.
	Emulator func(t *testing.T) E
	// Provider returns a provider on emu named name (Name if empty).
	Provider func(t *testing.T, emu E, name string) agentenv.Provider
	// CreateLost posts a create to emu as the provider would, labelled with record, whose answer
	// the emulator drops: the sandbox runs, the process never learns its id. It fails t if the
	// create was answered.
	CreateLost func(t *testing.T, emu E, record string)
	// Command serves HTTP on port 8080 in the sandbox.
	Command []string
}

// Run runs every lifecycle case on the kit's provider, each as a subtest.
func Run[E Emulator](t *testing.T, kit Kit[E]) {
	k := &kitRun[E]{Kit: kit}
	for _, c := range []struct {
		name string
		run  func(*testing.T)
	}{
		{"CreateCompletingAfterCancelIsTerminated", k.createCompletingAfterCancel},
		{"KillFailingAfterCancelLeavesTerminateFailedForGC", k.killFailingAfterCancel},
		{"HangingCreateCancelledPastTheWait", k.hangingCreate},
		{"CreateFinishingAsTheWaitGivesUp", k.createFinishingAsTheWaitGivesUp},
		{"RefusedCreateFallsThroughTheChain", k.refusedCreate},
		{"FinishedSandboxCountsAsGoneInTeardown", k.finishedSandbox},
		{"KilledProcessMidCreateIsReclaimedByGC", k.killedProcessMidCreate},
		{"LostCreateAnswerIsReclaimedByTheCreator", k.lostCreateAnswer},
	} {
		t.Run(c.name, c.run)
	}
}

type kitRun[E Emulator] struct{ Kit[E] }

// second is the name of the second provider on the rig's emulator, for chains.
func (k *kitRun[E]) second() string { return k.Name + "2" }

// rig is a lifecycle manager over a bbolt ledger with two providers on one emulator (Name and
// second) and a fake ("spare"), for chains.
type rig[E Emulator] struct {
	kit   *kitRun[E]
	emu   E
	p     agentenv.Provider
	spare *fake.Provider
	led   agentenv.Ledger
	mgr   *lifecycle.Manager
}

func (k *kitRun[E]) newRig(t *testing.T, reclaim time.Duration) *rig[E] {
	t.Helper()
	emu := k.Emulator(t)
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	r := &rig[E]{kit: k, emu: emu, led: led, p: k.Provider(t, emu, ""), spare: fake.New("spare")}
	r.mgr = r.manager(t, agentenv.Owner{}, reclaim, 0)
	return r
}

// manager returns a manager over the rig's ledger and providers as owner (this process if zero),
// with the given owner lease (the default if zero).
func (r *rig[E]) manager(t *testing.T, owner agentenv.Owner, reclaim, lease time.Duration) *lifecycle.Manager {
	t.Helper()
	p2 := r.kit.Provider(t, r.emu, r.kit.second())
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: r.led, ReclaimWait: reclaim, Owner: owner, Lease: lease,
		Providers: map[string]agentenv.Provider{r.kit.Name: r.p, r.kit.second(): p2, "spare": r.spare}})
	if err != nil {
		t.Fatal(err)
	}
	return mgr
}

func (r *rig[E]) state(t *testing.T, id string) agentenv.State {
	t.Helper()
	rec, err := r.led.Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return rec.State
}

// eventually waits, bounded, until cond holds.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Errorf("not so within %s: %s", within, what)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func (r *rig[E]) nothingRuns(t *testing.T, within time.Duration) {
	t.Helper()
	eventually(t, within, "the emulator runs nothing", func() bool { return len(r.emu.Running()) == 0 })
}

func cancelAfter(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(d, cancel)
	t.Cleanup(cancel)
	return ctx
}

// bare is a spec for lifecycle, which sets the name and labels itself.
func (k *kitRun[E]) bare() agentenv.SandboxSpec {
	return agentenv.SandboxSpec{Command: k.Command, Ports: []int{8080}}
}

// create asks the rig's manager for a sandbox of the kit's provider.
func (r *rig[E]) create(ctx context.Context, id string) (agentenv.Record, agentenv.Sandbox, error) {
	return r.mgr.Create(ctx, lifecycle.CreateRequest{Provider: r.kit.Name, ID: id, Spec: r.kit.bare()})
}

func (k *kitRun[E]) createCompletingAfterCancel(t *testing.T) {
	r := k.newRig(t, 5*time.Second)
	r.emu.SetCreateFault(&CreateFault{Delay: 400 * time.Millisecond, Times: 1})
	rec, _, err := r.create(cancelAfter(t, 50*time.Millisecond), "sb-late")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Create = %v, want context.Canceled", err)
	}
	if got := r.state(t, rec.ID); got != agentenv.StateGone {
		t.Errorf("record %s, want gone", got)
	}
	r.nothingRuns(t, time.Second)
}

func (k *kitRun[E]) killFailingAfterCancel(t *testing.T) {
	r := k.newRig(t, 5*time.Second)
	r.emu.SetCreateFault(&CreateFault{Delay: 300 * time.Millisecond, Times: 1})
	r.emu.SetKillFault(http.StatusInternalServerError, 0)
	rec, _, err := r.create(cancelAfter(t, 50*time.Millisecond), "sb-tf")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Create = %v, want context.Canceled still raised", err)
	}
	got, err := r.led.Get(t.Context(), rec.ID)
	if err != nil || got.State != agentenv.StateTerminateFailed || got.Error == "" {
		t.Errorf("record = %s %q, %v; want terminate_failed with the error", got.State, got.Error, err)
	}
	if n := len(r.emu.Running()); n != 1 {
		t.Fatalf("running %d, want the one sandbox whose kill failed", n)
	}
	r.emu.SetKillFault(http.StatusInternalServerError, 1) // gc's first kill fails too
	if rep, _ := r.mgr.GC(t.Context(), lifecycle.GCOptions{}); rep.Clean() {
		t.Errorf("GC with a failing kill = %+v, want not clean", rep)
	}
	rep, err := r.mgr.GC(t.Context(), lifecycle.GCOptions{})
	if err != nil || !rep.Clean() || len(rep.Actions) != 1 {
		t.Errorf("GC = %+v, %v; want the record collected, clean", rep, err)
	}
	if got := r.state(t, rec.ID); got != agentenv.StateGone {
		t.Errorf("record %s after gc, want gone", got)
	}
	r.nothingRuns(t, time.Second)
}

func (k *kitRun[E]) hangingCreate(t *testing.T) {
	for _, twice := range []bool{false, true} {
		name := map[bool]string{false: "once", true: "twice"}[twice]
		t.Run(name, func(t *testing.T) {
			r := k.newRig(t, 200*time.Millisecond)
			hang := make(chan struct{})
			r.emu.SetCreateFault(&CreateFault{Hang: hang, Times: 1})
			ctx := cancelAfter(t, 50*time.Millisecond)
			wait, mgr := 200*time.Millisecond, r.mgr
			if twice { // a second interrupt: the hard stop ends the wait, and all cleanup, at once
				// The process then exits: its owner is on another host with a short lease, so
				// that gc here sees it dead.
				mgr = r.manager(t, agentenv.Owner{Host: "cli-host", PID: 3, Start: 3}, 200*time.Millisecond, 100*time.Millisecond)
				stop := make(chan struct{})
				time.AfterFunc(80*time.Millisecond, func() { close(stop) })
				ctx = cleanup.WithHardStop(ctx, stop)
				wait = 30 * time.Millisecond
			}
			start := time.Now()
			rec, _, err := mgr.Create(ctx, lifecycle.CreateRequest{Provider: k.Name, ID: "sb-hang", Spec: k.bare()})
			if took := time.Since(start); !errors.Is(err, context.Canceled) || took > 50*time.Millisecond+wait+time.Second {
				t.Fatalf("Create = %v after %s, want context.Canceled soon after the wait", err, took)
			}
			if got := r.state(t, rec.ID); got != agentenv.StateAbandoned && (!twice || got != agentenv.StateCreating) {
				// After a hard stop the ledger write itself may be cut short: creating is as good.
				t.Errorf("record %s, want abandoned", got)
			}
			close(hang) // the cloud makes the sandbox now
			if twice {
				// After a hard stop this process does no more cleanup and exits (its lease is no
				// longer renewed): the record stays for gc, which finds the sandbox by its labels.
				mgr.Close()
				eventually(t, 5*time.Second, "the sandbox made", func() bool { return len(r.emu.Made()) > 0 })
				time.Sleep(150 * time.Millisecond) // the dead owner's lease runs out
				if rep, err := r.mgr.GC(t.Context(), lifecycle.GCOptions{}); err != nil || !rep.Clean() || len(rep.Actions) != 1 {
					t.Errorf("GC = %+v, %v; want the abandoned record collected", rep, err)
				}
			}
			// Once: this process kills the sandbox when the request ends.
			eventually(t, 5*time.Second, "a kill", func() bool { return r.emu.Kills() > 0 })
			r.nothingRuns(t, 5*time.Second)
			eventually(t, 5*time.Second, "record gone", func() bool { return r.state(t, rec.ID) == agentenv.StateGone })
		})
	}
}

func (k *kitRun[E]) createFinishingAsTheWaitGivesUp(t *testing.T) {
	// The wait gives up 50+150 ms after the start; the answer comes at about the same instant,
	// a little before, at, or a little after. Whichever side sees the other, the sandbox is killed.
	for _, delay := range []time.Duration{190, 200, 205, 210, 220} {
		t.Run((delay * time.Millisecond).String(), func(t *testing.T) {
			r := k.newRig(t, 150*time.Millisecond)
			r.emu.SetCreateFault(&CreateFault{Delay: delay * time.Millisecond, Times: 1})
			rec, _, err := r.create(cancelAfter(t, 50*time.Millisecond), "sb-race")
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Create = %v, want context.Canceled", err)
			}
			eventually(t, 5*time.Second, "a kill", func() bool { return r.emu.Kills() > 0 })
			r.nothingRuns(t, 5*time.Second)
			eventually(t, 5*time.Second, "record gone", func() bool { return r.state(t, rec.ID) == agentenv.StateGone })
		})
	}
}

func (k *kitRun[E]) refusedCreate(t *testing.T) {
	for _, tt := range []struct {
		name, next string
		fault      CreateFault
	}{
		{"429 to the fake", "spare", CreateFault{Status: http.StatusTooManyRequests, Message: "rate limit exceeded"}},
		{"no capacity to another " + k.Name, k.second(), CreateFault{Status: http.StatusServiceUnavailable, Message: "no capacity", Times: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := k.newRig(t, time.Second)
			r.emu.SetCreateFault(&tt.fault)
			rec, sb, err := r.mgr.CreateChain(t.Context(), []string{k.Name, tt.next}, lifecycle.CreateRequest{ID: "sb-chain", Spec: k.bare()})
			if err != nil || rec.Provider != tt.next {
				t.Fatalf("CreateChain = %+v, %v; want the %s member", rec, err, tt.next)
			}
			live, err := r.led.List(t.Context(), agentenv.Filter{States: []agentenv.State{agentenv.StateLive}})
			if err != nil || len(live) != 1 || live[0].SandboxID != sb.ID {
				t.Errorf("live records = %+v, %v; want exactly the winner's", live, err)
			}
			up := len(r.emu.Running()) + len(r.spare.Live())
			if up != 1 {
				t.Errorf("%d sandboxes up (emulator %v, spare %v), want exactly one", up, r.emu.Running(), r.spare.Live())
			}
			if rc, err := r.mgr.TeardownIDs(t.Context(), rec.ID); err != nil || !rc.Clean() {
				t.Errorf("teardown = %+v, %v", rc, err)
			}
		})
	}
	emu := k.Emulator(t)
	p := k.Provider(t, emu, "")
	emu.SetCreateFault(&CreateFault{Status: http.StatusServiceUnavailable, Message: "no capacity"})
	s := agentenv.SandboxSpec{Name: "sb-503", Command: k.Command, Ports: []int{8080},
		Labels: map[string]string{agentenv.LabelRecord: "sb-503", agentenv.LabelRun: "r1"}}
	if _, err := p.Create(t.Context(), s); !errors.Is(err, agentenv.ErrUnavailable) {
		t.Errorf("Create refused for capacity = %v, want ErrUnavailable", err)
	}
}

func (k *kitRun[E]) finishedSandbox(t *testing.T) {
	r := k.newRig(t, time.Second)
	rec, sb, err := r.create(t.Context(), "sb-dead")
	if err != nil {
		t.Fatal(err)
	}
	r.emu.Expire(sb.ID)
	ep := sb.Endpoints["8080"]
	local := !strings.Contains(ep, "://") // a port published on this host, not a proxy's URL
	if local {
		ep = "http://" + ep
	}
	resp, err := http.Get(ep + "/")
	if err == nil {
		resp.Body.Close()
	}
	// A cloud's proxy refuses with 502; nothing listens any more on a port of this host.
	refused := err == nil && resp.StatusCode == http.StatusBadGateway || local && errors.Is(err, syscall.ECONNREFUSED)
	if !refused {
		t.Errorf("GET a finished sandbox's port = %v, %v; want 502 (refused), or a refused connection on this host", resp, err)
	}
	rc, err := r.mgr.TeardownIDs(t.Context(), rec.ID)
	if err != nil || !rc.Clean() || rc.Items[0].Outcome != agentenv.OutcomeAlreadyGone {
		t.Errorf("teardown = %+v, %v; want clean, already gone", rc, err)
	}
	if _, err := r.p.Get(t.Context(), sb.ID); !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("Get of a finished sandbox = %v, want ErrGone", err)
	}
}

func (k *kitRun[E]) killedProcessMidCreate(t *testing.T) {
	r := k.newRig(t, time.Second)
	dead := agentenv.Owner{Host: "elsewhere", PID: 1, Start: 1}
	now := time.Now().UTC()
	rec := agentenv.Record{ID: "sb-orphan", Kind: agentenv.KindSandbox, Provider: k.Name, State: agentenv.StateCreating,
		Owner: dead, LeaseUntil: now.Add(-time.Minute), Expires: now.Add(time.Hour), Created: now.Add(-time.Minute),
		Labels: map[string]string{agentenv.LabelRecord: "sb-orphan"}}
	if err := r.led.Put(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	k.CreateLost(t, r.emu, "sb-orphan")
	if n := len(r.emu.Running()); n != 1 {
		t.Fatalf("running %d, want the sandbox whose answer was lost", n)
	}
	other := r.manager(t, agentenv.Owner{Host: "gc-host", PID: 2, Start: 2}, time.Second, 0)
	rep, err := other.GC(t.Context(), lifecycle.GCOptions{})
	if err != nil || !rep.Clean() || len(rep.Actions) != 1 {
		t.Errorf("GC = %+v, %v; want the orphan collected", rep, err)
	}
	if got := r.state(t, "sb-orphan"); got != agentenv.StateGone {
		t.Errorf("record %s, want gone", got)
	}
	r.nothingRuns(t, time.Second)
}

func (k *kitRun[E]) lostCreateAnswer(t *testing.T) {
	r := k.newRig(t, time.Second)
	r.emu.SetCreateFault(&CreateFault{Lost: true, Times: 1})
	rec, _, err := r.create(t.Context(), "sb-lost")
	if err == nil {
		t.Fatal("Create with a lost answer succeeded")
	}
	if got := r.state(t, rec.ID); got != agentenv.StateGone {
		t.Errorf("record %s, want gone", got)
	}
	r.nothingRuns(t, time.Second)
}
