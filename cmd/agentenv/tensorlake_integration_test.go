//go:build integration

package main_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv/internal/dockertest"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/provider/tensorlake/tensorlakeemu"
)

// tlVMImage is the Docker-capable sandbox image the emulator backs with DinD VMs.
const tlVMImage = "agentenv-docker"

// TestEnvDeployOnTensorlakeThroughTheCLI deploys an env in VM mode on tensorlake through the
// CLI, with the configuration keys and environment a user sets pointing the provider at the
// emulator (this machine reaches no Tensorlake), calls the gateway and tears it down.
func TestEnvDeployOnTensorlakeThroughTheCLI(t *testing.T) {
	t.Parallel()
	c, emu := tensorlakeCLI(t)
	c.deployCallTeardown(t, "tensorlake", "vm", c.kvStdioEnvFile(), "kv-stdio__get", emu.Running)
}

// TestEnvDeployOnTensorlakeSIGKILLThenGC: env deploy on tensorlake is killed at random moments,
// and gc, from the ledger and the listing by name, leaves nothing running.
func TestEnvDeployOnTensorlakeSIGKILLThenGC(t *testing.T) {
	t.Parallel()
	c, emu := tensorlakeCLI(t)
	c.killDeploysThenGC(t, "tensorlake", 4, 4*time.Second, emu.Running)
}

// TestEnvDeployTensorlakeWithoutCredentialsFallsToDocker: with no Tensorlake key, `env deploy
// --provider tensorlake,docker` creates nothing on tensorlake and deploys on docker.
func TestEnvDeployTensorlakeWithoutCredentialsFallsToDocker(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.env = append(c.env, "TENSORLAKE_API_KEY=")
	r := c.run(t.Context(), nil, "env", "deploy", c.kvEnvFile(), "--provider", "tensorlake,docker", "--json")
	if r.code != 0 {
		t.Fatalf("env deploy --provider tensorlake,docker: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var out struct{ ID, Provider, Mode string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.ID == "" {
		t.Fatalf("env deploy --json = %s (%v)", r.stdout, err)
	}
	if out.Provider != "docker" {
		t.Errorf("deployed on %q, want docker after tensorlake without a key", out.Provider)
	}
	if !strings.Contains(r.stderr, "failed=tensorlake next=docker") {
		t.Errorf("stderr does not say the chain moved on from tensorlake:\n%s", r.stderr)
	}
	ls := c.run(t.Context(), nil, "ledger", "ls", "--json")
	var recs []struct{ ID, Provider, State string }
	if err := json.Unmarshal([]byte(ls.stdout), &recs); err != nil {
		t.Fatalf("ledger ls --json: %v\n%s", err, ls.stdout)
	}
	for _, rec := range recs {
		if rec.Provider == "tensorlake" && rec.State != "gone" {
			t.Errorf("record %s on tensorlake is %s, want nothing made there", rec.ID, rec.State)
		}
	}
	if td := c.run(t.Context(), nil, "env", "teardown", out.ID); td.code != 0 {
		t.Errorf("env teardown: exit %d\n%s%s", td.code, td.stdout, td.stderr)
	}
}

// tensorlakeCLI is a CLI pointed at a Tensorlake emulator whose VM image's sandboxes are DinD VMs
// holding this checkout's runtime image. The test fails if the emulator runs a sandbox at its end.
func tensorlakeCLI(t *testing.T) (*cli, *tensorlakeemu.Server) {
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
	emu := tensorlakeemu.Start("tl-cli-key")
	emu.SetVMBackend(tensorlakeemu.DinD(host), tlVMImage)
	t.Cleanup(func() {
		if left := emu.Running(); len(left) != 0 {
			t.Errorf("the emulator still runs %v", left)
		}
		emu.Close()
	})
	c.env = append(c.env, "TENSORLAKE_API_KEY=tl-cli-key", "AGENTENV_PROVIDER_TENSORLAKE_API_URL="+emu.URL(),
		"AGENTENV_PROVIDER_TENSORLAKE_PROXY_URL="+emu.URL()+"/proxy/{id}",
		"AGENTENV_PROVIDER_TENSORLAKE_PORT_URL="+emu.URL()+"/port/{id}/{port}",
		"AGENTENV_PROVIDER_TENSORLAKE_VM_IMAGE="+tlVMImage)
	return c, emu
}
