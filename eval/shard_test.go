package eval

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

func TestParseShard(t *testing.T) {
	for in, want := range map[string]Shard{"1/1": {1, 1}, "2/3": {2, 3}, " 3/3 ": {3, 3}} {
		if got, err := ParseShard(in); err != nil || got != want {
			t.Errorf("ParseShard(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "1", "0/3", "4/3", "-1/3", "1/0", "a/b", "1/3/4", "1/ 3x"} {
		if _, err := ParseShard(in); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("ParseShard(%q) = %v, want invalid", in, err)
		}
	}
}

// TestShardsDealEverySlotOnce: for every N, the N shards' slots are the group's, each once,
// and each shard's Slots counts its own.
func TestShardsDealEverySlotOnce(t *testing.T) {
	g := Group{Tasks: []GroupTask{{Task: "a", K: 3, Instances: 2}, {Task: "b", K: 2, Instances: 1}, {Task: "c", K: 1, Instances: 3}}}
	all := g.SlotKeys()
	if len(all) != 11 || g.Slots() != 11 {
		t.Fatalf("whole group: %d slots, Slots %d; want 11", len(all), g.Slots())
	}
	for n := 1; n <= 13; n++ {
		seen := map[SlotKey]int{}
		for i := 1; i <= n; i++ {
			s := g
			s.Shard = Shard{I: i, N: n}
			keys := s.SlotKeys()
			if s.Slots() != len(keys) {
				t.Errorf("shard %s: Slots %d, SlotKeys %d", s.Shard, s.Slots(), len(keys))
			}
			for _, k := range keys {
				seen[k]++
			}
		}
		for _, k := range all {
			if seen[k] != 1 {
				t.Errorf("N=%d: slot %s dealt %d times", n, k, seen[k])
			}
		}
		if len(seen) != len(all) {
			t.Errorf("N=%d: %d slots dealt, want %d", n, len(seen), len(all))
		}
	}
	// The dealing is slot number mod N, over the whole eval: shard 2/3 has numbers 1, 4, 7, 10.
	g.Shard = Shard{I: 2, N: 3}
	want := []SlotKey{{0, 0, 2}, {0, 1, 2}, {1, 0, 2}, {2, 2, 1}}
	if got := g.SlotKeys(); !reflect.DeepEqual(got, want) {
		t.Errorf("shard 2/3 = %v, want %v", got, want)
	}
}

func TestCheckShards(t *testing.T) {
	base := Group{Name: "e", File: "e.yaml", Digest: "sha256:aa", Status: agentenv.RunCompleted,
		Tasks: []GroupTask{{Task: "a", Digest: "sha256:t", K: 2, Instances: 3}}}
	shard := func(id string, i, n int, edit ...func(*Group)) Group {
		g := base
		g.ID, g.Shard = id, Shard{I: i, N: n}
		g.Tasks = append([]GroupTask(nil), base.Tasks...)
		for _, e := range edit {
			e(&g)
		}
		return g
	}
	if err := CheckShards([]Group{shard("g3", 3, 3), shard("g1", 1, 3), shard("g2", 2, 3)}, "m"); err != nil {
		t.Fatalf("complete shards: %v", err)
	}
	merged := func(g *Group) { g.MergedInto = "m" }
	if err := CheckShards([]Group{shard("g1", 1, 2, merged), shard("g2", 2, 2, merged)}, "m"); err != nil {
		t.Fatalf("shards merged into the same group (a second merge): %v", err)
	}
	cases := []struct {
		name   string
		groups []Group
		want   []string
	}{
		{"not a shard", []Group{shard("g1", 1, 2), {ID: "whole", Status: agentenv.RunCompleted}}, []string{"group whole is not a shard", "missing shards 2/2 of e"}},
		{"missing", []Group{shard("g2", 2, 4)}, []string{"missing shards 1/4, 3/4, 4/4 of e", "agentenv run e.yaml --shard I/N"}},
		{"twice", []Group{shard("g1", 1, 2), shard("g1b", 1, 2), shard("g2", 2, 2)}, []string{"shard 1/2 is given twice: groups g1 and g1b"}},
		{"other N", []Group{shard("g1", 1, 2), shard("g2", 2, 3)}, []string{"group g2 is shard 2/3, group g1 is of 2 shards"}},
		{"other eval", []Group{shard("g1", 1, 2), shard("g2", 2, 2, func(g *Group) { g.Digest = "sha256:bb" })}, []string{"group g2 is not of the eval group g1 ran: eval file digest sha256:bb, not sha256:aa"}},
		{"other task", []Group{shard("g1", 1, 2), shard("g2", 2, 2, func(g *Group) { g.Tasks[0].Digest = "sha256:u" })}, []string{"task 0 is a (sha256:u), not a (sha256:t)"}},
		{"other k", []Group{shard("g1", 1, 2), shard("g2", 2, 2, func(g *Group) { g.Tasks[0].K = 4 })}, []string{"task a has k 4 × 3 instances, not k 2 × 3"}},
		{"other overrides", []Group{shard("g1", 1, 2), shard("g2", 2, 2, func(g *Group) { g.Tasks[0].Overrides.Provider = "docker" })}, []string{"task a has overrides"}},
		{"cancelled", []Group{shard("g1", 1, 2, func(g *Group) { g.Status, g.Error = agentenv.RunCancelled, "cancelled" }), shard("g2", 2, 2)},
			[]string{"group g1 (shard 1/2) did not finish: cancelled (cancelled); finish it with agentenv run --resume g1"}},
		{"interrupted", []Group{shard("g1", 1, 2, func(g *Group) { g.Status = agentenv.RunRunning }), shard("g2", 2, 2)}, []string{"did not finish: interrupted"}},
		{"merged elsewhere", []Group{shard("g1", 1, 2, func(g *Group) { g.MergedInto = "other" }), shard("g2", 2, 2)}, []string{"group g1 (shard 1/2) was merged into group other already"}},
	}
	for _, c := range cases {
		err := CheckShards(c.groups, "m")
		if !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("%s: %v, want invalid", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not say %q", c.name, err, w)
			}
		}
	}
}

