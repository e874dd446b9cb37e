package task_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

// A task that reads a file outside its folder is refused before anything is created, naming
// the file, line and field; one whose path comes from a seed is refused when the step runs.
func TestTaskFilesStayInsideTheTaskFolder(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "inside.txt"), "ok")
	if err := os.Symlink("/etc/passwd", filepath.Join(dir, "link.txt")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, from, want string }{
		{"parent", "../../etc/passwd", `from: "../../etc/passwd" is outside the task's folder`},
		{"absolute", "/etc/passwd", `from: "/etc/passwd" is outside the task's folder`},
		{"symlink", "link.txt", `from: "link.txt" is outside the task's folder`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			path := filepath.Join(dir, "task.yaml")
			writeFile(t, path, `name: leak
steps:
  - id: box
    type: deploy_sandbox
    provider: process
  - id: copy
    type: write_file
    sandbox: box
    path: stolen
    from: `+tc.from+`
`)
			tk, err := task.Load(path)
			if err != nil {
				t.Fatal(err)
			}
			_, err = r.runner.Run(t.Context(), tk, task.RunOptions{})
			if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "task.yaml:10: step copy") {
				t.Fatalf("Run = %v, want ErrInvalid naming task.yaml:10, step copy and %q", err, tc.want)
			}
			recs, _ := r.ledger.List(t.Context(), agentenv.Filter{})
			if len(recs) != 0 {
				t.Errorf("%d records made, want nothing deployed", len(recs))
			}
		})
	}
	t.Run("inside", func(t *testing.T) {
		r := newRig(t, nil)
		path := filepath.Join(dir, "ok.yaml")
		writeFile(t, path, "name: fine\nsteps:\n  - {id: box, type: deploy_sandbox, provider: process}\n  - {id: copy, type: write_file, sandbox: box, path: got, from: inside.txt}\n")
		tk, err := task.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.runner.Run(t.Context(), tk, task.RunOptions{}); err != nil {
			t.Fatalf("Run = %v", err)
		}
		r.assertClean(t)
	})
}

// A run given a provider cannot be switched to the process provider by its task file.
func TestTaskCannotSwitchToTheProcessProvider(t *testing.T) {
	r := newRig(t, nil)
	_, err := r.runner.Run(t.Context(), task.Hello(), task.RunOptions{Provider: "fake"})
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "step sandbox: provider") {
		t.Fatalf("Run(hello, provider fake) = %v, want ErrInvalid naming step sandbox's provider", err)
	}
	if recs, _ := r.ledger.List(t.Context(), agentenv.Filter{}); len(recs) != 0 {
		t.Errorf("%d records made, want nothing", len(recs))
	}
	if _, err := r.runner.Run(t.Context(), task.Hello(), task.RunOptions{Provider: "process"}); err != nil {
		t.Errorf("Run(hello, provider process) = %v", err)
	}
	r.assertClean(t)
}
