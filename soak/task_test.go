package soak

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentenv/agentenv/spec"
	"github.com/agentenv/agentenv/task"
)

// TestTaskMatchesExamples keeps the built-in task equal to examples/notes-task and its env.
func TestTaskMatchesExamples(t *testing.T) {
	for embedded, file := range map[string]string{
		notesTask: "../examples/notes-task/task.yaml",
		notesEnv:  "../examples/notes/env.yaml",
	} {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		if string(b) != embedded {
			t.Errorf("the copy of %s in package soak differs from it: copy it again", file)
		}
	}
}

func TestWriteTask(t *testing.T) {
	for _, image := range []string{"", "agentenv-runtime:abc"} {
		dir := t.TempDir()
		taskDir, err := WriteTask(dir, image)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := task.LoadPath(taskDir); err != nil {
			t.Errorf("WriteTask(%q): task does not load: %v", image, err)
		}
		env, err := spec.Load(filepath.Join(dir, "notes", "env.yaml"))
		if err != nil {
			t.Fatalf("WriteTask(%q): env does not load: %v", image, err)
		}
		want := image
		if want == "" {
			want = spec.DefaultImage
		}
		env.Defaults()
		got := []string{env.Servers[0].Image, env.Gateway.Image, env.ServiceDB.DBMCP.Image}
		if strings.Join(got, ",") != strings.Join([]string{want, want, want}, ",") {
			t.Errorf("WriteTask(%q): images %v, want all %s", image, got, want)
		}
	}
}
