//go:build integration

package main_test

import (
	"testing"
	"time"

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

// TestEnvDeploySmolVMWithoutAServerFallsToDocker: with no smolvm server where smol_vm looks by
// default (provider.smol_vm.url empty, the socket under an empty XDG_RUNTIME_DIR), `env deploy
// --provider smol_vm,docker` creates nothing on smol_vm and deploys on docker.
func TestEnvDeploySmolVMWithoutAServerFallsToDocker(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.env = append(c.env, "XDG_RUNTIME_DIR="+t.TempDir())
	c.withoutKeyFallsToDocker(t, "smol_vm", "AGENTENV_PROVIDER_SMOL_VM_URL")
}

// smolvmCLI is a CLI pointed at a smolvm emulator whose machines with no image are DinD VMs
// holding this checkout's runtime image. The test fails if a machine is left at its end.
func smolvmCLI(t *testing.T) (*cli, *smolvmemu.Server) {
	t.Helper()
	return dindCLI(t, func(vms emuvm.Backend) (*smolvmemu.Server, []string) {
		emu := smolvmemu.Start()
		emu.SetVMBackend(vms)
		return emu, []string{"AGENTENV_PROVIDER_SMOL_VM_URL=" + emu.URL()}
	})
}
