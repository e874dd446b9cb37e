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
	"github.com/agentenv/agentenv/provider/tenki/tenkiemu"
)

// tenkiVMImage is the Tenki registry image the emulator backs with DinD VMs.
const tenkiVMImage = "agentenv/docker:1"

// TestEnvDeployOnTenkiThroughTheCLI deploys an env in VM mode on tenki through the CLI, with the
// variables Tenki's SDKs read (TENKI_AUTH_TOKEN, TENKI_API_ENDPOINT) pointing the provider at the
// emulator (this machine reaches no Tenki), calls the gateway and tears it down.
func TestEnvDeployOnTenkiThroughTheCLI(t *testing.T) {
	t.Parallel()
	c, emu := tenkiCLI(t)
	c.deployCallTeardown(t, "tenki", "vm", c.kvStdioEnvFile(), "kv-stdio__get", emu.Running)
}

// TestEnvDeployOnTenkiSIGKILLThenGC: env deploy on tenki is killed at random moments, and gc,
// from the ledger and the listing by name and metadata, leaves nothing running.
func TestEnvDeployOnTenkiSIGKILLThenGC(t *testing.T) {
	t.Parallel()
	c, emu := tenkiCLI(t)
	c.killDeploysThenGC(t, "tenki", 4, 4*time.Second, emu.Running)
}

// TestEnvDeployTenkiWithoutCredentialsFallsToDocker: with neither TENKI_AUTH_TOKEN nor
// TENKI_API_KEY, `env deploy --provider tenki,docker` creates nothing on tenki and deploys on
// docker.
func TestEnvDeployTenkiWithoutCredentialsFallsToDocker(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.env = append(c.env, "TENKI_AUTH_TOKEN=", "TENKI_API_KEY=")
	r := c.run(t.Context(), nil, "env", "deploy", c.kvEnvFile(), "--provider", "tenki,docker", "--json")
	if r.code != 0 {
		t.Fatalf("env deploy --provider tenki,docker: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var out struct{ ID, Provider string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.ID == "" {
		t.Fatalf("env deploy --json = %s (%v)", r.stdout, err)
	}
	if out.Provider != "docker" || !strings.Contains(r.stderr, "failed=tenki next=docker") {
		t.Errorf("deployed on %q, stderr:\n%s\nwant docker after the chain moved on from tenki", out.Provider, r.stderr)
	}
	ls := c.run(t.Context(), nil, "ledger", "ls", "--json")
	var recs []struct{ ID, Provider, State string }
	if err := json.Unmarshal([]byte(ls.stdout), &recs); err != nil {
		t.Fatalf("ledger ls --json: %v\n%s", err, ls.stdout)
	}
	for _, rec := range recs {
		if rec.Provider == "tenki" && rec.State != "gone" {
			t.Errorf("record %s on tenki is %s, want nothing made there", rec.ID, rec.State)
		}
	}
	if td := c.run(t.Context(), nil, "env", "teardown", out.ID); td.code != 0 {
		t.Errorf("env teardown: exit %d\n%s%s", td.code, td.stdout, td.stderr)
	}
	// tenki alone fails, naming the keys and variables to set.
	alone := c.run(t.Context(), nil, "env", "deploy", c.kvEnvFile(), "--provider", "tenki")
	if alone.code == 0 || !strings.Contains(alone.stderr, "provider.tenki.token") || !strings.Contains(alone.stderr, "TENKI_AUTH_TOKEN") || !strings.Contains(alone.stderr, "TENKI_API_KEY") {
		t.Errorf("env deploy --provider tenki without a key: exit %d, stderr:\n%s\nwant a failure naming provider.tenki.token, TENKI_AUTH_TOKEN and TENKI_API_KEY", alone.code, alone.stderr)
	}
}

// tenkiCLI is a CLI pointed at a Tenki emulator whose VM image's sessions are DinD VMs holding
// this checkout's runtime image. The test fails if the emulator runs a session at its end.
func tenkiCLI(t *testing.T) (*cli, *tenkiemu.Server) {
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
	emu := tenkiemu.Start("tk_cli_key")
	emu.SetVMBackend(tenkiemu.DinD(host), tenkiVMImage)
	t.Cleanup(func() {
		if left := emu.Running(); len(left) != 0 {
			t.Errorf("the emulator still runs %v", left)
		}
		emu.Close()
	})
	c.env = append(c.env, "TENKI_AUTH_TOKEN=tk_cli_key", "TENKI_API_ENDPOINT="+emu.URL(),
		"AGENTENV_PROVIDER_TENKI_VM_IMAGE="+tenkiVMImage)
	return c, emu
}
