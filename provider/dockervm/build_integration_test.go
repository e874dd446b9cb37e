//go:build integration

package dockervm_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/task"
)

// TestDeploySandboxBuildInVM runs a task whose deploy_sandbox builds its image from a
// Dockerfile on docker_vm: the build runs inside the sandbox's own VM (its base loaded from
// the host engine), the sandbox runs the built image, a command step reads the file the build
// wrote, and after the run nothing the manager made is left on the host engine (the build's
// images and containers were in the VM's engine, gone with it).
func TestDeploySandboxBuildInVM(t *testing.T) {
	cli := dockertest.Require(t)
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"docker_vm": newProvider(t)}})
	if err != nil {
		t.Fatal(err)
	}
	dockertest.CheckNoLeftovers(t, cli, map[string]string{agentenv.LabelOwner: mgr.Owner().String()})

	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "environment"), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, text string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("environment/Dockerfile", "FROM debian:bookworm-slim\nARG WORD\nRUN echo $WORD >/built\n")
	write("task.yaml", `name: build-in-vm
steps:
  - id: box
    type: deploy_sandbox
    provider: docker_vm
    build: {context: environment, args: {WORD: built}}
    command: [sleep, infinity]
    build_timeout_sec: 300
  - {id: read, type: command_succeeds, sandbox: box, command: [cat, /built], stdout_contains: built}
`)
	tk, err := task.Load(filepath.Join(dir, "task.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	runner := &task.Runner{Manager: mgr, Ledger: led, Workdir: t.TempDir(), DrainTimeout: 30 * time.Second,
		ImageMap: map[string]string{"debian:bookworm-slim": "agentenv-debian:bookworm"}}
	start := time.Now()
	sum, err := runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	t.Logf("run took %s", time.Since(start).Round(time.Millisecond))
	ep := sum.Episodes[0]
	for _, st := range ep.Steps {
		t.Logf("step %s: %s %s %v", st.ID, st.Status, st.Error, st.Outputs)
	}
	box := ep.Steps[0]
	if box.Status != agentenv.StepPassed || box.Outputs["built"] != "true" || box.Outputs["image"] == "" {
		t.Fatalf("deploy_sandbox step %+v, want passed with the image built in its vm", box)
	}
	if ep.Score == nil || *ep.Score != 1 || ep.Steps[1].Status != agentenv.StepPassed {
		t.Errorf("outcome %s, score %v, error %q; want the command step to read /built", ep.Outcome, ep.Score, ep.Error)
	}
	recs, err := led.List(t.Context(), agentenv.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.State != agentenv.StateGone || r.Kind != agentenv.KindSandbox {
			t.Errorf("record %s: %s %s, want only the sandbox, gone", r.ID, r.Kind, r.State)
		}
	}
}
