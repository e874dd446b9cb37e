package eval

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/task"
)

// collectTask writes a file in a process sandbox, collects it as an artifact and checks it.
const collectTask = `name: collect
steps:
  - {id: sandbox, type: deploy_sandbox, provider: process}
  - {id: put, type: write_file, sandbox: sandbox, path: out/answer.txt, content: "42\n"}
  - {id: keep, type: collect_files, sandbox: sandbox, paths: [out/answer.txt]}
  - {id: check, type: file_contains, sandbox: sandbox, path: out/answer.txt, contains: "42"}
`

// TestSaveRestoreGroup saves a finished group (its documents and each run's folder) and
// restores it into another ledger and runs folder: the same episodes, scores and files, the
// documents' paths naming the new folder; saved twice it is the same bytes; restored twice it
// is left as it is; a different group of the same id, a running group and a shard merged away
// are refused.
func TestSaveRestoreGroup(t *testing.T) {
	r, other := newRig(t), newRig(t)
	ctx := t.Context()
	f, err := Load(r.write(t, "e.yaml", "name: two\ntasks:\n  - task: "+r.write(t, "collect.yaml", collectTask)+"\n    k: 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := r.runner.Run(ctx, f, Options{})
	if err != nil || res.Overall.Passed != 2 {
		t.Fatalf("Run = %v, %+v", err, summaryOf(res.Overall))
	}
	runsDir := filepath.Join(r.dir, "work", "runs")
	saved := t.TempDir()
	files, err := SaveGroup(ctx, r.ledger, res.Group.ID, runsDir, saved)
	if err != nil {
		t.Fatalf("SaveGroup = %v", err)
	}
	if len(files) != 1+2+2 { // group.json, two episodes, an artifact each
		t.Fatalf("saved %d files, want 5: %v", len(files), files)
	}
	again := t.TempDir()
	if _, err := SaveGroup(ctx, r.ledger, res.Group.ID, runsDir, again); err != nil {
		t.Fatal(err)
	}
	for _, p := range files {
		rel, _ := filepath.Rel(saved, p)
		a, _ := os.ReadFile(p)
		b, _ := os.ReadFile(filepath.Join(again, rel))
		if string(a) != string(b) {
			t.Errorf("%s differs between two saves", rel)
		}
		if strings.Contains(string(a), runsDir) {
			t.Errorf("%s names the saving machine's runs folder %s:\n%s", rel, runsDir, a)
		}
	}

	otherRuns := filepath.Join(other.dir, "state", "runs")
	g, already, err := RestoreGroup(ctx, other.ledger, saved, otherRuns, Origin{Ref: "reg/x:v1", Digest: "sha256:abc"})
	if err != nil || already || g.ID != res.Group.ID {
		t.Fatalf("RestoreGroup = %s, already %v, %v", g.ID, already, err)
	}
	got, err := Collect(ctx, other.ledger, g)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Lines) != len(res.Lines) || got.Overall.Passed != 2 {
		t.Fatalf("restored: %d lines, %+v; want %d", len(got.Lines), summaryOf(got.Overall), len(res.Lines))
	}
	for i, l := range got.Lines {
		w := res.Lines[i]
		if l.Run != w.Run || l.Outcome != w.Outcome || fmt.Sprint(*l.Score) != fmt.Sprint(*w.Score) {
			t.Errorf("slot %d: restored %+v, saved %+v", i, l, w)
		}
		doc, err := other.ledger.Runs().Get(ctx, l.Run)
		if err != nil {
			t.Fatal(err)
		}
		var arts []task.Artifact
		for _, s := range doc.Steps {
			arts = append(arts, task.Artifacts(s)...)
		}
		want := filepath.Join(otherRuns, l.Run, "artifacts", "keep", "out", "answer.txt")
		if len(arts) != 1 || arts[0].File != want {
			t.Fatalf("restored artifacts %+v, want one at %s", arts, want)
		}
		if data, err := os.ReadFile(want); err != nil || string(data) != "42\n" {
			t.Errorf("restored artifact holds %q, %v", data, err)
		}
	}
	if _, already, err := RestoreGroup(ctx, other.ledger, saved, otherRuns, Origin{Ref: "reg/x:v1", Digest: "sha256:abc"}); err != nil || !already {
		t.Errorf("second RestoreGroup: already %v, %v; want a no-op", already, err)
	}
	// Into the ledger it came from: the same group, nothing written.
	if _, already, err := RestoreGroup(ctx, r.ledger, saved, runsDir, Origin{Digest: "sha256:def"}); err != nil || !already {
		t.Errorf("RestoreGroup into its own ledger: already %v, %v; want a no-op", already, err)
	}

	// Another group with the same id: refused, nothing written.
	third := newRig(t)
	other2 := res.Group
	other2.Name, other2.Created = "another", time.Now()
	if err := (Store{third.ledger}).Put(ctx, other2); err != nil {
		t.Fatal(err)
	}
	if _, _, err := RestoreGroup(ctx, third.ledger, saved, t.TempDir(), Origin{Digest: "sha256:abc"}); !errors.Is(err, agentenv.ErrConflict) || !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("RestoreGroup over another group = %v, want a conflict", err)
	}
	if runs, _ := third.ledger.Runs().List(ctx, nil, 0); len(runs) != 1 {
		t.Errorf("a refused restore wrote %d documents", len(runs)-1)
	}

	// A running group (alive: this process owns it) and a merged shard are refused.
	running := res.Group
	running.ID, running.Status = "group-running", agentenv.RunRunning
	running.Owner, _ = lifecycle.CurrentOwner()
	merged := res.Group
	merged.ID, merged.MergedInto, merged.Shard = "group-shard", "group-m", Shard{I: 1, N: 2}
	for _, c := range []struct {
		g    Group
		want string
	}{{running, "is still running"}, {merged, "merged into group group-m"}} {
		if err := (Store{r.ledger}).Put(ctx, c.g); err != nil {
			t.Fatal(err)
		}
		if _, err := SaveGroup(ctx, r.ledger, c.g.ID, runsDir, t.TempDir()); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("SaveGroup(%s) = %v, want invalid with %q", c.g.ID, err, c.want)
		}
	}
	// From another state folder than the one that ran it: refused, naming what it would lose.
	if _, err := SaveGroup(ctx, r.ledger, res.Group.ID, t.TempDir(), t.TempDir()); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "is not in its run folder") {
		t.Errorf("SaveGroup from another runs folder = %v, want invalid naming the artifact", err)
	}
	if _, err := SaveGroup(ctx, r.ledger, "group-none", runsDir, t.TempDir()); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("SaveGroup of an unknown id = %v, want not found", err)
	}
	if _, _, err := RestoreGroup(ctx, other.ledger, t.TempDir(), otherRuns, Origin{}); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("RestoreGroup of an empty folder = %v, want invalid", err)
	}
}
