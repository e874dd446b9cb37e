//go:build integration

package tenki_test

import (
	"testing"

	"github.com/agentenv/agentenv/deploy/deploytest"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/provider/tenki"
	"github.com/agentenv/agentenv/provider/tenki/tenkiemu"
)

// vmImage is the Tenki registry image the emulator backs with DinD VMs.
const vmImage = "agentenv/docker:1"

// vmKit is tenki on its emulator for deploytest's VM-mode kits: every session of the VM image
// is a DinD VM, and each exposed port a preview URL of its own on loopback.
var vmKit = deploytest.VMKit{
	Name: "tenki", Short: "tk", TestLabel: "agentenv.test.tenkivm",
	Start: func(t *testing.T, vms emuvm.Backend) deploytest.VMCloud {
		emu := tenkiemu.Start(apiKey)
		emu.StartDelay = 0
		emu.SetVMBackend(vms, vmImage)
		p, err := tenki.New(tenki.Config{Token: apiKey, APIURL: emu.URL(), VMImage: vmImage, Config: cloudapi.Config{Rate: 1000}}, nil)
		if err != nil {
			emu.Close()
			t.Fatal(err)
		}
		return deploytest.VMCloud{
			Provider: p, Emulator: emu, VMErrors: emu.VMErrors, PortURL: "http://127.0.0.1:",
			Labels: func(id string) map[string]string {
				s, _ := emu.Session(id)
				return s.Metadata
			},
		}
	},
}

// TestVMModeDeployOfNotes deploys examples/notes in VM mode on tenki against the emulator, the
// VM's session a DinD VM running the stack through Run, calls it at the gateway's preview URL,
// execs in the stack with a stdin of several Run frames, tears it down, and cancels it at each
// of deploytest.VMEvents; each leaves nothing (deploytest.VMModeOfNotes).
func TestVMModeDeployOfNotes(t *testing.T) {
	deploytest.VMModeOfNotes(t, vmKit)
}
