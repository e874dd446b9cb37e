package eval

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentenv/agentenv/internal/yamlfile"
)

func TestFilesOfTheExampleEvals(t *testing.T) {
	ex, _ := filepath.Abs("../examples")
	for _, c := range []struct {
		eval string
		want []string
	}{
		{"hello-100.yaml", []string{"evals/hello-100.yaml", "hello/task.yaml"}},
		{"notes-32.yaml", []string{"evals/notes-32.yaml", "notes-task/task.yaml", "notes/env.yaml"}},
		{"sweep.yaml", []string{"evals/sweep.yaml", "hello/task.yaml", "notes-task/task.yaml", "notes/env.yaml"}},
	} {
		f, err := Load(filepath.Join("../examples/evals", c.eval))
		if err != nil {
			t.Fatal(err)
		}
		got, err := f.Files()
		if err != nil {
			t.Fatal(err)
		}
		var want []string
		for _, w := range c.want {
			want = append(want, filepath.Join(ex, w))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: Files() = %q, want %q", c.eval, got, want)
		}
	}
}

func TestFilesRefusesAnAbsoluteSeedsPath(t *testing.T) {
	dir := t.TempDir()
	seeds := filepath.Join(dir, "seeds.csv")
	if err := os.WriteFile(seeds, []byte("who\nada\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	task, _ := filepath.Abs("../examples/hello")
	data := "name: e\ntasks:\n  - task: " + task + "\n    seeds: seeds.csv\n"
	f, err := Parse(filepath.Join(dir, "eval.yaml"), []byte(data))
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.Files()
	var fe *yamlfile.Error
	if !errors.As(err, &fe) || fe.Line != 3 || fe.Path != "tasks[0].task" {
		t.Fatalf("Files() = %v, want line 3, tasks[0].task", err)
	}
}

func TestGroupKeepsItsBundle(t *testing.T) {
	g := Group{ID: "group-1", Name: "e", File: "/c/trees/sha256-ab/evals/e.yaml", Bundle: "127.0.0.1:5000/e:v1", BundleDigest: "sha256:ab"}
	d, err := g.doc()
	if err != nil {
		t.Fatal(err)
	}
	if d.Attrs[AttrBundle] != g.Bundle || d.Attrs[AttrBundleDigest] != g.BundleDigest {
		t.Fatalf("doc attrs = %v, want the bundle and its digest", d.Attrs)
	}
	back, err := FromDoc(d)
	if err != nil {
		t.Fatal(err)
	}
	if back.Bundle != g.Bundle || back.BundleDigest != g.BundleDigest {
		t.Fatalf("FromDoc = %+v, want the bundle back", back)
	}
	if a := g.episodeAttrs(1); a[AttrBundle] != g.Bundle || a[AttrBundleDigest] != g.BundleDigest || a[AttrGroupTask] != "1" {
		t.Fatalf("episodeAttrs = %v", a)
	}
	if a := (Group{ID: "g"}).episodeAttrs(0); len(a) != 2 {
		t.Fatalf("episodeAttrs of a local group = %v, want only the group and task", a)
	}
}
