package task_test

import (
	"path/filepath"
	"slices"
	"testing"

	"github.com/agentenv/agentenv/task"
)

// TestImages: a task's images are those its deploy_sandbox steps name as they are, each once:
// not a built one, not one filled in when the step runs.
func TestImages(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "task.yaml")
	writeFile(t, path, `name: images
steps:
  - {id: a, type: deploy_sandbox, provider: fake, image: "debian:bookworm"}
  - {id: b, type: deploy_sandbox, provider: fake, image: "debian:bookworm"}
  - {id: c, type: deploy_sandbox, provider: fake, image: "ghcr.io/team/tool@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
  - {id: d, type: deploy_sandbox, provider: fake, image: "${steps.a.outputs.image}"}
`)
	tk, err := task.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"debian:bookworm", "ghcr.io/team/tool@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"}
	if got := tk.Images(); !slices.Equal(got, want) {
		t.Errorf("Images = %v, want %v", got, want)
	}
}
