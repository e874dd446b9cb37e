package vercel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

// dockerStart starts the VM's Docker engine unless it answers already; 98 says the image has
// none. It runs as root (sudo), its output to a log file so that the command ends at once.
const dockerStart = `if docker info >/dev/null 2>&1; then exit 0; fi
command -v dockerd >/dev/null 2>&1 || { echo 'agentenv: the image has no dockerd' >&2; exit 98; }
(nohup dockerd >/var/log/agentenv-dockerd.log 2>&1 </dev/null &)`

// Abilities reports exec, files, VM mode (with commands in a VM's containers) and a location;
// no private networks, so no container mode of a whole env.
func (p *Provider) Abilities() agentenv.Abilities {
	return agentenv.Abilities{Execer: p, Files: p, VMHost: p, VMExecer: p, Locator: p}
}

// CreateVM implements agentenv.VMHost: a sandbox from the Docker-capable image (Config.VMImage),
// named, tagged and timed out as Create's, whose Docker engine it starts (as root) unless the
// image's init has; it returns once the engine answers (bounded by DockerWait), and terminates the
// VM if it does not. No VM image configured is ErrInvalid naming the setting, before anything is
// made.
func (p *Provider) CreateVM(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	vm := spec
	vm.Ports, vm.Files, vm.Command, vm.Image = nil, nil, nil, p.cfg.VMImage
	if err := p.check(vm); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("vercel: create vm %s: %w", spec.Name, err)
	}
	if err := p.checkCredentials(); err != nil {
		return agentenv.Sandbox{}, err
	}
	if p.cfg.VMImage == "" {
		return agentenv.Sandbox{}, fmt.Errorf("vercel: create vm %s: no VM image: set %s to a Vercel Sandbox image with dockerd and the docker CLI: %w", spec.Name, p.cfg.VMImageHint, agentenv.ErrInvalid)
	}
	labels := labelsOf(spec)
	labels[labelMode] = modeVM
	tags, err := encodeTags(labels)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("vercel: create vm %s: %w", spec.Name, err)
	}
	res, err := p.resources(spec)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("vercel: create vm %s: %w", spec.Name, err)
	}
	req := createRequest{ProjectID: p.cfg.ProjectID, Name: spec.Name, Image: p.cfg.VMImage, Ports: []int{},
		Timeout: p.timeout(spec), Resources: res, Tags: tags}
	return p.create(ctx, req, func(ctx context.Context, d described) error {
		return p.startDocker(ctx, d.Session.ID)
	})
}

