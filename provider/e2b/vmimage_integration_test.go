//go:build integration

package e2b_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy/deploytest"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/provider/e2b"
	"github.com/agentenv/agentenv/provider/e2b/e2bemu"
	"github.com/agentenv/agentenv/provider/providertest"
)

// TestRunInVMUploadsAnImageTheVMLacks: on a DinD VM whose template has no images, RunInVM of
// this checkout's runtime image uploads it from the host's engine (docker save, streamed
// through envd's filesystem API, docker load) and starts the container, as modal_vm does; an
// image neither the VM nor the host has is ErrInvalid naming it.
func TestRunInVMUploadsAnImageTheVMLacks(t *testing.T) {
	runtime, _ := dockertest.RuntimeImage(t)
	c := deploytest.DinDCloud(t, vmKit) // a template without images
	emu, p := c.Emulator.(*e2bemu.Server), c.Provider.(*e2b.Provider)
	ctx := t.Context()
	id := "vm-" + providertest.NewID()
	vm, err := p.CreateVM(ctx, agentenv.SandboxSpec{Name: id, Labels: map[string]string{agentenv.LabelRecord: id}})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := p.Terminate(context.Background(), vm.ID); err != nil {
			t.Errorf("terminate the vm: %v", err)
		}
	}()

	sb, err := p.RunInVM(ctx, vm.ID, agentenv.SandboxSpec{Name: "kv", Image: runtime, Command: []string{"/agentenv", "serve", "kv"},
		Ports: []int{8080}, Memory: 128 << 20, CPUs: 0.5})
	if err != nil {
		t.Fatalf("RunInVM of an image the vm lacks = %v, want it uploaded and started", err)
	}
	if sb.State != agentenv.SandboxRunning || sb.Endpoints["8080"] == "" {
		t.Errorf("RunInVM = %+v, want a running container with an endpoint", sb)
	}
	uploaded := false
	for _, u := range emu.Uploads() {
		uploaded = uploaded || strings.Contains(u.Path, "agentenv-image-") && len(u.Data) > 0
	}
	if !uploaded {
		t.Error("no image archive went up through envd's filesystem API")
	}

	_, err = p.RunInVM(ctx, vm.ID, agentenv.SandboxSpec{Name: "ghost", Image: "agentenv-no-such-image:never"})
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "agentenv-no-such-image:never") {
		t.Errorf("RunInVM of an image nowhere = %v, want ErrInvalid naming it", err)
	}
}
