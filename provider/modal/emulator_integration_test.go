//go:build integration

package modal_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"testing"

	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv/deploy/deploytest"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/provider/modal/modalemu"
)

// dockerEmulator starts the emulator with real workloads on this engine and points the SDK at
// it: sandboxes are containers, and with vm, vm-runtime sandboxes are DinD VMs (internal/emuvm)
// whose engines start with preload's images. Everything it makes carries the returned labels.
// When the test ends it fails if the emulator still runs a sandbox, or if anything of it is
// left on the engine.
func dockerEmulator(t *testing.T, vm bool, preload ...string) (*modalemu.Server, *client.Client, map[string]string) {
	t.Helper()
	cli := dockertest.Require(t)
	labels := map[string]string{"agentenv.test.modal": fmt.Sprintf("%x", rand.Uint64())}
	dockertest.CheckNoLeftovers(t, cli, labels)
	o := modalemu.Options{Docker: cli}
	if vm {
		host, err := emuvm.New(emuvm.Config{Labels: labels, InMemory: true, Preload: preload, ReadyWait: deploytest.ReadyWait},
			slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo})))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if err := host.Close(context.Background()); err != nil {
				t.Errorf("close the vm host: %v", err)
			}
		})
		// The template is the rig's: its build does not count against the first deploy.
		if err := host.Prepare(t.Context()); err != nil {
			t.Fatal(err)
		}
		o.VM = host
	}
	emu, err := modalemu.StartWith(o)
	if err != nil {
		t.Fatal(err)
	}
	// Registered after the host's Close, so it runs before it: the emulator's VMs go first.
	dockertest.CheckNoLeftovers(t, cli, emu.Labels())
	t.Setenv("MODAL_SERVER_URL", emu.URL())
	t.Setenv("HOME", t.TempDir())
	t.Setenv("MODAL_SANDBOX_V2", "0")
	t.Cleanup(func() {
		if left := emu.Running(); len(left) != 0 {
			t.Errorf("the emulator still runs %v", left)
		}
		emu.Close()
	})
	return emu, cli, labels
}