// startDocker starts the Docker engine of session and waits until `docker info` answers, bounded
// by DockerWait.
func (p *Provider) startDocker(ctx context.Context, session string) error {
	sh := sessionShell{p, session}
	cctx, cancel := context.WithTimeout(ctx, p.cfg.DockerWait)
	defer cancel()
	res, err := sh.Run(cctx, dockerStart)
	switch {
	case err != nil:
		return fmt.Errorf("start the docker engine: %w", err)
	case res.ExitCode == 98:
		return fmt.Errorf("the vm image %s has no dockerd: set %s to an image with dockerd and the docker CLI: %w", p.cfg.VMImage, p.cfg.VMImageHint, agentenv.ErrInvalid)
	case res.ExitCode != 0:
		return fmt.Errorf("start the docker engine: exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return vmdocker.AwaitEngine(ctx, sh, p.cfg.DockerWait)
}

// sessionShell is a session's root shell through the command API, for a VM still being made.
type sessionShell struct {
	p       *Provider
	session string
}

func (s sessionShell) Run(ctx context.Context, script string) (agentenv.ExecResult, error) {
	return s.p.runCommand(ctx, s.session, commandRequest{Command: "/bin/sh", Args: []string{"-c", script}, Sudo: true})
}

func (s sessionShell) Put(ctx context.Context, file string, r io.Reader) error {
	return s.p.putFile(ctx, s.session, file, r)
}

// vm returns VM name as described and its labels: a VM that is gone (stopped, or unknown) is
// ErrGone, a sandbox not made by CreateVM ErrInvalid.
func (p *Provider) vm(ctx context.Context, name string) (described, map[string]string, error) {
	d, err := p.running(ctx, name)
	if errors.Is(err, agentenv.ErrNotFound) {
		return described{}, nil, fmt.Errorf("%w: %w", err, agentenv.ErrGone)
	}
	if err != nil {
		return described{}, nil, err
	}
	labels, own, _ := decodeTags(d.Sandbox.Name, d.Sandbox.Tags)
	if own[labelMode] != modeVM {
		return described{}, nil, fmt.Errorf("sandbox %s is not a VM made by CreateVM: %w", name, agentenv.ErrInvalid)
	}
	return d, labels, nil
}

// host is VM vm as vmdocker drives it for the embedded vmdocker.VMs (RunInVM, RemoveFromVM,
// ExecInVM): its root shell through the command API of its current session, its labels, and its
// ports. A container's ports are published on VM ports the VM's engine picks, which are then
// added to the sandbox's routes (route: PATCH /v2/sandboxes/{name}, under a lock per VM; at most
// 15 per VM) and reached at their routes' URLs. An image the VM lacks is uploaded from this
// host's Docker engine (Config.DockerHost) through the files API, and one missing from both is
// ErrInvalid naming it (nothing is pulled); spec.Files and a command's stdin (the command API
// takes none) go up the same way. A VM that is gone is ErrGone, a sandbox not made by CreateVM
// ErrInvalid (vm).
func (p *Provider) host(ctx context.Context, vm string) (vmdocker.Host, error) {
	_, labels, err := p.vm(ctx, vm)
	if err != nil {
		return vmdocker.Host{}, err
	}
	return vmdocker.Host{Shell: vmShell{p, vm}, Labels: labels, Cleanup: p.cfg.RequestTimeout, Log: p.log.With("vm", vm),
		Images: vmdocker.Images{DockerHost: p.cfg.DockerHost, Hint: vmdocker.UploadHint("vercel", "vm image", p.cfg.VMImage)},
		Publish: func(ctx context.Context, published map[int]int) (func(int) string, error) {
			routes, err := p.route(ctx, vm, published)
			return func(vmPort int) string { return routes[vmPort] }, err
		}}, nil
}

// route adds the VM ports of published to vm's routes, keeping those it has, and returns the URL
// of every routed port.
func (p *Provider) route(ctx context.Context, vm string, published map[int]int) (map[int]string, error) {
	defer p.vms.Lock(vm)()
	d, err := p.describe(ctx, vm)
	if err != nil {
		return nil, fmt.Errorf("route ports: %w", err)
	}
	var ports []int
	for _, r := range d.Routes {
		ports = append(ports, r.Port)
	}
	for _, vp := range published {
		if !slices.Contains(ports, vp) {
			ports = append(ports, vp)
		}
	}
	slices.Sort(ports)
	if len(ports) > MaxPorts {
		return nil, fmt.Errorf("route ports %v: a Vercel sandbox routes at most %d ports: %w", ports, MaxPorts, agentenv.ErrInvalid)
	}
	var out struct {
		Routes []routeInfo `json:"routes"`
	}
	if err := p.call(ctx, http.MethodPatch, "/v2/sandboxes/"+url.PathEscape(vm), p.projectQuery(), map[string]any{"ports": ports}, &out); err != nil {
		return nil, fmt.Errorf("route ports %v: %w", ports, kind(err))
	}
	urls := map[int]string{}
	for _, r := range out.Routes {
		urls[r.Port] = r.URL
	}
	for _, vp := range published {
		if urls[vp] == "" {
			return nil, fmt.Errorf("route ports %v: no route answered for port %d", ports, vp)
		}
	}
	return urls, nil
}

// vmShell is VM vm's root shell: its current session's (sessionShell), found on each call; a
// VM that is gone is ErrGone.
type vmShell struct {
	p  *Provider
	vm string
}

func (s vmShell) session(ctx context.Context) (sessionShell, error) {
	d, err := s.p.running(ctx, s.vm)
	if errors.Is(err, agentenv.ErrNotFound) {
		err = fmt.Errorf("%w: %w", err, agentenv.ErrGone)
	}
	return sessionShell{s.p, d.Session.ID}, err
}

func (s vmShell) Run(ctx context.Context, script string) (agentenv.ExecResult, error) {
	sh, err := s.session(ctx)
	if err != nil {
		return agentenv.ExecResult{}, err
	}
	return sh.Run(ctx, script)
}

func (s vmShell) Put(ctx context.Context, file string, r io.Reader) error {
	sh, err := s.session(ctx)
	if err != nil {
		return err
	}
	return sh.Put(ctx, file, r)
}
