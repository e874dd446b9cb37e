//go:build integration

package smolvm_test

import (
	"context"
	"testing"

	"github.com/agentenv/agentenv/deploy/deploytest"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/provider/smolvm"
	"github.com/agentenv/agentenv/provider/smolvm/smolvmemu"
)

// vmKit is smol_vm on its emulator for deploytest's VM-mode kits: every machine with no image
// is a DinD VM, whose ports the emulator publishes on this host's ports over TCP.
var vmKit = deploytest.VMKit{
	Name: "smol_vm", Short: "smol", TestLabel: "agentenv.test.smolvm",
	Start: func(t *testing.T, vms emuvm.Backend) deploytest.VMCloud {
		emu := smolvmemu.Start()
		emu.SetVMBackend(vms)
		p, err := smolvm.New(smolvm.Config{URL: emu.URL()}, nil)
		if err != nil {
			emu.Close()
			t.Fatal(err)
		}
		return deploytest.VMCloud{
			Provider: p, Emulator: emu, VMErrors: emu.VMErrors,
			// smolvm publishes a machine's ports on this host's, not through a proxy.
			PortURL: "http://127.0.0.1:",
			// A machine's labels are in the machine: read as the provider reads them.
			Labels: func(id string) map[string]string {
				sb, _ := p.Get(context.Background(), id)
				return sb.Labels
			},
		}
	},
}

// TestVMModeDeployOfNotes deploys examples/notes in VM mode on smol_vm against the emulator, the
// VM a DinD machine, calls it through the gateway (the service DB and the gateway reached on
// host ports forwarded to the VM's slots), runs commands in the stack, tears it down, and
// cancels it at each of deploytest.VMEvents; each leaves nothing (deploytest.VMModeOfNotes).
func TestVMModeDeployOfNotes(t *testing.T) {
	deploytest.VMModeOfNotes(t, vmKit)
}
