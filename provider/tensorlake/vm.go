package tensorlake

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

// vmEntrypoint is a VM's entrypoint script: it starts dockerd unless the image's own init has
// (a Docker-capable image may start it itself), then stays up, as the sandbox's main process.
const vmEntrypoint = `if ! docker info >/dev/null 2>&1; then (dockerd >/var/log/agentenv-dockerd.log 2>&1 &); fi; while :; do sleep 3600; done`

// Abilities reports exec, files, VM mode (with commands in a VM's containers) and a location;
// no private networks, so no container mode of a whole env.
func (p *Provider) Abilities() agentenv.Abilities {
	return agentenv.Abilities{Execer: p, Files: p, VMHost: p, VMExecer: p, Locator: p}
}

// CreateVM implements agentenv.VMHost: a sandbox from the Docker-capable image
// (Config.VMImage), named, labelled and timed out as Create's, whose entrypoint starts dockerd
// and stays up; it returns once the VM's engine answers (bounded by DockerWait), and terminates
// the VM if it does not. No VM image configured is ErrInvalid naming the setting, before
// anything is made.
func (p *Provider) CreateVM(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	vm := spec
	vm.Ports, vm.Files, vm.Command, vm.Image = nil, nil, nil, p.cfg.VMImage
	if err := p.check(vm); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("tensorlake: create vm %s: %w", spec.Name, err)
	}
	if p.cfg.VMImage == "" {
		return agentenv.Sandbox{}, fmt.Errorf("tensorlake: create vm %s: no VM image: set %s to a Tensorlake sandbox image with dockerd and the docker CLI: %w", spec.Name, p.cfg.VMImageHint, agentenv.ErrInvalid)
	}
	labels := cloudapi.Labels(spec)
	labels[labelMode] = modeVM
	ep, err := entrypoint(labels, []string{"/bin/sh", "-c", vmEntrypoint}, nil)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("tensorlake: create vm %s: %w: %w", spec.Name, err, agentenv.ErrInvalid)
	}
	req := createRequest{Name: spec.Name, Image: p.cfg.VMImage, Entrypoint: ep, TimeoutSecs: p.backstop.Seconds(spec),
		Resources: p.resources(spec), AllowUnauthenticatedAccess: true}
	si, err := p.create(ctx, spec.Name, req, false)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	if err := vmdocker.AwaitEngine(ctx, vmShell{p, si.ID}, p.cfg.DockerWait); err != nil {
		p.rel.Release(ctx, si.ID, spec.Name)
		return agentenv.Sandbox{}, fmt.Errorf("tensorlake: create vm %s: %w", spec.Name, err)
	}
	return p.sandbox(si), nil
}

// vmInfo returns the VM's info and its labels; a VM that has ended is ErrGone.
func (p *Provider) vmInfo(ctx context.Context, vm string) (sandboxInfo, map[string]string, error) {
	si, err := p.info(ctx, vm)
	if errors.Is(err, agentenv.ErrNotFound) {
		return sandboxInfo{}, nil, fmt.Errorf("%w: %w", err, agentenv.ErrGone)
	}
	if err != nil {
		return sandboxInfo{}, nil, err
	}
	if si.Status != statusRunning {
		return si, nil, fmt.Errorf("vm %s is %s: %w", vm, si.Status, agentenv.ErrGone)
	}
	labels := si.labels()
	if labels[labelMode] != modeVM {
		return si, nil, fmt.Errorf("sandbox %s is not a VM made by CreateVM: %w", vm, agentenv.ErrInvalid)
	}
	delete(labels, labelMode)
	delete(labels, labelPort)
	return si, labels, nil
}

// RunInVM implements agentenv.VMHost with vmdocker.RunIn: it starts spec as a container of vm's stack with
// `docker create` and `docker start` through the process API, on the stack's network under
// spec.Name and spec.Aliases. Each of spec.Ports is published on a VM port the VM's engine
// picks, which is then added to the sandbox's exposed ports (PATCH /sandboxes/{id}, under a
// lock per VM) and reached at Tensorlake's URL of that port. An image the VM lacks is uploaded
// from this host's Docker engine (Config.DockerHost) through the files API, and one missing
// from both is ErrInvalid naming it (nothing is pulled). spec.Files are packed in a tar,
// uploaded into the VM and copied into the container before it starts. On error it removes the
// container it made.
func (p *Provider) RunInVM(ctx context.Context, vm string, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if !cloudapi.RecordName.MatchString(spec.Name) || spec.Image == "" {
		return agentenv.Sandbox{}, fmt.Errorf("tensorlake: run %s in %s: want a container name and an image: %w", spec.Name, vm, agentenv.ErrInvalid)
	}
	_, labels, err := p.vmInfo(ctx, vm)
	if err == nil {
		var sb agentenv.Sandbox
		if sb, err = vmdocker.RunIn(ctx, p.host(vm, labels), p.cfg.Name, spec); err == nil {
			return sb, nil
		}
	}
	return agentenv.Sandbox{}, fmt.Errorf("tensorlake: run %s in %s: %w", spec.Name, vm, err)
}

