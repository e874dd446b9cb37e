package e2b

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
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

// RunInVM implements agentenv.VMHost: it starts spec as a container of vm's stack with
// `docker create` and `docker start` through the process API (as root), on the stack's network
// under spec.Name and spec.Aliases. Each of spec.Ports is published on a VM port the VM's engine picks (two
// components of a stack may well listen on the same port), read back with `docker port`, and
// reached at E2B's URL of that VM port (Config.SandboxURL). A template for agentenv is built
// with the env's images; an image the VM lacks is uploaded from this host's Docker engine
// (Config.DockerHost) through envd, as modal_vm does, and one missing from both is ErrInvalid
// naming it (nothing is pulled). spec.Files are packed in a tar, uploaded into the
// VM through envd's filesystem API, and copied into the container before it starts. On error
// it removes the container it made.
func (p *Provider) RunInVM(ctx context.Context, vm string, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if !recordName.MatchString(spec.Name) || spec.Image == "" {
		return agentenv.Sandbox{}, fmt.Errorf("e2b: run %s in %s: want a container name and an image: %w", spec.Name, vm, agentenv.ErrInvalid)
	}
	archive, err := vmdocker.Prepare(spec)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("e2b: run %s in %s: %w", spec.Name, vm, err)
	}
	d, err := p.detail(ctx, vm)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("e2b: run %s in %s: %w", spec.Name, vm, err)
	}
	labels := maps.Clone(d.Metadata)
	delete(labels, labelPorts)
	maps.Copy(labels, spec.Labels)
	run := vmdocker.Run{Spec: spec, Labels: labels}
	st, err := vmdocker.Start(ctx, vmShell{p, vm, d.EnvdAccessToken}, run, archive,
		vmdocker.Images{DockerHost: p.cfg.DockerHost, Hint: p.imageHint()}, p.log.With("vm", vm))
	if err != nil {
		cctx, cancel := cleanup.Context(ctx, p.cfg.RequestTimeout)
		defer cancel()
		if rerr := p.RemoveFromVM(cctx, vm, spec.Name); rerr != nil {
			p.log.Warn("remove a container that failed to start; it goes with the vm", "vm", vm, "container", spec.Name, "err", rerr)
		}
		return agentenv.Sandbox{}, fmt.Errorf("e2b: run %s in %s: %w", spec.Name, vm, err)
	}
	return vmdocker.Sandbox(st, spec, p.cfg.Name, labels, func(vmPort int) string { return p.cfg.SandboxURL(vm, vmPort) }), nil
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

// imageHint says, in a missing image's error, where e2b gets its images.
func (p *Provider) imageHint() string {
	return fmt.Sprintf("e2b uploads images from this host's Docker engine ($DOCKER_HOST), or build the vm template (%s) with the env's images", p.cfg.VMTemplate)
}

// RemoveFromVM implements agentenv.VMHost with `docker rm -f`; a container, or a VM, that is
// gone counts as removed.
func (p *Provider) RemoveFromVM(ctx context.Context, vm, name string) error {
	if !recordName.MatchString(name) {
		return fmt.Errorf("e2b: remove %q from %s: %w", name, vm, agentenv.ErrInvalid)
	}
	d, err := p.detail(ctx, vm)
	if errors.Is(err, agentenv.ErrGone) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("e2b: remove %s from %s: %w", name, vm, err)
	}
	if err := vmdocker.Remove(ctx, vmShell{p, vm, d.EnvdAccessToken}, name); err != nil {
		return fmt.Errorf("e2b: remove %s from %s: %w", name, vm, err)
	}
	return nil
}
