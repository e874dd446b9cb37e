package tenki

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/shellquote"
	"github.com/agentenv/agentenv/internal/vmdocker"
	"github.com/agentenv/agentenv/provider/tenki/internal/wire"
)

// dockerStart starts the VM's Docker engine unless it answers already (a Docker-capable image may
// start it at boot), detached from the Run that starts it.
const dockerStart = `docker info >/dev/null 2>&1 || setsid dockerd </dev/null >/var/log/agentenv-dockerd.log 2>&1 &`

// CreateVM implements agentenv.VMHost: a session from Config.VMImage (Tenki's default image if
// unset), named, labelled and timed out as Create's, open to inbound traffic (its stack's ports
// are exposed as preview URLs); it starts the session's Docker engine unless it runs and returns
// once the engine answers (bounded by DockerWait), and terminates the session if it does not.
func (p *Provider) CreateVM(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	vm := spec
	vm.Ports, vm.Files, vm.Command, vm.Image = nil, nil, nil, p.cfg.VMImage
	if err := p.check(vm); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("tenki: create vm %s: %w", spec.Name, err)
	}
	meta := cloudapi.Labels(spec)
	meta[metaMode] = modeVM
	sess, err := p.create(ctx, spec.Name, p.request(vm, p.cfg.VMImage, meta, true))
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	if err := p.awaitDocker(ctx, sess.ID); err != nil {
		p.rel.Release(ctx, sess.ID, spec.Name)
		return agentenv.Sandbox{}, fmt.Errorf("tenki: create vm %s: %w", spec.Name, err)
	}
	return p.sandbox(sess), nil
}

// awaitDocker starts vm's Docker engine unless it runs and waits until it answers, bounded by
// DockerWait.
func (p *Provider) awaitDocker(ctx context.Context, vm string) error {
	sh := vmShell{p, vm}
	res, err := sh.Run(ctx, dockerStart)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	if err != nil {
		return fmt.Errorf("start dockerd: %w", err)
	}
	return vmdocker.AwaitEngine(ctx, sh, p.cfg.DockerWait)
}

// vmSession returns the VM's session and labels; a VM that has stopped is ErrGone, a session
// CreateVM did not make ErrInvalid.
func (p *Provider) vmSession(ctx context.Context, vm string) (*wire.Session, map[string]string, error) {
	s, err := p.session(ctx, vm)
	if errors.Is(err, agentenv.ErrNotFound) {
		return nil, nil, fmt.Errorf("%w: %w", err, agentenv.ErrGone)
	}
	if err != nil {
		return nil, nil, err
	}
	if s.State != wire.StateRunning {
		return s, nil, fmt.Errorf("vm %s is %s: %w", vm, s.State, agentenv.ErrGone)
	}
	if s.Metadata[metaMode] != modeVM {
		return s, nil, fmt.Errorf("session %s is not a VM made by CreateVM: %w", vm, agentenv.ErrInvalid)
	}
	return s, p.sandbox(s).Labels, nil
}

// host is VM vm as vmdocker drives it for the embedded vmdocker.VMs (RunInVM, RemoveFromVM): its
// root shell through the data plane's Run, its labels, and its ports. A container's ports are
// published on VM ports the VM's engine picks, which are then exposed (ExposePort, under a lock
// per VM) and reached at their preview URLs. An image the VM lacks is uploaded from this host's
// Docker engine (Config.DockerHost) through Run's stdin, and one missing from both is ErrInvalid
// naming it (nothing is pulled); spec.Files go up the same way. A VM that has stopped is ErrGone
// (vmSession).
func (p *Provider) host(ctx context.Context, vm string) (vmdocker.Host, error) {
	_, labels, err := p.vmSession(ctx, vm)
	if err != nil {
		return vmdocker.Host{}, err
	}
	return vmdocker.Host{Shell: vmShell{p, vm}, Labels: labels, Cleanup: p.cfg.RequestTimeout, Log: p.log.With("vm", vm),
		Images: vmdocker.Images{DockerHost: p.cfg.DockerHost, Hint: imageHint},
		Publish: func(ctx context.Context, published map[int]int) (func(int) string, error) {
			urls, err := p.exposeVM(ctx, vm, published)
			return func(vmPort int) string { return urls[vmPort] }, err
		}}, nil
}

// exposeVM exposes the VM ports of published (container port -> VM port) and returns the
// preview URL of each VM port.
func (p *Provider) exposeVM(ctx context.Context, vm string, published map[int]int) (map[int]string, error) {
	defer p.vms.Lock(vm)()
	urls := map[int]string{}
	for _, vp := range slices.Sorted(maps.Values(published)) {
		url, err := p.expose(ctx, vm, vp)
		if err != nil {
			return nil, err
		}
		urls[vp] = url
	}
	return urls, nil
}

// vmShell is vm's root shell through the data plane's Run.
type vmShell struct {
	p  *Provider
	vm string
}

func (s vmShell) Run(ctx context.Context, script string) (agentenv.ExecResult, error) {
	return s.p.run(ctx, s.vm, wire.RunStart{Cmd: []string{"/bin/sh", "-c", script}, Privileged: true}, nil)
}

// Put streams r into file through Run's stdin (the files API is scoped to the sandbox user's
// home; this writes anywhere, as root).
func (s vmShell) Put(ctx context.Context, file string, r io.Reader) error {
	q := shellquote.Join([]string{file})
	res, err := s.p.run(ctx, s.vm, wire.RunStart{Cmd: []string{"/bin/sh", "-c", `mkdir -p "$(dirname ` + q + `)" && cat >` + q}, Privileged: true}, r)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("write %s: exit %d: %s", file, res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	return err
}

// imageHint says, in a missing image's error, where tenki gets its images.
const imageHint = "tenki uploads images from this host's Docker engine ($DOCKER_HOST), or build a Tenki image (provider.tenki.vm_image) with the env's images"

// ExecInVM implements agentenv.VMExecer with `docker exec` through Run, stdin streamed on Run's
// own stdin: it shadows the embedded vmdocker.VMs' (whose ExecIn writes stdin to a file first,
// for clouds whose exec takes none). A
// container that does not exist is ErrNotFound; a VM that is gone, ErrGone.
func (p *Provider) ExecInVM(ctx context.Context, vm, name string, argv []string, env map[string]string, stdin []byte) (agentenv.ExecResult, error) {
	if !cloudapi.RecordName.MatchString(name) || len(argv) == 0 {
		return agentenv.ExecResult{}, fmt.Errorf("tenki: exec in %s of %s: want a container name and a command: %w", vm, name, agentenv.ErrInvalid)
	}
	if _, _, err := p.vmSession(ctx, vm); err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("tenki: exec in %s of %s: %w", vm, name, err)
	}
	var in io.Reader
	file := ""
	if stdin != nil {
		in, file = bytes.NewReader(stdin), "/dev/stdin"
	}
	script := vmdocker.ExecScript(name, argv, env, file)
	res, err := p.run(ctx, vm, wire.RunStart{Cmd: []string{"/bin/sh", "-c", script}, Privileged: true}, in)
	if err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("tenki: exec in %s of %s: %w", vm, name, err)
	}
	if res.ExitCode != 0 && vmdocker.NoSuchContainer(res.Stderr) {
		return res, fmt.Errorf("tenki: exec in %s: no container %s: %w", vm, name, agentenv.ErrNotFound)
	}
	return res, nil
}
