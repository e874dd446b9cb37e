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

// host is VM vm as vmdocker drives it for the embedded vmdocker.VMs (RunInVM, RemoveFromVM,
// ExecInVM): its shell through the sandbox API's process and files APIs, its labels, and its
// ports. A container's ports are published on VM ports the VM's engine picks, which are then
// added to the sandbox's exposed ports (expose, under a lock per VM) and reached at Tensorlake's
// URL of each. An image the VM lacks is uploaded from this host's Docker engine
// (Config.DockerHost) through the files API, and one missing from both is ErrInvalid naming it
// (nothing is pulled); spec.Files and a command's stdin (the process API takes none) go up the
// same way, in one streamed PUT each. A VM that has ended is ErrGone (vmInfo).
func (p *Provider) host(ctx context.Context, vm string) (vmdocker.Host, error) {
	_, labels, err := p.vmInfo(ctx, vm)
	if err != nil {
		return vmdocker.Host{}, err
	}
	return vmdocker.Host{Shell: vmShell{p, vm}, Labels: labels, Cleanup: p.cfg.RequestTimeout, Log: p.log.With("vm", vm),
		Images: vmdocker.Images{DockerHost: p.cfg.DockerHost, Hint: vmdocker.UploadHint("tensorlake", "vm image", p.cfg.VMImage)},
		Publish: func(ctx context.Context, published map[int]int) (func(int) string, error) {
			return func(vmPort int) string { return p.cfg.PortURL(vm, vmPort) }, p.expose(ctx, vm, published)
		}}, nil
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
