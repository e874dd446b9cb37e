//go:build integration

package e2b_test

import (
	"testing"

	"github.com/agentenv/agentenv/deploy/deploytest"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/provider/e2b"
	"github.com/agentenv/agentenv/provider/e2b/e2bemu"
)

// vmKit is e2b on its emulator for deploytest's VM-mode kits: every sandbox of the Docker
// template is a DinD VM. Its test cancels the VM-mode deploy at every progress event: the stack
// inside the VM, which every cloud shares, is swept here once.
var vmKit = deploytest.VMKit{
	Name: "e2b", Short: "e2b", TestLabel: "agentenv.test.e2bvm", EveryEvent: true,
	Start: func(t *testing.T, vms emuvm.Backend) deploytest.VMCloud {
		emu := e2bemu.Start(apiKey)
		emu.SetVMBackend(vms)
		p, err := e2b.New(e2b.Config{APIKey: apiKey, APIURL: emu.URL(), SandboxURL: emu.SandboxURL, Config: cloudapi.Config{Rate: 1000}}, nil)
		if err != nil {
			emu.Close()
			t.Fatal(err)
		}
		return deploytest.VMCloud{
			Provider: p, Emulator: emu, VMErrors: emu.VMErrors, PortURL: emu.URL() + "/sandbox/",
			Labels: func(id string) map[string]string {
				sb, _ := emu.Sandbox(id)
				return sb.Metadata
			},
		}
	},
}

// TestVMModeDeployOfNotes deploys examples/notes in VM mode on e2b against the emulator, each
// sandbox of the Docker template a DinD VM, calls it, tears it down, and cancels it at each of
// its progress events; each leaves nothing (deploytest.VMModeOfNotes, EveryEvent).
func TestVMModeDeployOfNotes(t *testing.T) {
	deploytest.VMModeOfNotes(t, vmKit)
}
