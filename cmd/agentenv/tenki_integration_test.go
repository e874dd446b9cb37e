//go:build integration

package main_test

import (
	"strings"
	"testing"
	"time"

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
// docker, and tenki alone fails naming what to set.
func TestEnvDeployTenkiWithoutCredentialsFallsToDocker(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.env = append(c.env, "TENKI_API_KEY=")
	c.withoutKeyFallsToDocker(t, "tenki", "TENKI_AUTH_TOKEN")
	alone := c.run(t.Context(), nil, "env", "deploy", c.kvEnvFile(), "--provider", "tenki")
	if alone.code == 0 || !strings.Contains(alone.stderr, "provider.tenki.token") || !strings.Contains(alone.stderr, "TENKI_AUTH_TOKEN") || !strings.Contains(alone.stderr, "TENKI_API_KEY") {
		t.Errorf("env deploy --provider tenki without a key: exit %d, stderr:\n%s\nwant a failure naming provider.tenki.token, TENKI_AUTH_TOKEN and TENKI_API_KEY", alone.code, alone.stderr)
	}
}

// tenkiCLI is a CLI pointed at a Tenki emulator whose VM image's sessions are DinD VMs holding
// this checkout's runtime image. The test fails if the emulator runs a session at its end.
func tenkiCLI(t *testing.T) (*cli, *tenkiemu.Server) {
	t.Helper()
	return dindCLI(t, func(vms emuvm.Backend) (*tenkiemu.Server, []string) {
		emu := tenkiemu.Start("tk_cli_key")
		emu.SetVMBackend(vms, tenkiVMImage)
		return emu, []string{"TENKI_AUTH_TOKEN=tk_cli_key", "TENKI_API_ENDPOINT=" + emu.URL(),
			"AGENTENV_PROVIDER_TENKI_VM_IMAGE=" + tenkiVMImage}
	})
}
