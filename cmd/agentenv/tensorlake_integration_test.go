//go:build integration

package main_test

import (
	"testing"
	"time"

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
	newCLI(t).withoutKeyFallsToDocker(t, "tensorlake", "TENSORLAKE_API_KEY")
}

// tensorlakeCLI is a CLI pointed at a Tensorlake emulator whose VM image's sandboxes are DinD VMs
// holding this checkout's runtime image. The test fails if the emulator runs a sandbox at its end.
func tensorlakeCLI(t *testing.T) (*cli, *tensorlakeemu.Server) {
	t.Helper()
	return dindCLI(t, func(vms emuvm.Backend) (*tensorlakeemu.Server, []string) {
		emu := tensorlakeemu.Start("tl-cli-key")
		emu.SetVMBackend(vms, tlVMImage)
		return emu, []string{"TENSORLAKE_API_KEY=tl-cli-key", "AGENTENV_PROVIDER_TENSORLAKE_API_URL=" + emu.URL(),
			"AGENTENV_PROVIDER_TENSORLAKE_PROXY_URL=" + emu.URL() + "/proxy/{id}",
			"AGENTENV_PROVIDER_TENSORLAKE_PORT_URL=" + emu.URL() + "/port/{id}/{port}",
			"AGENTENV_PROVIDER_TENSORLAKE_VM_IMAGE=" + tlVMImage}
	})
}
