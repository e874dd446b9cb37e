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