// summaryOf is s without what differs between two runs of the same episodes: run ids, times.
func summaryOf(s task.Summary) task.Summary {
	s.Episodes, s.Elapsed = nil, 0
	return s
}

// TestMergeEqualsUnsharded runs an eval (a task failing on one seed row, and hello) unsharded
// and as 3 shards, two in one ledger and one in another, merges them: the merged group has
// every slot's outcome and the unsharded summary, per task and overall; a second merge writes
// nothing; a merged shard still shows its own episodes and cannot be resumed.
func TestMergeEqualsUnsharded(t *testing.T) {
	r, other := newRig(t), newRig(t)
	ctx := t.Context()
	r.write(t, "greet.yaml", placeholderTask)
	r.write(t, "who.csv", "who\nada\nbob\nada\n")
	f, err := Load(r.write(t, "e.yaml", "name: sharded\nconcurrency: 3\ntasks:\n  - task: greet.yaml\n    k: 2\n    seeds: who.csv\n  - task: "+helloTask+"\n    k: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	whole, err := r.runner.Run(ctx, f, Options{})
	if err != nil || whole.Overall.Passed != 6 || whole.Overall.ScoredBelow != 2 {
		t.Fatalf("unsharded = %v, %+v", err, summaryOf(whole.Overall))
	}
	var srcs []Source
	for i := 1; i <= 3; i++ {
		rr := r
		if i == 3 {
			rr = other
		}
		res, err := rr.runner.Run(ctx, f, Options{Shard: Shard{I: i, N: 3}})
		if err != nil {
			t.Fatalf("shard %d: %v", i, err)
		}
		if res.Group.Shard != (Shard{i, 3}) || len(res.Lines) != res.Group.Slots() || res.NotRun != 0 {
			t.Fatalf("shard %d: group %+v, %d lines, %d not run", i, res.Group, len(res.Lines), res.NotRun)
		}
		srcs = append(srcs, Source{Group: res.Group, Ledger: rr.ledger})
	}
	m, already, err := Merge(ctx, r.ledger, srcs)
	if err != nil || already {
		t.Fatalf("Merge = %v, already %v", err, already)
	}
	got, err := Collect(ctx, r.ledger, m)
	if err != nil {
		t.Fatal(err)
	}
	if got.NotRun != 0 || len(got.Lines) != len(whole.Lines) || m.Status != agentenv.RunCompleted {
		t.Fatalf("merged: %d not run, %d lines, status %s", got.NotRun, len(got.Lines), m.Status)
	}
	for i, l := range got.Lines {
		w := whole.Lines[i]
		if l.Task != w.Task || l.Instance != w.Instance || l.Attempt != w.Attempt || l.Outcome != w.Outcome || fmt.Sprint(*l.Score) != fmt.Sprint(*w.Score) {
			t.Errorf("slot %d: merged %+v, unsharded %+v", i, l, w)
		}
	}
	if !reflect.DeepEqual(summaryOf(got.Overall), summaryOf(whole.Overall)) {
		t.Errorf("merged overall %+v\nunsharded %+v", summaryOf(got.Overall), summaryOf(whole.Overall))
	}
	for i := range whole.Tasks {
		if !reflect.DeepEqual(summaryOf(got.Tasks[i]), summaryOf(whole.Tasks[i])) {
			t.Errorf("task %d: merged %+v\nunsharded %+v", i, summaryOf(got.Tasks[i]), summaryOf(whole.Tasks[i]))
		}
	}

	again, already, err := Merge(ctx, r.ledger, srcs)
	if err != nil || !already || again.ID != m.ID {
		t.Errorf("second Merge = %s, already %v, %v; want %s, already", again.ID, already, err, m.ID)
	}
	for i, s := range srcs {
		sg, err := Store{r.ledger}.Get(ctx, s.Group.ID)
		if err != nil || sg.MergedInto != m.ID {
			t.Fatalf("shard %d after merge: %+v, %v", i+1, sg, err)
		}
		sr, err := Collect(ctx, r.ledger, sg)
		if err != nil || sr.NotRun != 0 || len(sr.Lines) != sg.Slots() {
			t.Errorf("shard %d after merge: %v, %d not run of %d", i+1, err, sr.NotRun, len(sr.Lines))
		}
		if _, err := r.runner.Resume(ctx, sg.ID, Options{}); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("Resume of merged shard %d = %v, want invalid", i+1, err)
		}
	}
	for i := range srcs[:2] {
		srcs[i].Group, _ = Store{r.ledger}.Get(ctx, srcs[i].Group.ID)
	}
	if _, _, err := Merge(ctx, r.ledger, srcs[:2]); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "merged into group "+m.ID) {
		t.Errorf("Merge of two merged shards = %v, want invalid", err)
	}

	// The merged group, saved (as runs push does) and restored into a third ledger (as runs
	// pull does), has the unsharded summary there too.
	saved := t.TempDir()
	if _, err := SaveGroup(ctx, r.ledger, m.ID, filepath.Join(r.dir, "work", "runs"), saved); err != nil {
		t.Fatalf("SaveGroup of the merged group = %v", err)
	}
	third := newRig(t)
	rg, _, err := RestoreGroup(ctx, third.ledger, saved, filepath.Join(third.dir, "state", "runs"), Origin{Digest: "sha256:abc"})
	if err != nil || rg.ID != m.ID {
		t.Fatalf("RestoreGroup of the merged group = %s, %v", rg.ID, err)
	}
	restored, err := Collect(ctx, third.ledger, rg)
	if err != nil || restored.NotRun != 0 || len(restored.Lines) != len(whole.Lines) ||
		!reflect.DeepEqual(summaryOf(restored.Overall), summaryOf(whole.Overall)) {
		t.Errorf("restored merged group: %v, %d not run, %d lines, %+v; want %+v", err, restored.NotRun, len(restored.Lines),
			summaryOf(restored.Overall), summaryOf(whole.Overall))
	}
	r.assertClean(t)
	other.assertClean(t)
}

