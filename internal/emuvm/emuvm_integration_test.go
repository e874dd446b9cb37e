//go:build integration

package emuvm_test

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/provider/providertest"
)

// TestVM starts a VM with one preloaded image, runs scripts in it, runs that image inside and
// reaches its port from here, then removes the VM and checks that nothing is left.
func TestVM(t *testing.T) {
	cli := dockertest.Require(t)
	image := dockertest.TestImage(t)
	id := providertest.NewID()
	labels := map[string]string{"agentenv.test.emuvm": id}
	dockertest.CheckNoLeftovers(t, cli, labels)
	h, err := emuvm.New(emuvm.Config{Labels: labels, Preload: []string{image}, InMemory: true}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	start := time.Now()
	vm, err := h.Start(t.Context(), "emuvm-"+id, map[string]string{agentenv.LabelDeployment: id})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("start with the template built %s", time.Since(start))
	defer vm.Remove(context.Background())
	left, err := dockertest.Leftovers(t.Context(), cli, map[string]string{agentenv.LabelRecord: "emuvm-" + id, agentenv.LabelDeployment: id})
	if err != nil || len(left) != 2 {
		t.Errorf("labelled objects %v, %v; want the vm's container and volume", left, err)
	}
	res, err := vm.Run(t.Context(), "cat; echo err >&2; exit 3", strings.NewReader("in"))
	if err != nil || res.ExitCode != 3 || string(res.Stdout) != "in" || string(res.Stderr) != "err\n" {
		t.Errorf("Run = %+v %q %q, %v; want exit 3, stdin echoed and stderr", res, res.Stdout, res.Stderr, err)
	}
	res, err = vm.Run(t.Context(), "docker run -d -p 8080:8080 "+image+" serve :8080", nil)
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("docker run of the preloaded image = %+v %s, %v", res, res.Stderr, err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		resp, err := http.Get("http://" + vm.Addr(8080) + "/")
		if err == nil {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("port 8080 of the vm at %s: %v", vm.Addr(8080), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := vm.Run(ctx, "sleep 5", nil); err == nil {
		t.Error("Run past its context's end returned no error")
	}
	if err := vm.Remove(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := vm.Remove(t.Context()); err != nil {
		t.Errorf("second Remove = %v, want nil", err)
	}
	if left, _ := dockertest.Leftovers(t.Context(), cli, map[string]string{agentenv.LabelRecord: "emuvm-" + id}); len(left) != 0 {
		t.Errorf("left after Remove: %v", left)
	}
}
