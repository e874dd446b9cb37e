package task

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func absPath(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func TestFilesOfExamples(t *testing.T) {
	for _, c := range []struct {
		task string
		want []string
	}{
		{"../examples/notes-task/task.yaml", []string{"../examples/notes-task/task.yaml", "../examples/notes/env.yaml"}},
		{"../examples/notes-task/harness-task.yaml", []string{"../examples/notes-task/harness-task.yaml", "../examples/notes/env.yaml", "../examples/notes-task/harness-agent.js"}},
		{"../examples/graded-task/task.yaml", []string{"../examples/graded-task/task.yaml", "../examples/graded-task/verify.sh", "../examples/graded-task/rubric.md"}},
		{"../examples/shop-task/task.yaml", []string{"../examples/shop-task/task.yaml", "../examples/shop/browser.yaml", "../examples/shop/schema.sql", "../examples/shop/seed.sql"}},
		{"../examples/hello/task.yaml", []string{"../examples/hello/task.yaml"}},
	} {
		tk, err := LoadPath(c.task)
		if err != nil {
			t.Fatal(err)
		}
		got, err := tk.Files()
		if err != nil {
			t.Fatalf("%s: %v", c.task, err)
		}
		var want []string
		for _, w := range c.want {
			want = append(want, absPath(t, w))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: Files() = %q, want %q", c.task, got, want)
		}
	}
}

func TestFilesWalksFoldersAndRefusesWhatCannotMove(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"ctx/Dockerfile", "ctx/app/main.sh", "p.md"} {
		p := filepath.Join(dir, f)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	good := `name: t
steps:
  - id: box
    type: deploy_sandbox
    build: {context: ctx}
    command: [sleep, "60"]
  - id: up
    type: upload
    sandbox: box
    from: ctx/app
    to: /app
`
	tk, err := Parse(filepath.Join(dir, "task.yaml"), []byte(good))
	if err != nil {
		t.Fatal(err)
	}
	got, err := tk.Files()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{filepath.Join(dir, "task.yaml"), filepath.Join(dir, "ctx/Dockerfile"), filepath.Join(dir, "ctx/app/main.sh")}
	if !slices.Equal(got, want) {
		t.Fatalf("Files() = %q, want %q", got, want)
	}

	bad := `name: t
steps:
  - id: env
    type: deploy_env
    file: /srv/envs/notes.yaml
  - id: box
    type: deploy_sandbox
    image: alpine
    command: [sleep, "60"]
  - id: w
    type: write_file
    sandbox: box
    path: /tmp/x
    from: <which>.md
`
	tk, err = Parse(filepath.Join(dir, "task.yaml"), []byte(bad))
	if err != nil {
		t.Fatal(err)
	}
	_, err = tk.Files()
	var fe *Error
	if !errors.As(err, &fe) || fe.Line != 5 || fe.Path != "steps[0].file" || !strings.Contains(err.Error(), "absolute path") {
		t.Fatalf("Files() = %v, want line 5, steps[0].file, absolute path", err)
	}
	if !strings.Contains(err.Error(), "steps[2].from") || !strings.Contains(err.Error(), "filled in when the step runs") {
		t.Fatalf("Files() = %v, want steps[2].from filled in when the step runs", err)
	}
	if _, err := Hello().Files(); err == nil {
		t.Fatal("Hello().Files() = nil error, want the built-in task refused")
	}
}