// TestResumeOfAShardRunsOnlyItsSlots: a shard whose episodes were cut short resumes its own
// slots, never another shard's.
func TestResumeOfAShardRunsOnlyItsSlots(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	f, err := Load(r.write(t, "e.yaml", "name: x\ntasks:\n  - task: "+helloTask+"\n    k: 5\n"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.runner.Run(ctx, f, Options{Shard: Shard{I: 2, N: 2}})
	if err != nil || len(res.Lines) != 2 || res.Lines[0].Attempt != 2 || res.Lines[1].Attempt != 4 {
		t.Fatalf("shard 2/2 = %v, %+v", err, res.Lines)
	}
	doc, _ := r.ledger.Runs().Get(ctx, res.Lines[1].Run)
	doc.Status, doc.Attrs["outcome"] = agentenv.RunCancelled, string(task.OutcomeCancelled)
	if err := r.ledger.Runs().Put(ctx, doc); err != nil {
		t.Fatal(err)
	}
	g := res.Group
	g.Status, g.Ended = agentenv.RunCancelled, time.Now()
	if err := (Store{r.ledger}).Put(ctx, g); err != nil {
		t.Fatal(err)
	}
	again, err := r.runner.Resume(ctx, g.ID, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if again.Group.Shard != (Shard{2, 2}) || again.Replaced != 1 || again.Overall.Passed != 2 || len(again.Lines) != 2 {
		t.Fatalf("resumed shard: %+v, replaced %d, %+v", again.Group.Shard, again.Replaced, again.Overall)
	}
	runs, _ := Store{r.ledger}.Episodes(ctx, g)
	for _, run := range runs {
		if k, _ := slotOf(run); k.Attempt%2 != 0 {
			t.Errorf("run %s fills %s, not shard 2/2's", run.ID, k)
		}
	}
	r.assertClean(t)
}

// TestShardPassedLeavesOutTasksItHasNoSlotOf: a shard passes on the slots dealt to it, and one
// dealt none (more shards than slots) passes; a whole group with an empty task does not.
func TestShardPassedLeavesOutTasksItHasNoSlotOf(t *testing.T) {
	passed := task.Summarize("a", 1, []task.Episode{{Outcome: task.OutcomePassed}})
	failed := task.Summarize("b", 1, []task.Episode{{Outcome: task.OutcomeFailed}})
	empty := task.Summarize("c", 1, nil)
	shard := Group{Shard: Shard{I: 2, N: 3}}
	for _, c := range []struct {
		name string
		res  Result
		want bool
	}{
		{"shard, one task without slots", Result{Group: shard, Tasks: []task.Summary{passed, empty}}, true},
		{"shard, a failed episode", Result{Group: shard, Tasks: []task.Summary{failed, empty}}, false},
		{"shard dealt no slot", Result{Group: shard, Tasks: []task.Summary{empty, empty}}, true},
		{"whole group, an empty task", Result{Tasks: []task.Summary{passed, empty}}, false},
		{"whole group, passed", Result{Tasks: []task.Summary{passed}}, true},
		{"no tasks", Result{Group: shard}, false},
	} {
		if got := c.res.Passed(); got != c.want {
			t.Errorf("%s: Passed = %v, want %v", c.name, got, c.want)
		}
	}
}
