package eval

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/task"
)

// loopback is a Remote whose "workers" are goroutines of this process calling the worker side
// of the seam (Plan, RunSlot, TeardownSlot, Finish) as package temporal's activities do. It is
// a fake for these unit tests: the real remote, on a Temporal server, is tested in package
// temporal's integration tier.
type loopback struct {
	worker    *Runner
	mu        sync.Mutex
	done      map[string]chan error
	cancelled []string // the groups Cancel was asked for
}

func (l *loopback) Name() string { return "loopback" }

func (l *loopback) Submit(ctx context.Context, g Group) error {
	ch := make(chan error, 1)
	l.mu.Lock()
	l.done[g.ID] = ch
	l.mu.Unlock()
	go func() {
		ctx := context.WithoutCancel(ctx)
		_, slots, err := l.worker.Plan(ctx, g.ID)
		if err != nil {
			ch <- err
			return
		}
		var wg sync.WaitGroup
		for _, k := range slots {
			wg.Go(func() {
				_, _ = l.worker.RunSlot(ctx, g.ID, k)
				_, _ = l.worker.TeardownSlot(ctx, g.ID, k)
			})
		}
		wg.Wait()
		ch <- l.worker.Finish(ctx, g.ID, "")
	}()
	return nil
}

func (l *loopback) Wait(ctx context.Context, id string) error {
	l.mu.Lock()
	ch := l.done[id]
	l.mu.Unlock()
	select {
	case err := <-ch:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Cancel records id and marks the group cancelled, as a Temporal group's workflow does once
// its episodes are down (these workers run none on their own: see TestCancel).
func (l *loopback) Cancel(ctx context.Context, id string) error {
	l.mu.Lock()
	l.cancelled = append(l.cancelled, id)
	l.mu.Unlock()
	st := Store{Ledger: l.worker.ledger()}
	g, err := st.Get(ctx, id)
	if err != nil {
		return err
	}
	g.Status = agentenv.RunCancelled
	return st.Put(ctx, g)
}

// TestRemoteRunsAGroupAsLocal: a group handed to a Remote runs every slot through the worker
// side and ends with the summary a local run gives, its document naming the remote and no
// owner process; the submitter's progress is read from the ledger.
func TestRemoteRunsAGroupAsLocal(t *testing.T) {
	r := newRig(t)
	f, err := Load(r.write(t, "e.yaml", "name: x\nconcurrency: 2\ntasks:\n  - task: "+helloTask+"\n    k: 3\n  - task: "+helloTask+"\n    k: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	local, err := r.runner.Run(t.Context(), f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	worker := *r.runner
	sub := *r.runner
	sub.Remote = &loopback{worker: &worker, done: map[string]chan error{}}
	var last Status
	sub.Progress = func(s Status) { last = s }
	res, err := sub.Run(t.Context(), f, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Overall.Passed != 5 || res.Group.Status != agentenv.RunCompleted || res.Group.Runner != "loopback" || !res.Group.Owner.IsZero() {
		t.Errorf("remote run = %+v, group %+v", res.Overall, res.Group)
	}
	if !equalMap(res.Overall.PassAt, local.Overall.PassAt) || res.Overall.MeanScore != local.Overall.MeanScore {
		t.Errorf("remote summary %+v, local %+v", res.Overall, local.Overall)
	}
	if last.Done != 5 || last.Passed != 5 || last.Total != 5 {
		t.Errorf("last progress = %+v, want 5/5 done and passed", last)
	}
	if _, err := sub.Run(t.Context(), f, Options{Keep: true}); err == nil || !strings.Contains(err.Error(), "--keep") {
		t.Errorf("Run with Keep on a remote = %v, want refused", err)
	}
	r.assertClean(t)
}

// TestRunSlotReplacesALostEpisode: an episode left running by a lost worker (its sandbox still
// up) is torn down by the next worker to take its slot, with a receipt, marked replaced, and
// recorded as the first attempt of the slot's new episode, which alone fills the slot; a slot
// whose episode finished is not run again.
func TestRunSlotReplacesALostEpisode(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	f, err := Load(r.write(t, "e.yaml", "name: x\nconcurrency: 1\ntasks:\n  - task: "+helloTask+"\n    k: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	// Kept episodes hold their sandboxes as a worker killed mid-episode leaves them.
	first, err := r.runner.Run(ctx, f, Options{Keep: true})
	if err != nil || first.Overall.Passed != 2 {
		t.Fatalf("Run = %v, %+v", err, first.Overall)
	}
	lost := first.Lines[0].Run
	doc, err := r.ledger.Runs().Get(ctx, lost)
	if err != nil {
		t.Fatal(err)
	}
	doc.Status = agentenv.RunRunning
	delete(doc.Attrs, "outcome")
	if err := r.ledger.Runs().Put(ctx, doc); err != nil {
		t.Fatal(err)
	}
	if _, err := r.runner.Tasks.Teardown(ctx, first.Lines[1].Run); err != nil { // the finished one's keep ends
		t.Fatal(err)
	}
	g := first.Group
	g.Runner, g.Status = "loopback", agentenv.RunRunning
	if err := (Store{r.ledger}).Put(ctx, g); err != nil {
		t.Fatal(err)
	}

	_, pending, err := r.runner.Plan(ctx, g.ID)
	if err != nil || len(pending) != 1 || pending[0] != (SlotKey{0, 0, 1}) {
		t.Fatalf("Plan = %v, %v; want the lost slot alone", pending, err)
	}
	res, err := r.runner.RunSlot(ctx, g.ID, pending[0])
	if err != nil || res.Outcome != task.OutcomePassed || res.Run == lost {
		t.Fatalf("RunSlot = %+v, %v", res, err)
	}
	old, _ := r.ledger.Runs().Get(ctx, lost)
	if old.Attrs[AttrResumedBy] != g.ID || task.OutcomeOf(old) != task.OutcomeError || old.Receipt == nil || !old.Receipt.Clean() || len(old.Receipt.Items) == 0 {
		t.Errorf("lost run after RunSlot: status %s attrs %v receipt %+v", old.Status, old.Attrs, old.Receipt)
	}
	doc, _ = r.ledger.Runs().Get(ctx, res.Run)
	if len(doc.Attempts) != 1 || doc.Attempts[0].Error != workerLostMsg || doc.Attempts[0].Receipt == nil {
		t.Errorf("new run's attempts = %+v, want the lost one with its receipt", doc.Attempts)
	}
	again, err := r.runner.RunSlot(ctx, g.ID, SlotKey{0, 0, 2})
	if err != nil || again.Run != first.Lines[1].Run {
		t.Errorf("RunSlot of a finished slot = %+v, %v; want its episode %s, not run again", again, err, first.Lines[1].Run)
	}
	if err := r.runner.Finish(ctx, g.ID, ""); err != nil {
		t.Fatal(err)
	}
	col, err := Collect(ctx, r.ledger, g)
	if err != nil || col.Overall.Passed != 2 || col.Replaced != 1 {
		t.Errorf("Collect = %+v (replaced %d), %v", col.Overall, col.Replaced, err)
	}
	r.assertClean(t)
}

// TestCancel: a group on a Remote's workers is cancelled through that Remote and returned as
// they left it; an ended group is left as it is; a group run by a process (alive or not), on
// another remote or with none configured, and an unknown group are refused without a cancel.
func TestCancel(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	st := Store{Ledger: r.runner.ledger()}
	put := func(g Group) string {
		t.Helper()
		g.Name, g.Created = "x", time.Now().UTC()
		if err := st.Put(ctx, g); err != nil {
			t.Fatal(err)
		}
		return g.ID
	}
	me, err := lifecycle.CurrentOwner()
	if err != nil {
		t.Fatal(err)
	}
	onRemote := put(Group{ID: "group-remote", Status: agentenv.RunRunning, Runner: "loopback"})
	ended := put(Group{ID: "group-ended", Status: agentenv.RunCompleted, Runner: "loopback"})
	alive := put(Group{ID: "group-alive", Status: agentenv.RunRunning, Owner: me})
	dead := put(Group{ID: "group-dead", Status: agentenv.RunRunning, Owner: agentenv.Owner{Host: me.Host, PID: 1 << 30, Start: 1}})
	elsewhere := put(Group{ID: "group-elsewhere", Status: agentenv.RunRunning, Runner: "temporal"})

	worker := *r.runner
	rem := &loopback{worker: &worker, done: map[string]chan error{}}
	sub := *r.runner
	sub.Remote = rem
	if g, was, err := sub.Cancel(ctx, onRemote); err != nil || was || g.Status != agentenv.RunCancelled {
		t.Errorf("Cancel(%s) = %s, ended %v, %v; want it cancelled by its remote", onRemote, g.Status, was, err)
	}
	if g, was, err := sub.Cancel(ctx, ended); err != nil || !was || g.Status != agentenv.RunCompleted {
		t.Errorf("Cancel(%s) = %s, ended %v, %v; want it left completed", ended, g.Status, was, err)
	}
	for _, c := range []struct {
		runner *Runner
		id     string
		kind   error
		want   string
	}{
		{&sub, alive, agentenv.ErrConflict, "Ctrl-C"},
		{&sub, dead, agentenv.ErrConflict, "agentenv gc"},
		{&sub, elsewhere, agentenv.ErrInvalid, "runs on temporal workers, not loopback"},
		{r.runner, elsewhere, agentenv.ErrInvalid, "give --runner temporal"},
		{&sub, "group-nope", agentenv.ErrInvalid, "no group group-nope"},
	} {
		if _, _, err := c.runner.Cancel(ctx, c.id); !errors.Is(err, c.kind) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Cancel(%s) = %v, want %v saying %q", c.id, err, c.kind, c.want)
		}
	}
	if len(rem.cancelled) != 1 || rem.cancelled[0] != onRemote {
		t.Errorf("the remote was asked to cancel %v, want only %s", rem.cancelled, onRemote)
	}
}
