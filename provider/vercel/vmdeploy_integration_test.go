//go:build integration

package vercel_test

import (
	"testing"

	"github.com/agentenv/agentenv/deploy/deploytest"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/provider/vercel"
	"github.com/agentenv/agentenv/provider/vercel/vercelemu"
)

// vmImage is the Docker-capable image whose sandboxes the emulator backs with DinD VMs.
const vmImage = "agentenv-docker"

// vmKit is vercel on its emulator for deploytest's VM-mode kits: every sandbox of the VM image
// is a DinD VM, and its routes proxy to the VM's ports.
var vmKit = deploytest.VMKit{
	Name: "vercel", Short: "vc", TestLabel: "agentenv.test.vercelvm",
	Start: func(t *testing.T, vms emuvm.Backend) deploytest.VMCloud {
		emu := vercelemu.Start(token, team, project)
		emu.StartDelay = 0
		emu.SetVMBackend(vms, vmImage)
		p, err := vercel.New(vercel.Config{Token: token, TeamID: team, ProjectID: project, APIURL: emu.URL(), VMImage: vmImage, Config: cloudapi.Config{Rate: 1000}}, nil)
		if err != nil {
			emu.Close()
			t.Fatal(err)
		}
		return deploytest.VMCloud{
			Provider: p, Emulator: emu, VMErrors: emu.VMErrors, PortURL: "http://127.0.0.1:", // each route is a loopback server of its own
			Labels: func(name string) map[string]string {
				sb, _ := emu.Sandbox(name)
				return sb.Tags // agentenv.deployment is a tag of its own
			},
		}
	},
}

// TestVMModeDeployOfNotes deploys examples/notes in VM mode on vercel against the emulator, each
// sandbox of the VM image a DinD VM, calls it, tears it down, and cancels it at each of
// deploytest.VMEvents; each leaves nothing (deploytest.VMModeOfNotes).
func TestVMModeDeployOfNotes(t *testing.T) {
	deploytest.VMModeOfNotes(t, vmKit)
}
