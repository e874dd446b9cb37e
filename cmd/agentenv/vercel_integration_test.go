//go:build integration

package main_test

import (
	"testing"
	"time"

	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/provider/vercel/vercelemu"
)

// vcVMImage is the Docker-capable image whose sandboxes the emulator backs with DinD VMs.
const vcVMImage = "agentenv-docker"

// TestEnvDeployOnVercelThroughTheCLI deploys an env in VM mode on vercel through the CLI, with
// the configuration keys and environment a user sets pointing the provider at the emulator (this
// machine reaches no Vercel), calls the gateway and tears it down.
func TestEnvDeployOnVercelThroughTheCLI(t *testing.T) {
	t.Parallel()
	c, emu := vercelCLI(t)
	c.deployCallTeardown(t, "vercel", "vm", c.kvStdioEnvFile(), "kv-stdio__get", emu.Running)
}

// TestEnvDeployOnVercelSIGKILLThenGC: env deploy on vercel is killed at random moments, and gc,
// from the ledger and the sandboxes found by name and tag, leaves nothing running.
func TestEnvDeployOnVercelSIGKILLThenGC(t *testing.T) {
	t.Parallel()
	c, emu := vercelCLI(t)
	c.killDeploysThenGC(t, "vercel", 4, 4*time.Second, emu.Running)
}

// TestEnvDeployVercelWithoutCredentialsFallsToDocker: with no Vercel token, `env deploy
// --provider vercel,docker` creates nothing on vercel and deploys on docker.
func TestEnvDeployVercelWithoutCredentialsFallsToDocker(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.env = append(c.env, "VERCEL_OIDC_TOKEN=")
	c.withoutKeyFallsToDocker(t, "vercel", "VERCEL_TOKEN")
}

// vercelCLI is a CLI pointed at a Vercel emulator whose VM image's sandboxes are DinD VMs holding
// this checkout's runtime image. The test fails if the emulator runs a sandbox at its end.
func vercelCLI(t *testing.T) (*cli, *vercelemu.Server) {
	t.Helper()
	return dindCLI(t, func(vms emuvm.Backend) (*vercelemu.Server, []string) {
		emu := vercelemu.Start("vc-cli-token", "team_cli", "prj_cli")
		emu.SetVMBackend(vms, vcVMImage)
		return emu, []string{"VERCEL_TOKEN=vc-cli-token", "VERCEL_TEAM_ID=team_cli", "VERCEL_PROJECT_ID=prj_cli",
			"AGENTENV_PROVIDER_VERCEL_API_URL=" + emu.URL(), "AGENTENV_PROVIDER_VERCEL_VM_IMAGE=" + vcVMImage}
	})
}
