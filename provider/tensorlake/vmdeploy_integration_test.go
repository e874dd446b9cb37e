//go:build integration

package tensorlake_test

import (
	"testing"

	"github.com/agentenv/agentenv/deploy/deploytest"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/provider/tensorlake"
	"github.com/agentenv/agentenv/provider/tensorlake/tensorlakeemu"
)

// vmImage is the Docker-capable sandbox image the emulator backs with DinD VMs.
const vmImage = "agentenv-docker"

// vmKit is tensorlake on its emulator for deploytest's VM-mode kits: every sandbox of the VM
// image is a DinD VM.
var vmKit = deploytest.VMKit{
	Name: "tensorlake", Short: "tl", TestLabel: "agentenv.test.tlvm",
	Start: func(t *testing.T, vms emuvm.Backend) deploytest.VMCloud {
		emu := tensorlakeemu.Start(apiKey)
		emu.StartDelay = 0
		emu.SetVMBackend(vms, vmImage)
		p, err := tensorlake.New(tensorlake.Config{APIKey: apiKey, APIURL: emu.URL(), ProxyURL: emu.ProxyURL, PortURL: emu.PortURL, VMImage: vmImage, Config: cloudapi.Config{Rate: 1000}}, nil)
		if err != nil {
			emu.Close()
			t.Fatal(err)
		}
		return deploytest.VMCloud{
			Provider: p, Emulator: emu, VMErrors: emu.VMErrors, PortURL: emu.URL() + "/port/",
			Labels: func(id string) map[string]string {
				sb, _ := emu.Sandbox(id)
				return sb.Labels
			},
		}
	},
}

// TestVMModeDeployOfNotes deploys examples/notes in VM mode on tensorlake against the emulator,
// each sandbox of the VM image a DinD VM, calls it, tears it down, and cancels it at each of
// deploytest.VMEvents; each leaves nothing (deploytest.VMModeOfNotes).
func TestVMModeDeployOfNotes(t *testing.T) {
	deploytest.VMModeOfNotes(t, vmKit)
}
