//go:build integration

package main_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv/internal/dockertest"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/provider/smolvm/smolvmemu"
)

// TestEnvDeployOnSmolVMThroughTheCLI deploys an env in VM mode on smol_vm through the CLI, with
// the configuration key a user sets pointing the provider at the emulator (smolvm cannot run
// here), calls the gateway and tears it down.
func TestEnvDeployOnSmolVMThroughTheCLI(t *testing.T) {
	t.Parallel()
	c, emu := smolvmCLI(t)
	c.deployCallTeardown(t, "smol_vm", "vm", c.kvStdioEnvFile(), "kv-stdio__get", emu.Running)
}

// TestEnvDeployOnSmolVMSIGKILLThenGC: env deploy on smol_vm is killed at random moments, and
// gc, from the ledger and the listing by name, leaves no machine.
func TestEnvDeployOnSmolVMSIGKILLThenGC(t *testing.T) {
	t.Parallel()
	c, emu := smolvmCLI(t)
	c.killDeploysThenGC(t, "smol_vm", 4, 4*time.Second, emu.Running)
}

// TestEnvDeploySmolVMWithoutAServerFallsToDocker: with no smolvm server at the configured
// socket, `env deploy --provider smol_vm,docker` creates nothing on smol_vm and deploys on
// docker.
func TestEnvDeploySmolVMWithoutAServerFallsToDocker(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.env = append(c.env, "AGENTENV_PROVIDER_SMOL_VM_URL=unix://"+filepath.Join(t.TempDir(), "smolvm.sock"))
	r := c.run(t.Context(), nil, "env", "deploy", c.kvEnvFile(), "--provider", "smol_vm,docker", "--json")
	if r.code != 0 {
		t.Fatalf("env deploy --provider smol_vm,docker: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var out struct{ ID, Provider, Mode string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.ID == "" {
		t.Fatalf("env deploy --json = %s (%v)", r.stdout, err)
	}
	if out.Provider != "docker" {
		t.Errorf("deployed on %q, want docker after smol_vm without a server", out.Provider)
	}
	if !strings.Contains(r.stderr, "failed=smol_vm next=docker") {
		t.Errorf("stderr does not say the chain moved on from smol_vm:\n%s", r.stderr)
	}
	ls := c.run(t.Context(), nil, "ledger", "ls", "--json")
	var recs []struct{ ID, Provider, State string }
	if err := json.Unmarshal([]byte(ls.stdout), &recs); err != nil {
		t.Fatalf("ledger ls --json: %v\n%s", err, ls.stdout)
	}
	for _, rec := range recs {
		if rec.Provider == "smol_vm" && rec.State != "gone" {
			t.Errorf("record %s on smol_vm is %s, want nothing made there", rec.ID, rec.State)
		}
	}
	if td := c.run(t.Context(), nil, "env", "teardown", out.ID); td.code != 0 {
		t.Errorf("env teardown: exit %d\n%s%s", td.code, td.stdout, td.stderr)
	}
}

// smolvmCLI is a CLI pointed at a smolvm emulator whose machines with no image are DinD VMs
// holding this checkout's runtime image. The test fails if a machine is left at its end.
func smolvmCLI(t *testing.T) (*cli, *smolvmemu.Server) {
	t.Helper()
	c := newCLI(t)
	runtime, _ := dockertest.RuntimeImage(t)
	host, err := emuvm.New(emuvm.Config{Labels: map[string]string{"agentenv-test": c.tag}, InMemory: true, Preload: []string{runtime}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := host.Close(context.Background()); err != nil {
			t.Errorf("close the vm host: %v", err)
		}
	})
	emu := smolvmemu.Start()
	emu.SetVMBackend(emuvm.DinD(host))
	t.Cleanup(func() {
		if left := emu.Running(); len(left) != 0 {
			t.Errorf("the emulator still holds machines %v", left)
		}
		emu.Close()
	})
	c.env = append(c.env, "AGENTENV_PROVIDER_SMOL_VM_URL="+emu.URL())
	return c, emu
}
