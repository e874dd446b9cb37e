package tensorlake_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/ledger/sqlite"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
	"github.com/agentenv/agentenv/provider/tensorlake"
	"github.com/agentenv/agentenv/provider/tensorlake/tensorlakeemu"
)

// rig is a lifecycle manager over a SQLite ledger with two tensorlake providers on one emulator
// ("tensorlake" and "tl2") and a fake ("spare"), for chains.
type rig struct {
	emu   *tensorlakeemu.Server
	p     *tensorlake.Provider
	spare *fake.Provider
	led   agentenv.Ledger
	mgr   *lifecycle.Manager
}

func newRig(t *testing.T, reclaim time.Duration) *rig {
	t.Helper()
	emu := emulator(t)
	led, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	r := &rig{emu: emu, led: led, p: newProvider(t, emu, tensorlake.Config{}, nil), spare: fake.New("spare")}
	r.mgr = r.manager(t, agentenv.Owner{}, reclaim, 0)
	return r
}

// manager returns a manager over the rig's ledger and providers as owner (this process if zero),
// with the given owner lease (the default if zero).
func (r *rig) manager(t *testing.T, owner agentenv.Owner, reclaim, lease time.Duration) *lifecycle.Manager {
	t.Helper()
	p2 := newProvider(t, r.emu, tensorlake.Config{Name: "tl2"}, nil)
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: r.led, ReclaimWait: reclaim, Owner: owner, Lease: lease,
		Providers: map[string]agentenv.Provider{"tensorlake": r.p, "tl2": p2, "spare": r.spare}})
	if err != nil {
		t.Fatal(err)
	}
	return mgr
}

func (r *rig) state(t *testing.T, id string) agentenv.State {
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

func (r *rig) nothingRuns(t *testing.T, within time.Duration) {
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
func bare() agentenv.SandboxSpec {
	return agentenv.SandboxSpec{Command: serve, Ports: []int{8080}}
}

func TestCreateCompletingAfterCancelIsTerminated(t *testing.T) {
	r := newRig(t, 5*time.Second)
	r.emu.SetCreateFault(&tensorlakeemu.CreateFault{Delay: 400 * time.Millisecond, Times: 1})
	rec, _, err := r.mgr.Create(cancelAfter(t, 50*time.Millisecond), lifecycle.CreateRequest{Provider: "tensorlake", ID: "sb-late", Spec: bare()})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Create = %v, want context.Canceled", err)
	}
	if got := r.state(t, rec.ID); got != agentenv.StateGone {
		t.Errorf("record %s, want gone", got)
	}
	r.nothingRuns(t, time.Second)
}

func TestKillFailingAfterCancelLeavesTerminateFailedForGC(t *testing.T) {
	r := newRig(t, 5*time.Second)
	r.emu.SetCreateFault(&tensorlakeemu.CreateFault{Delay: 300 * time.Millisecond, Times: 1})
	r.emu.SetKillFault(http.StatusInternalServerError, 0)
	rec, _, err := r.mgr.Create(cancelAfter(t, 50*time.Millisecond), lifecycle.CreateRequest{Provider: "tensorlake", ID: "sb-tf", Spec: bare()})
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

func TestHangingCreateCancelledPastTheWait(t *testing.T) {
	for _, twice := range []bool{false, true} {
		name := map[bool]string{false: "once", true: "twice"}[twice]
		t.Run(name, func(t *testing.T) {
			r := newRig(t, 200*time.Millisecond)
			hang := make(chan struct{})
			r.emu.SetCreateFault(&tensorlakeemu.CreateFault{Hang: hang, Times: 1})
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
			rec, _, err := mgr.Create(ctx, lifecycle.CreateRequest{Provider: "tensorlake", ID: "sb-hang", Spec: bare()})
			if took := time.Since(start); !errors.Is(err, context.Canceled) || took > 50*time.Millisecond+wait+time.Second {
				t.Fatalf("Create = %v after %s, want context.Canceled soon after the wait", err, took)
			}
			if got := r.state(t, rec.ID); got != agentenv.StateAbandoned && (!twice || got != agentenv.StateCreating) {
				// After a hard stop the ledger write itself may be cut short: creating is as good.
				t.Errorf("record %s, want abandoned", got)
			}
			close(hang) // Tensorlake makes the sandbox now
			if twice {
				// After a hard stop this process does no more cleanup and exits (its lease is no
				// longer renewed): the record stays for gc, which finds the sandbox by its name.
				mgr.Close()
				eventually(t, 5*time.Second, "the sandbox made", func() bool { return len(r.emu.Made()) > 0 })
				time.Sleep(150 * time.Millisecond) // the dead owner's lease runs out
				if rep, err := r.mgr.GC(t.Context(), lifecycle.GCOptions{}); err != nil || !rep.Clean() || len(rep.Actions) != 1 {
					t.Errorf("GC = %+v, %v; want the abandoned record collected", rep, err)
				}
			}
			// Once: this process kills the sandbox when the request ends.
			eventually(t, 5*time.Second, "a kill", func() bool { return r.emu.Calls("delete") > 0 })
			r.nothingRuns(t, 5*time.Second)
			eventually(t, 5*time.Second, "record gone", func() bool { return r.state(t, rec.ID) == agentenv.StateGone })
		})
	}
}

func TestCreateFinishingAsTheWaitGivesUp(t *testing.T) {
	// The wait gives up 50+150 ms after the start; the answer comes at about the same instant,
	// a little before, at, or a little after. Whichever side sees the other, the sandbox is killed.
	for _, delay := range []time.Duration{190, 200, 205, 210, 220} {
		t.Run((delay * time.Millisecond).String(), func(t *testing.T) {
			r := newRig(t, 150*time.Millisecond)
			r.emu.SetCreateFault(&tensorlakeemu.CreateFault{Delay: delay * time.Millisecond, Times: 1})
			rec, _, err := r.mgr.Create(cancelAfter(t, 50*time.Millisecond), lifecycle.CreateRequest{Provider: "tensorlake", ID: "sb-race", Spec: bare()})
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("Create = %v, want context.Canceled", err)
			}
			eventually(t, 5*time.Second, "a kill", func() bool { return r.emu.Calls("delete") > 0 })
			r.nothingRuns(t, 5*time.Second)
			eventually(t, 5*time.Second, "record gone", func() bool { return r.state(t, rec.ID) == agentenv.StateGone })
		})
	}
}

func TestRefusedCreateFallsThroughTheChain(t *testing.T) {
	for _, tt := range []struct {
		name, next string
		fault      tensorlakeemu.CreateFault
	}{
		{"429 to the fake", "spare", tensorlakeemu.CreateFault{Status: http.StatusTooManyRequests, Message: "rate limit exceeded"}},
		{"no capacity to another tensorlake", "tl2", tensorlakeemu.CreateFault{Status: http.StatusServiceUnavailable, Message: "no capacity", Times: 1}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, time.Second)
			r.emu.SetCreateFault(&tt.fault)
			rec, sb, err := r.mgr.CreateChain(t.Context(), []string{"tensorlake", tt.next}, lifecycle.CreateRequest{ID: "sb-chain", Spec: bare()})
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
	emu := emulator(t)
	p := newProvider(t, emu, tensorlake.Config{}, nil)
	emu.SetCreateFault(&tensorlakeemu.CreateFault{Status: http.StatusServiceUnavailable, Message: "no capacity"})
	if _, err := p.Create(t.Context(), spec("sb-503")); !errors.Is(err, agentenv.ErrUnavailable) {
		t.Errorf("Create refused for capacity = %v, want ErrUnavailable", err)
	}
}

func TestFinishedSandboxCountsAsGoneInTeardown(t *testing.T) {
	r := newRig(t, time.Second)
	rec, sb, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "tensorlake", ID: "sb-dead", Spec: bare()})
	if err != nil {
		t.Fatal(err)
	}
	r.emu.Expire(sb.ID)
	resp, err := http.Get(sb.Endpoints["8080"] + "/")
	if err == nil {
		resp.Body.Close()
	}
	if err != nil || resp.StatusCode != http.StatusBadGateway {
		t.Errorf("GET a finished sandbox's port = %v, %v; want 502 (refused)", resp, err)
	}
	rc, err := r.mgr.TeardownIDs(t.Context(), rec.ID)
	if err != nil || !rc.Clean() || rc.Items[0].Outcome != agentenv.OutcomeAlreadyGone {
		t.Errorf("teardown = %+v, %v; want clean, already gone", rc, err)
	}
	if _, err := r.p.Get(t.Context(), sb.ID); !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("Get of a finished sandbox = %v, want ErrGone", err)
	}
}

