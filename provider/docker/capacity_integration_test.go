//go:build integration

package docker_test

import (
	"runtime"
	"testing"

	"github.com/agentenv/agentenv/provider/docker"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
)

// The engine says what it holds, which sizes admission to it; on a local engine that is this
// machine's CPUs.
func TestCapacityFromDockerInfo(t *testing.T) {
	dockertest.Require(t)
	p, err := docker.New(docker.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cpus, mem, err := p.Capacity(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if cpus < 1 || mem < 1<<28 {
		t.Errorf("capacity = %d CPUs, %d bytes; want at least 1 CPU and 256 MiB", cpus, mem)
	}
	if cpus != runtime.NumCPU() {
		t.Logf("the engine has %d CPUs, this process sees %d (a remote or limited engine)", cpus, runtime.NumCPU())
	}
}
