package eval

import (
	"slices"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/lifecycle"
)

// TestSettleEndsWhatADeadRunnerLeftRunning: a group whose owner died with an episode still
// running ends cancelled, the episode too; a group of a live owner and one of another host
// are left running; the settled group resumes as before.
func TestSettleEndsWhatADeadRunnerLeftRunning(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	f, err := Load(r.write(t, "e.yaml", "name: x\ntasks:\n  - task: "+helloTask+"\n    k: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	st := Store{r.ledger}
	me, _ := lifecycle.CurrentOwner()
	var ids []string
	for _, owner := range []agentenv.Owner{
		{Host: me.Host, PID: 1, Start: -1}, // no process has this start time: dead
		me,                                 // this test: alive
		{Host: "elsewhere", PID: 1},        // another host: cannot be checked, so alive
	} {
		res, err := r.runner.Run(ctx, f, Options{})
		if err != nil {
			t.Fatal(err)
		}
		doc, err := r.ledger.Runs().Get(ctx, res.Lines[0].Run)
		if err != nil {
			t.Fatal(err)
		}
		doc.Status = agentenv.RunRunning
		if err := r.ledger.Runs().Put(ctx, doc); err != nil {
			t.Fatal(err)
		}
		g := res.Group
		g.Status, g.Owner = agentenv.RunRunning, owner
		if err := st.Put(ctx, g); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, g.ID, doc.ID)
	}
	marked, err := Settle(ctx, r.ledger, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(marked)
	want := []string{ids[0], ids[1]}
	slices.Sort(want)
	if !slices.Equal(marked, want) {
		t.Errorf("Settle marked %v, want the dead runner's group and its running episode %v", marked, want)
	}
	for i, id := range ids {
		doc, err := r.ledger.Runs().Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		wantStatus := agentenv.RunRunning
		if i < 2 {
			wantStatus = agentenv.RunCancelled
		}
		if doc.Status != wantStatus || (i < 2 && (doc.Error != interruptedMsg || doc.Ended.IsZero())) {
			t.Errorf("%s: %s %q (ended %v), want %s", id, doc.Status, doc.Error, doc.Ended, wantStatus)
		}
	}
	res, err := r.runner.Resume(ctx, ids[0], Options{})
	if err != nil || res.Overall.Passed != 2 || res.Replaced != 1 {
		t.Errorf("resume of the settled group = %+v (replaced %d), %v; want 2 passed, 1 replaced", res.Overall, res.Replaced, err)
	}
	r.assertClean(t)
}