// rawCreate posts a create as a process would, through the emulator's Lost fault: Tensorlake
// makes the sandbox, the process never learns its id (it was killed before the answer).
func rawCreate(t *testing.T, emu *tensorlakeemu.Server, record string) {
	t.Helper()
	labels, _ := json.Marshal(map[string]string{agentenv.LabelRecord: record,
		agentenv.LabelExpires: time.Now().Add(time.Hour).UTC().Format(time.RFC3339)})
	body, _ := json.Marshal(map[string]any{"name": record, "timeout_secs": 3600,
		"resources":  map[string]any{"cpus": 1, "memory_mb": 1024},
		"entrypoint": []string{"/bin/sh", "-c", `exec "$@"`, "agentenv.labels=" + string(labels), "sleep", "infinity"}})
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, emu.URL()+"/sandboxes", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+apiKey)
	req.Header.Set("Content-Type", "application/json")
	emu.SetCreateFault(&tensorlakeemu.CreateFault{Lost: true, Times: 1})
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Fatalf("create answered %s, want the answer lost", resp.Status)
	}
}

func TestKilledProcessMidCreateIsReclaimedByGC(t *testing.T) {
	r := newRig(t, time.Second)
	dead := agentenv.Owner{Host: "elsewhere", PID: 1, Start: 1}
	now := time.Now().UTC()
	rec := agentenv.Record{ID: "sb-orphan", Kind: agentenv.KindSandbox, Provider: "tensorlake", State: agentenv.StateCreating,
		Owner: dead, LeaseUntil: now.Add(-time.Minute), Expires: now.Add(time.Hour), Created: now.Add(-time.Minute),
		Labels: map[string]string{agentenv.LabelRecord: "sb-orphan"}}
	if err := r.led.Put(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	rawCreate(t, r.emu, "sb-orphan")
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

func TestLostCreateAnswerIsReclaimedByTheCreator(t *testing.T) {
	r := newRig(t, time.Second)
	r.emu.SetCreateFault(&tensorlakeemu.CreateFault{Lost: true, Times: 1})
	rec, _, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "tensorlake", ID: "sb-lost", Spec: bare()})
	if err == nil {
		t.Fatal("Create with a lost answer succeeded")
	}
	if got := r.state(t, rec.ID); got != agentenv.StateGone {
		t.Errorf("record %s, want gone", got)
	}
	r.nothingRuns(t, time.Second)
}
