package e2b

import (
	"context"
	"fmt"
	"io"
	"maps"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

// CreateVM implements agentenv.VMHost: a sandbox from the Docker-capable template
// (Config.VMTemplate), labelled and timed out as Create's, with no workload of its own.
func (p *Provider) CreateVM(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if err := p.check(spec, p.cfg.VMTemplate); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("e2b: create vm %s: %w", spec.Name, err)
	}
	vm := spec
	vm.Ports = nil
	return p.create(ctx, vm, p.cfg.VMTemplate, nil)
}

// host is VM vm as vmdocker drives it for the embedded vmdocker.VMs (RunInVM, RemoveFromVM,
// ExecInVM): its root shell through envd's process API (as root) with its access token, its
// labels (the ports' mark aside), and its ports. A container's ports are published on VM ports
// the VM's engine picks (two components of a stack may well listen on the same port), reached at
// E2B's URL of that VM port (Config.SandboxURL). A template for agentenv is built with the env's
// images; an image the VM lacks is uploaded from this host's Docker engine (Config.DockerHost)
// through envd's filesystem API, as modal_vm does, and one missing from both is ErrInvalid
// naming it (nothing is pulled); spec.Files and a command's stdin go up the same way (envd's
// Start has no stdin). A VM E2B no longer runs is ErrGone.
func (p *Provider) host(ctx context.Context, vm string) (vmdocker.Host, error) {
	d, err := p.detail(ctx, vm)
	if err != nil {
		return vmdocker.Host{}, err
	}
	labels := maps.Clone(d.Metadata)
	delete(labels, labelPorts)
	return vmdocker.Host{Shell: vmShell{p, vm, d.EnvdAccessToken}, Labels: labels, Cleanup: p.cfg.RequestTimeout,
		Log:    p.log.With("vm", vm),
		Images: vmdocker.Images{DockerHost: p.cfg.DockerHost, Hint: vmdocker.UploadHint("e2b", "vm template", p.cfg.VMTemplate)},
		URL:    func(vmPort int) string { return p.cfg.SandboxURL(vm, vmPort) },
	}, nil
}

// vmShell is vm's root shell through envd (its process and filesystem APIs).
type vmShell struct {
	p         *Provider
	vm, token string
}

func (s vmShell) Run(ctx context.Context, script string) (agentenv.ExecResult, error) {
	return s.p.process(ctx, s.vm, s.token, processConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}, "root", "", true)
}

func (s vmShell) Put(ctx context.Context, file string, r io.Reader) error {
	return s.p.upload(ctx, s.vm, s.token, file, "root", r)
}
