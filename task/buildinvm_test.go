package task_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
	"github.com/agentenv/agentenv/task"
)

// deploy_sandbox's build on a provider with no image builds of its own that builds in its VM
// goes into the sandbox's create (no image record, no BuildImage), and its outputs name the
// image built there; on a provider with neither, the step fails (BuildImage's ErrInvalid) and
// makes nothing.
func TestDeploySandboxBuildInVM(t *testing.T) {
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	vm := fake.New("vm", agentenv.AbilityImageBuild).BuildInVM()
	plain := fake.New("plain", agentenv.AbilityImageBuild)
	m, err := lifecycle.New(lifecycle.Config{Ledger: led, ReclaimWait: 2 * time.Second,
		Providers: map[string]agentenv.Provider{"vm": vm, "plain": plain}})
	if err != nil {
		t.Fatal(err)
	}
	runner := &task.Runner{Manager: m, Ledger: led, Workdir: t.TempDir(), DrainTimeout: 5 * time.Second}
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "environment"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "environment", "Dockerfile"), "FROM debian:bookworm-slim\nRUN echo built >/built\n")
	load := func(provider string) *task.Task {
		path := filepath.Join(dir, provider+".yaml")
		writeFile(t, path, `name: built
steps:
  - {id: box, type: deploy_sandbox, provider: `+provider+`, build: {context: environment}, build_timeout_sec: 60}
`)
		tk, err := task.Load(path)
		if err != nil {
			t.Fatal(err)
		}
		return tk
	}

	sum, err := runner.Run(t.Context(), load("vm"), task.RunOptions{})
	if err != nil {
		t.Fatalf("Run on vm = %v", err)
	}
	step := sum.Episodes[0].Steps[0]
	if step.Status != agentenv.StepPassed || step.Outputs["built"] != "true" || !strings.Contains(step.Outputs["image"], step.Outputs["record"]) {
		t.Errorf("step %+v, want passed, built, with the image of its own VM", step)
	}
	recs, err := led.List(t.Context(), agentenv.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.Kind != agentenv.KindSandbox || r.State != agentenv.StateGone {
			t.Errorf("record %s: %s %s, want only the sandbox, gone", r.ID, r.Kind, r.State)
		}
		if r.Attrs[agentenv.AttrCreateTimeout] != (lifecycle.DefaultCreateTimeout + time.Minute).String() {
			t.Errorf("record %s: create timeout %q, want the create's and the build's", r.ID, r.Attrs[agentenv.AttrCreateTimeout])
		}
	}
	if vm.Calls("create_image") != 0 || len(vm.Images()) != 0 {
		t.Errorf("vm: %d image builds, images left %v; want none", vm.Calls("create_image"), vm.Images())
	}

	sum, err = runner.Run(t.Context(), load("plain"), task.RunOptions{})
	if err != nil {
		t.Fatalf("Run on plain = %v", err)
	}
	step = sum.Episodes[0].Steps[0]
	if step.Status == agentenv.StepPassed || !strings.Contains(step.Error, "builds no images") || plain.Calls("create") != 0 {
		t.Errorf("step on a provider with neither: %+v, %d creates; want failed saying it builds no images, nothing made", step, plain.Calls("create"))
	}
}
