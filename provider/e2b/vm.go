package e2b

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

var _ agentenv.VMExecer = (*Provider)(nil)

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

// RunInVM implements agentenv.VMHost with vmdocker.RunIn: it starts spec as a container of vm's
// stack with `docker create` and `docker start` through the process API (as root), on the
// stack's network under spec.Name and spec.Aliases. Each of spec.Ports is published on a VM port
// the VM's engine picks (two components of a stack may well listen on the same port), read back
// with `docker port`, and reached at E2B's URL of that VM port (Config.SandboxURL). A template
// for agentenv is built with the env's images; an image the VM lacks is uploaded from this
// host's Docker engine (Config.DockerHost) through envd, as modal_vm does, and one missing from
// both is ErrInvalid naming it (nothing is pulled). spec.Files are packed in a tar, uploaded into
// the VM through envd's filesystem API, and copied into the container before it starts. On error
// it removes the container it made.
func (p *Provider) RunInVM(ctx context.Context, vm string, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if !cloudapi.RecordName.MatchString(spec.Name) || spec.Image == "" {
		return agentenv.Sandbox{}, fmt.Errorf("e2b: run %s in %s: want a container name and an image: %w", spec.Name, vm, agentenv.ErrInvalid)
	}
	h, err := p.host(ctx, vm)
	if err == nil {
		var sb agentenv.Sandbox
		if sb, err = vmdocker.RunIn(ctx, h, p.cfg.Name, spec); err == nil {
			return sb, nil
		}
	}
	return agentenv.Sandbox{}, fmt.Errorf("e2b: run %s in %s: %w", spec.Name, vm, err)
}

// host is VM vm as vmdocker drives it: its root shell through envd with its access token, its
// labels (the ports' mark aside), its ports at E2B's URL of each VM port. A VM E2B no longer
// runs is ErrGone.
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

// RemoveFromVM implements agentenv.VMHost with `docker rm -f`; a container, or a VM, that is
// gone counts as removed.
func (p *Provider) RemoveFromVM(ctx context.Context, vm, name string) error {
	if !cloudapi.RecordName.MatchString(name) {
		return fmt.Errorf("e2b: remove %q from %s: %w", name, vm, agentenv.ErrInvalid)
	}
	h, err := p.host(ctx, vm)
	if errors.Is(err, agentenv.ErrGone) {
		return nil
	}
	if err == nil {
		err = vmdocker.Remove(ctx, h.Shell, name)
	}
	if err != nil {
		return fmt.Errorf("e2b: remove %s from %s: %w", name, vm, err)
	}
	return nil
}

// ExecInVM implements agentenv.VMExecer with `docker exec` through the process API (as root),
// with vmdocker.ExecIn: envd's Start request has no stdin, so stdin is uploaded to a file in the
// VM first through envd's filesystem API, and removed afterwards. A container that does not
// exist is ErrNotFound; a VM that is gone, ErrGone.
func (p *Provider) ExecInVM(ctx context.Context, vm, name string, argv []string, env map[string]string, stdin []byte) (agentenv.ExecResult, error) {
	if !cloudapi.RecordName.MatchString(name) || len(argv) == 0 {
		return agentenv.ExecResult{}, fmt.Errorf("e2b: exec in %s of %s: want a container name and a command: %w", vm, name, agentenv.ErrInvalid)
	}
	h, err := p.host(ctx, vm)
	if err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("e2b: exec in %s of %s: %w", vm, name, err)
	}
	res, err := vmdocker.ExecIn(ctx, h, name, argv, env, stdin)
	if err != nil {
		return res, fmt.Errorf("e2b: exec in %s of %s: %w", vm, name, err)
	}
	return res, nil
}
