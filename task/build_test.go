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

// deploy_sandbox's build builds the image once (the second episode reuses it), runs the
// sandbox from it with its limits, and says so in its outputs.
func TestDeploySandboxBuild(t *testing.T) {
	r := newRig(t, nil)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "environment"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "environment", "Dockerfile"), "FROM debian:bookworm-slim\nARG V\nRUN echo $V\n")
	path := filepath.Join(dir, "task.yaml")
	writeFile(t, path, `name: built
steps:
  - id: box
    type: deploy_sandbox
    provider: fake
    build: {context: environment, args: {V: "1"}}
    cpus: 0.5
    memory_mb: 256
    build_timeout_sec: 60
`)
	tk, err := task.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	r.runner.ImageMap = map[string]string{"debian:bookworm-slim": "agentenv-debian:bookworm"}
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{K: 2})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	var images []string
	built := 0
	for _, ep := range sum.Episodes {
		out := ep.Steps[0].Outputs
		if ep.Steps[0].Status != agentenv.StepPassed || out["image"] == "" {
			t.Fatalf("episode step %+v, want passed with an image", ep.Steps[0])
		}
		images = append(images, out["image"])
		if out["built"] == "true" {
			built++
		}
	}
	if built != 1 || images[0] != images[1] || r.fake.Calls("create_image") != 1 {
		t.Errorf("images %v, %d episodes built, %d builds; want one build of one image", images, built, r.fake.Calls("create_image"))
	}
	recs, err := r.ledger.List(t.Context(), agentenv.Filter{States: []agentenv.State{agentenv.StateLive}})
	if err != nil || len(recs) != 1 || recs[0].Role != agentenv.RoleBuild {
		t.Fatalf("live records after the run: %+v, %v; want the built image only", recs, err)
	}
	if _, err := r.runner.Manager.Teardown(t.Context(), recs); err != nil {
		t.Fatal(err)
	}
	r.assertClean(t)
}

func TestDeploySandboxBuildRefused(t *testing.T) {
	for _, c := range []struct{ name, step, want string }{
		{"image and build", `{id: b, type: deploy_sandbox, image: x, build: {context: .}}`, "set image or build, not both"},
		{"no context", `{id: b, type: deploy_sandbox, build: {dockerfile: D}}`, "context"},
		{"negative cpus", `{id: b, type: deploy_sandbox, image: x, cpus: -1}`, "cpus"},
		{"negative memory", `{id: b, type: deploy_sandbox, image: x, memory_mb: -1}`, "memory_mb"},
		{"timeout without build", `{id: b, type: deploy_sandbox, image: x, build_timeout_sec: 5}`, "only with build"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := task.Parse("t.yaml", []byte("steps:\n- "+c.step+"\n"))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Parse = %v, want an error containing %q", err, c.want)
			}
		})
	}
	// A context outside the task's folder is refused before anything runs.
	r := newRig(t, nil)
	dir := t.TempDir()
	path := filepath.Join(dir, "task.yaml")
	writeFile(t, path, "steps:\n  - {id: b, type: deploy_sandbox, provider: fake, build: {context: ../..}}\n")
	tk, err := task.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.runner.Run(t.Context(), tk, task.RunOptions{}); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "build.context") {
		t.Errorf("Run with a context outside = %v, want ErrInvalid naming build.context", err)
	}
	r.assertClean(t)
}
