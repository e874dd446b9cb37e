//go:build integration

package dockervm_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/provider/providertest"
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

// A build whose base image the host engine lacks is ErrInvalid naming it, and one cut short by
// its caller's deadline (wherever it lands: the VM's start, the base's load or the build's
// RUN) returns that error; neither leaves anything on the host engine.
func TestCreateBuildRefusedOrCancelledLeavesNothing(t *testing.T) {
	cli := dockertest.Require(t)
	id := providertest.NewID()
	dockertest.CheckNoLeftovers(t, cli, map[string]string{testLabel: id})
	p := newProvider(t)
	labels := map[string]string{agentenv.LabelRecord: id, testLabel: id}
	build := func(dockerfile string) *agentenv.Build {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
			t.Fatal(err)
		}
		return &agentenv.Build{Context: dir}
	}
	_, err := p.Create(t.Context(), agentenv.SandboxSpec{Name: id, Labels: labels, Build: build("FROM agentenv-no-such-base:x\n")})
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "agentenv-no-such-base:x") {
		t.Errorf("Create of a build from a missing base = %v, want ErrInvalid naming it", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 40*time.Second)
	defer cancel()
	_, err = p.Create(ctx, agentenv.SandboxSpec{Name: id, Labels: labels, Command: []string{"sleep", "infinity"},
		Build: build("FROM agentenv-debian:bookworm\nRUN sleep 600\n")})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Create of a build cut short = %v, want the deadline's error", err)
	}
	if left, err := p.List(t.Context(), map[string]string{agentenv.LabelRecord: id}); err != nil || len(left) > 0 {
		t.Errorf("List after the cut-short create = %v, %v; want nothing", left, err)
	}
}