// host is VM vm, labelled labels, as vmdocker drives it: the VM ports its containers publish are
// exposed (expose) and reached at Tensorlake's URL of each.
func (p *Provider) host(vm string, labels map[string]string) vmdocker.Host {
	return vmdocker.Host{Shell: vmShell{p, vm}, Labels: labels, Cleanup: p.cfg.RequestTimeout, Log: p.log.With("vm", vm),
		Images: vmdocker.Images{DockerHost: p.cfg.DockerHost, Hint: vmdocker.UploadHint("tensorlake", "vm image", p.cfg.VMImage)},
		Publish: func(ctx context.Context, published map[int]int) (func(int) string, error) {
			return func(vmPort int) string { return p.cfg.PortURL(vm, vmPort) }, p.expose(ctx, vm, published)
		}}
}

// expose adds the VM ports of published to vm's exposed ports, reachable without Tensorlake
// authentication (the gateway has its own token), keeping those already exposed.
func (p *Provider) expose(ctx context.Context, vm string, published map[int]int) error {
	defer p.vms.Lock(vm)()
	si, err := p.info(ctx, vm)
	if err != nil {
		return fmt.Errorf("expose ports: %w", err)
	}
	ports := slices.Clone(si.ExposedPorts)
	for _, vp := range published {
		if !slices.Contains(ports, vp) {
			ports = append(ports, vp)
		}
	}
	slices.Sort(ports)
	body := map[string]any{"exposed_ports": ports, "allow_unauthenticated_access": true}
	if err := p.call(ctx, http.MethodPatch, p.cfg.APIURL+"/sandboxes/"+url.PathEscape(vm), body, nil); err != nil {
		return fmt.Errorf("expose ports %v: %w", ports, kind(err))
	}
	return nil
}

// vmShell is vm's root shell through the sandbox API (its process and files APIs).
type vmShell struct {
	p  *Provider
	vm string
}

func (s vmShell) Run(ctx context.Context, script string) (agentenv.ExecResult, error) {
	return s.p.run(ctx, s.vm, []string{"/bin/sh", "-c", script})
}

func (s vmShell) Put(ctx context.Context, file string, r io.Reader) error {
	return s.p.put(ctx, s.vm, file, r)
}

// RemoveFromVM implements agentenv.VMHost with `docker rm -f`; a container, or a VM, that is
// gone counts as removed.
func (p *Provider) RemoveFromVM(ctx context.Context, vm, name string) error {
	if !cloudapi.RecordName.MatchString(name) {
		return fmt.Errorf("tensorlake: remove %q from %s: %w", name, vm, agentenv.ErrInvalid)
	}
	_, _, err := p.vmInfo(ctx, vm)
	if errors.Is(err, agentenv.ErrGone) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("tensorlake: remove %s from %s: %w", name, vm, err)
	}
	if err := vmdocker.Remove(ctx, vmShell{p, vm}, name); err != nil {
		return fmt.Errorf("tensorlake: remove %s from %s: %w", name, vm, err)
	}
	return nil
}

// ExecInVM implements agentenv.VMExecer with `docker exec` through the process API
// (vmdocker.ExecIn). The process API takes no stdin, so stdin is written to a file in the VM
// first (one streamed PUT) and removed afterwards. A container that does not exist is ErrNotFound; a VM that is gone, ErrGone.
func (p *Provider) ExecInVM(ctx context.Context, vm, name string, argv []string, env map[string]string, stdin []byte) (agentenv.ExecResult, error) {
	if !cloudapi.RecordName.MatchString(name) || len(argv) == 0 {
		return agentenv.ExecResult{}, fmt.Errorf("tensorlake: exec in %s of %s: want a container name and a command: %w", vm, name, agentenv.ErrInvalid)
	}
	_, _, err := p.vmInfo(ctx, vm)
	var res agentenv.ExecResult
	if err == nil {
		res, err = vmdocker.ExecIn(ctx, p.host(vm, nil), name, argv, env, stdin)
	}
	if err != nil {
		return res, fmt.Errorf("tensorlake: exec in %s of %s: %w", vm, name, err)
	}
	return res, nil
}
