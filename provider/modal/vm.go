package modal

// VM mode (the modal_vm provider): one Modal sandbox on the VM runtime
// (https://modal.com/docs/guide/vm-sandboxes, SandboxRuntimeVM) hosts a whole stack of
// containers with its own Docker engine (https://modal.com/docs/guide/docker-in-sandboxes).
//
//   - CreateVM makes the sandbox from Config.VMImage (spec.Image if set), named by the record id
//     and tagged with its labels plus agentenv.modal.mode=vm, with the backstop timeout. Modal
//     fixes a sandbox's tunnels at create, so it declares Slots encrypted tunnels on VM ports
//     SlotBase, SlotBase+1, ... and TCPSlots unencrypted ones after them. It then starts dockerd
//     through an exec unless `docker info` already answers (an image that starts it itself), and
//     waits for the engine, bounded by DockerWait.
//   - RunInVM makes sure the image is in the VM: unless the VM's engine has an image of the
//     same id as this host's engine, it is saved from the local engine (Config.DockerHost) and
//     streamed into `docker load` through an exec's stdin. An image the VM has and this host
//     lacks is used as is (a VM image with the env's images baked in spares the upload). Then,
//     in one exec, `docker create` on the stack's network under the component's name and
//     aliases, with the VM's tags plus spec.Labels as labels, each port published on a free
//     slot (the service DB role's on an unencrypted slot: its callers speak the Postgres
//     protocol), spec.Files copied in with `docker cp -` from a tar on the exec's stdin, and
//     `docker start`. Endpoints are the slots' tunnels. On error it removes the container.
//   - RemoveFromVM is `docker rm -f` through an exec; a container or a VM that is gone counts as
//     removed.
//   - Create (a bare sandbox) is CreateVM with the spec run as the VM's only container,
//     "main", as RunInVM runs one, its ports on the VM's first slots. The VM's tags say so
//     (agentenv.modal.main, agentenv.modal.ports = PORT:SLOT,...), so that Get and List, which
//     are the container mode's, report such a VM with the main container's endpoints and state
//     (read by one exec; a stack's VM needs none): once main has exited, Get is ErrGone and
//     List reports it exited with its exit code. The VM runs on until Terminate (or its backstop
//     timeout). List returns only VMs, the container mode's List no VMs.
//   - CreateNetwork is refused with ErrInvalid.
//
// Every exec closes its stdin and has a timeout. Verified only against the emulator (package
// modalemu with a VM backend, internal/emuvm).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	dockerclient "github.com/moby/moby/client"
	modal "github.com/modal-labs/modal-client/go"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/ctxerr"
	"github.com/agentenv/agentenv/internal/engine"
	"github.com/agentenv/agentenv/internal/filetar"
	"github.com/agentenv/agentenv/internal/shellquote"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

// Tags of VM mode.
const (
	tagMode  = "agentenv.modal.mode" // on every VM, "vm": the two modes list apart
	modeVM   = "vm"
	tagMain  = "agentenv.modal.main"  // on a VM made by Create: the name of its one container
	tagPorts = "agentenv.modal.ports" // on a VM made by Create: that container's PORT:SLOT,...
)

// mainContainer is the name of the one container of a VM made by Create.
const mainContainer = "main"

// Bounds of VM-mode execs.
const (
	execTimeout   = 2 * time.Minute // one docker command in a VM
	removeTimeout = time.Minute     // removal of a container that failed to start
	stdinChunk    = 1 << 20         // bytes per stdin write
)

// vmInfo is what RunInVM needs of a VM: its tags and its slots' endpoints, by slot port.
type vmInfo struct {
	tags      map[string]string
	endpoints map[string]string
}

// needVM fails with ErrInvalid unless the Provider is in VM mode.
func (p *Provider) needVM(op string) error {
	if !p.cfg.VM {
		return fmt.Errorf("modal: %s: provider %s is container mode; VM mode is the modal_vm provider (Config.VM): %w", op, p.cfg.Name, agentenv.ErrInvalid)
	}
	return nil
}

// slotPorts returns the VM ports of the encrypted slots and of the unencrypted (TCP) slots.
func (p *Provider) slotPorts() (enc, tcp []int) {
	for i := range p.cfg.Slots {
		enc = append(enc, p.cfg.SlotBase+i)
	}
	for i := range p.cfg.TCPSlots {
		tcp = append(tcp, p.cfg.SlotBase+p.cfg.Slots+i)
	}
	return enc, tcp
}

// CreateVM implements agentenv.VMHost: a sandbox on Modal's VM runtime from Config.VMImage
// (spec.Image if set), named spec.Name and tagged spec.Labels, with the backstop timeout and the
// slots' tunnels, whose Docker engine answers when it returns (see the package's VM mode notes).
// Its Endpoints are the slots' tunnels, by VM port. The rules of Create apply: the request runs
// on a detached bounded context, and a VM that cannot be used (its engine does not start in
// DockerWait, ctx ended) is terminated before CreateVM returns.
func (p *Provider) CreateVM(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if err := p.needVM("create vm " + spec.Name); err != nil {
		return agentenv.Sandbox{}, err
	}
	if !cloudapi.RecordName.MatchString(spec.Name) {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create vm: name %q: want [a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}: %w", spec.Name, agentenv.ErrInvalid)
	}
	if got := spec.Labels[agentenv.LabelRecord]; got != spec.Name {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create vm %s: label %s=%q, want the record id: %w", spec.Name, agentenv.LabelRecord, got, agentenv.ErrInvalid)
	}
	if len(spec.Files) > 0 || len(spec.Ports) > 0 || spec.Network != "" {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create vm %s: a VM takes no files, ports or network (its stack's containers do): %w", spec.Name, agentenv.ErrInvalid)
	}
	return p.createVM(ctx, spec, orDefault(spec.Image, p.cfg.VMImage), nil)
}

// createVM is CreateVM of a vetted spec from image, with extra tags besides spec.Labels and
// the mode tag (left out of the returned Labels).
func (p *Provider) createVM(ctx context.Context, spec agentenv.SandboxSpec, image string, extra map[string]string) (agentenv.Sandbox, error) {
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("modal: create vm %s: %w", spec.Name, err)
	}
	client, app, done, err := p.admit(ctx, spec.Name)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	defer done()
	tags := maps.Clone(spec.Labels)
	maps.Copy(tags, extra)
	tags[tagMode] = modeVM
	enc, tcp := p.slotPorts()
	regions := p.cfg.Regions
	if p.cfg.Region != "" {
		regions = []string{p.cfg.Region} // optional in VM mode: the stack is one sandbox
	}
	params := &modal.SandboxCreateParams{
		Name: spec.Name, Tags: tags, Timeout: p.timeout(spec), Runtime: modal.SandboxRuntimeVM,
		Command: spec.Command, Env: spec.Env, CPU: spec.CPUs, MemoryMiB: int(spec.Memory >> 20), Regions: regions,
		EncryptedPorts: enc, UnencryptedPorts: tcp,
	}
	log := p.log.With("record_id", spec.Name, "image", image, "app", p.cfg.App, "regions", regions)
	log.Debug("create vm", "timeout", params.Timeout, "slots", len(enc), "tcp_slots", len(tcp))
	start := time.Now()
	sb, err := p.launch(ctx, client, app, spec.Name, client.Images.FromRegistry(image, nil), params)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	defer sb.Detach()
	eps, err := p.endpoints(ctx, sb, p.cfg.TunnelWait)
	if err == nil {
		err = p.startDocker(ctx, sb)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		p.rel.Release(ctx, sb.SandboxID, spec.Name)
		return agentenv.Sandbox{}, fmt.Errorf("modal: create vm %s: %w", spec.Name, err)
	}
	labels := maps.Clone(spec.Labels)
	p.mu.Lock()
	p.vms[sb.SandboxID] = vmInfo{tags: maps.Clone(labels), endpoints: maps.Clone(eps)}
	p.mu.Unlock()
	log.Debug("vm created", "sandbox_id", sb.SandboxID, "took", time.Since(start))
	return agentenv.Sandbox{ID: sb.SandboxID, Name: spec.Name, Provider: p.cfg.Name, State: agentenv.SandboxRunning,
		Labels: labels, Endpoints: eps, Created: time.Now()}, nil
}

// orDefault returns a, or b if a is empty.
func orDefault(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// startDockerScript starts dockerd in the background unless an engine answers already.
const startDockerScript = `docker info >/dev/null 2>&1 && exit 0
command -v dockerd >/dev/null 2>&1 || { echo "the vm image has no dockerd" >&2; exit 3; }
mkdir -p /var/log
nohup dockerd >/var/log/agentenv-dockerd.log 2>&1 </dev/null &
exit 0`

// startDocker starts the VM's Docker engine unless the image did, and waits until `docker
// info` answers, bounded by DockerWait.
func (p *Provider) startDocker(ctx context.Context, sb *modal.Sandbox) error {
	wctx, cancel := context.WithTimeout(ctx, p.cfg.DockerWait)
	defer cancel()
	res, err := p.exec(wctx, sb, startDockerScript, nil, 30*time.Second)
	if err != nil {
		return fmt.Errorf("start docker: %w", err)
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("start docker: exit code %d: %s: %w", res.ExitCode, strings.TrimSpace(string(res.Stderr)), agentenv.ErrInvalid)
	}
	var last string
	for {
		res, err := p.exec(wctx, sb, "docker info --format '{{.ID}}'", nil, 30*time.Second)
		if err == nil && res.ExitCode == 0 {
			return nil
		}
		if err != nil && (errors.Is(err, agentenv.ErrGone) || ctx.Err() != nil) {
			return fmt.Errorf("wait for docker: %w", err)
		}
		if err != nil {
			last = err.Error()
		} else {
			last = strings.TrimSpace(string(res.Stderr))
		}
		select {
		case <-wctx.Done():
			if err := ctx.Err(); err != nil {
				return err
			}
			return fmt.Errorf("docker in the vm not ready within %s (%s): %w", p.cfg.DockerWait, last, agentenv.ErrUnavailable)
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// exec runs script with /bin/sh -c in sb, with stdin (nil: none) written in chunks and then
// closed, and returns its exit code and output (each cut at 1 MiB). The exec has a Modal
// timeout; a ctx that ends first returns ctx's error (the exec then ends at its timeout).
func (p *Provider) exec(ctx context.Context, sb *modal.Sandbox, script string, stdin io.Reader, timeout time.Duration) (agentenv.ExecResult, error) {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < timeout {
		timeout = time.Until(dl) + time.Second
	}
	timeout = max(timeout.Truncate(time.Second), time.Second)
	proc, err := sb.Exec(ctx, []string{"/bin/sh", "-c", script}, &modal.SandboxExecParams{Timeout: timeout})
	if err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("exec: %w", ctxerr.Prefer(ctx, kind(err)))
	}
	type result struct {
		res agentenv.ExecResult
		err error
	}
	ch := make(chan result, 1)
	go func() {
		var r result
		if stdin != nil {
			if _, err := io.CopyBuffer(writerOnly{proc.Stdin}, stdin, make([]byte, stdinChunk)); err != nil {
				r.err = fmt.Errorf("write stdin: %w", kind(err))
			}
		}
		if err := proc.Stdin.Close(); err != nil && r.err == nil {
			r.err = fmt.Errorf("close stdin: %w", kind(err))
		}
		var out, errb bytes.Buffer
		errc := make(chan error, 1)
		go func() {
			_, err := io.Copy(&errb, io.LimitReader(proc.Stderr, 1<<20))
			errc <- err
		}()
		_, oerr := io.Copy(&out, io.LimitReader(proc.Stdout, 1<<20))
		eerr := <-errc
		code, werr := proc.Wait(ctx, nil)
		r.res = agentenv.ExecResult{ExitCode: code, Stdout: out.Bytes(), Stderr: errb.Bytes()}
		for _, e := range []error{oerr, eerr, werr} {
			if e != nil && r.err == nil {
				r.err = fmt.Errorf("exec: %w", kind(e))
			}
		}
		ch <- r
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return r.res, ctxerr.Prefer(ctx, r.err)
		}
		return r.res, nil
	case <-ctx.Done():
		return agentenv.ExecResult{}, ctx.Err()
	}
}

// writerOnly hides a writer's other methods, so that io.CopyBuffer writes in its chunks.
type writerOnly struct{ io.Writer }

// vm returns a handle to VM id (detach it after use) and what RunInVM needs of it: from the
// cache for a VM made here, else read from Modal. A VM that finished is ErrGone.
func (p *Provider) vm(ctx context.Context, id string) (*modal.Sandbox, vmInfo, error) {
	client, _, err := p.connect(ctx)
	if err != nil {
		return nil, vmInfo{}, err
	}
	sb, err := client.Sandboxes.FromID(ctx, id, nil)
	if err != nil {
		return nil, vmInfo{}, kind(err)
	}
	p.mu.Lock()
	info, ok := p.vms[id]
	p.mu.Unlock()
	if ok {
		return sb, info, nil
	}
	d, meta, err := p.describe(ctx, sb)
	if err == nil && !meta.vm {
		err = fmt.Errorf("sandbox %s is not a modal_vm VM: %w", id, agentenv.ErrInvalid)
	}
	if err != nil {
		sb.Detach()
		return nil, vmInfo{}, err
	}
	info = vmInfo{tags: d.Labels, endpoints: d.Endpoints}
	p.mu.Lock()
	p.vms[id] = info
	p.mu.Unlock()
	return sb, info, nil
}

// forgetVM drops what is cached of VM id.
func (p *Provider) forgetVM(id string) {
	p.mu.Lock()
	delete(p.vms, id)
	p.mu.Unlock()
}

// RunInVM implements agentenv.VMHost: it starts spec as a container of vm's stack (see the
// package's VM mode notes), reachable by the others as spec.Name and spec.Aliases and from here
// at Endpoints, the tunnels of the slots its ports are published on. The image is uploaded from
// this host's engine when the VM lacks it; one missing from both is ErrInvalid naming it. A
// stack has Slots HTTP ports and TCPSlots service DB ports in all; more is ErrUnavailable. On
// error it removes the container it made (detached, bounded) and leaves the VM.
func (p *Provider) RunInVM(ctx context.Context, vm string, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	sb, err := p.runInVM(ctx, vm, spec, nil)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("modal: run %s in vm %s: %w", spec.Name, vm, err)
	}
	return sb, nil
}

// runInVM is RunInVM; slots, if not nil, are the VM ports to publish spec's ports on (Create's,
// chosen before the VM was made), instead of free ones of the stack.
func (p *Provider) runInVM(ctx context.Context, vm string, spec agentenv.SandboxSpec, slots map[int]int) (_ agentenv.Sandbox, err error) {
	if err := p.needVM("run in vm"); err != nil {
		return agentenv.Sandbox{}, err
	}
	if err := checkRun(spec); err != nil {
		return agentenv.Sandbox{}, err
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, err
	}
	sb, info, err := p.vm(ctx, vm)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	defer sb.Detach()
	note := ""
	if spec.Pinned != "" {
		// Pulled by the VM's engine; spec.Image instead when the pull fails.
		if spec.Image, note, err = vmdocker.PullPinned(ctx, vmShell{p, sb}, spec); err != nil {
			return agentenv.Sandbox{}, err
		}
	}
	if spec.Image != spec.Pinned {
		if err := p.ensureImage(ctx, sb, vm, spec.Image); err != nil {
			return agentenv.Sandbox{}, err
		}
	}
	labels := maps.Clone(info.tags)
	maps.Copy(labels, spec.Labels)

	// Slots are chosen and taken under the VM's lock (the stack's components start in
	// parallel); another process adding to the same VM would meet a port in use, an error.
	unlock, err := p.locks.LockContext(ctx, vm)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	defer unlock()
	if slots == nil {
		res, err := p.exec(ctx, sb, vmdocker.UsedPortsScript, nil, execTimeout)
		if err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("read the stack: %w", err)
		}
		if slots, err = p.pickSlots(vmdocker.ParseUsedPorts(string(res.Stdout)), spec); err != nil {
			return agentenv.Sandbox{}, err
		}
	}
	run := vmdocker.Run{Spec: spec, Labels: labels, Slots: slots}
	var files io.Reader
	if len(spec.Files) > 0 {
		archive, err := filetar.Pack("/", spec.Files)
		if err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("files: %w: %w", err, agentenv.ErrInvalid)
		}
		files, run.Files = bytes.NewReader(archive), "-"
	}
	defer func() {
		if err != nil {
			cctx, cancel := cleanup.Context(ctx, removeTimeout)
			defer cancel()
			if rerr := p.remove(cctx, sb, spec.Name); rerr != nil {
				p.log.Warn("remove a container that failed to start; it goes with the vm", "vm", vm, "container", spec.Name, "err", rerr)
			}
		}
	}()
	res, err := p.exec(ctx, sb, vmdocker.RunScript(run), files, execTimeout)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	if err := vmdocker.RunError(run, res.ExitCode, res.Stderr, imageHint); err != nil {
		return agentenv.Sandbox{}, err
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, err
	}
	st, err := vmdocker.ParseRun(string(res.Stdout), run)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	out := agentenv.Sandbox{ID: spec.Name, Name: spec.Name, Provider: p.cfg.Name, State: agentenv.SandboxRunning,
		Labels: labels, Endpoints: map[string]string{}, Created: time.Now(), ImageNote: note}
	if !st.Running {
		out.State, out.ExitCode = agentenv.SandboxExited, st.ExitCode
	}
	for port, slot := range slots {
		ep := info.endpoints[strconv.Itoa(slot)]
		if ep == "" {
			return agentenv.Sandbox{}, fmt.Errorf("slot %d of the vm has no tunnel: %w", slot, agentenv.ErrUnavailable)
		}
		out.Endpoints[strconv.Itoa(port)] = ep
	}
	return out, nil
}

// checkRun vets a RunInVM spec before anything is done.
func checkRun(spec agentenv.SandboxSpec) error {
	if !cloudapi.RecordName.MatchString(spec.Name) || spec.Image == "" {
		return fmt.Errorf("want a container name ([a-zA-Z0-9][a-zA-Z0-9_.-]{0,62}) and an image, have %q and %q: %w", spec.Name, spec.Image, agentenv.ErrInvalid)
	}
	for _, port := range spec.Ports {
		if port <= 0 || port > 65535 {
			return fmt.Errorf("port %d: want 1-65535: %w", port, agentenv.ErrInvalid)
		}
	}
	for file := range spec.Files {
		if !path.IsAbs(file) || path.Clean(file) == "/" {
			return fmt.Errorf("file %s: want an absolute path: %w", file, agentenv.ErrInvalid)
		}
	}
	if spec.Memory < 0 || spec.CPUs < 0 {
		return fmt.Errorf("negative limits: %w", agentenv.ErrInvalid)
	}
	return nil
}

// pickSlots chooses a free slot for each of spec's ports, given the VM ports taken: an
// unencrypted one for the service DB role, else an encrypted one.
func (p *Provider) pickSlots(taken map[int]bool, spec agentenv.SandboxSpec) (map[int]int, error) {
	taken = maps.Clone(taken)
	if taken == nil {
		taken = map[int]bool{}
	}
	enc, tcp := p.slotPorts()
	pool, kindName := enc, "encrypted"
	if spec.Labels[agentenv.LabelRole] == roleServiceDB {
		pool, kindName = tcp, "unencrypted (TCP)"
	}
	out := map[int]int{}
	for _, port := range spec.Ports {
		i := slices.IndexFunc(pool, func(s int) bool { return !taken[s] })
		if i < 0 {
			return nil, fmt.Errorf("no free %s slot for port %d (a vm has %d): %w", kindName, port, len(pool), agentenv.ErrUnavailable)
		}
		out[port] = pool[i]
		taken[pool[i]] = true
	}
	return out, nil
}

// ensureImage makes sure image is in the VM (see RunInVM). Uploads of one image into one VM
// are serialized, so the stack's components that share an image upload it once.
func (p *Provider) ensureImage(ctx context.Context, sb *modal.Sandbox, vm, image string) error {
	unlock, err := p.locks.LockContext(ctx, vm+"\x00image\x00"+image)
	if err != nil {
		return err
	}
	defer unlock()
	res, err := p.exec(ctx, sb, vmdocker.ImageIDScript(image), nil, execTimeout)
	if err != nil {
		return fmt.Errorf("image %s in the vm: %w", image, err)
	}
	inVM := strings.TrimSpace(string(res.Stdout))
	cli, err := p.localEngine()
	if err != nil {
		return fmt.Errorf("%w (%v)", vmdocker.MissingImage(image, imageHint), err)
	}
	if inVM != "" {
		got, err := cli.ImageInspect(ctx, image)
		if err != nil || got.ID == inVM {
			// The VM has it: the same as this host's, or one this host cannot compare (a VM
			// image made with it).
			if err != nil && !cerrdefs.IsNotFound(err) {
				p.log.Debug("image in the vm not compared with this host's", "image", image, "err", err)
			}
			return nil
		}
	}
	start := time.Now()
	lctx, cancel := context.WithTimeout(ctx, p.cfg.LoadTimeout)
	defer cancel()
	err = vmdocker.Upload(lctx, cli, image, func(ctx context.Context, saved io.Reader) error {
		res, err := p.exec(ctx, sb, vmdocker.LoadScript(""), saved, p.cfg.LoadTimeout)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("docker load exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
		}
		return err
	}, imageHint)
	if err != nil {
		return err
	}
	p.log.Debug("image uploaded into the vm", "vm", vm, "image", image, "took", time.Since(start))
	return nil
}

// vmShell is a VM sandbox's root shell, for what vmdocker does over one.
type vmShell struct {
	p  *Provider
	sb *modal.Sandbox
}

func (s vmShell) Run(ctx context.Context, script string) (agentenv.ExecResult, error) {
	return s.p.exec(ctx, s.sb, script, nil, s.p.cfg.LoadTimeout)
}

func (s vmShell) Put(ctx context.Context, file string, r io.Reader) error {
	res, err := s.p.exec(ctx, s.sb, "cat >"+shellquote.Join([]string{file}), r, execTimeout)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("write %s exited %d: %s", file, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return err
}

// imageHint says, in a missing image's error, where modal_vm gets its images.
const imageHint = "modal_vm uploads images from this host's Docker engine ($DOCKER_HOST), or use a VM image made with it"

// localEngine returns the client of the local Docker engine, made on first use (no I/O).
func (p *Provider) localEngine() (*dockerclient.Client, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.docker != nil {
		return p.docker, nil
	}
	cli, _, err := engine.Client(p.cfg.DockerHost)
	if err != nil {
		return nil, fmt.Errorf("local docker engine: %w", err)
	}
	p.docker = cli
	return cli, nil
}

// RemoveFromVM implements agentenv.VMHost with `docker rm -f` through an exec; a container, or
// a VM, that is gone counts as removed.
func (p *Provider) RemoveFromVM(ctx context.Context, vm, name string) error {
	if err := p.needVM("remove from vm"); err != nil {
		return err
	}
	if !cloudapi.RecordName.MatchString(name) {
		return fmt.Errorf("modal: remove %q from vm %s: want a container name: %w", name, vm, agentenv.ErrInvalid)
	}
	client, _, err := p.connect(ctx)
	if err != nil {
		return err
	}
	sb, err := client.Sandboxes.FromID(ctx, vm, nil)
	if err != nil {
		if err = kind(err); errors.Is(err, agentenv.ErrNotFound) {
			return nil
		}
		return fmt.Errorf("modal: remove %s from vm %s: %w", name, vm, err)
	}
	defer sb.Detach()
	if err := p.remove(ctx, sb, name); err != nil {
		return fmt.Errorf("modal: remove %s from vm %s: %w", name, vm, err)
	}
	return nil
}

// remove runs `docker rm -f name` in sb; gone counts as removed.
func (p *Provider) remove(ctx context.Context, sb *modal.Sandbox, name string) error {
	res, err := p.exec(ctx, sb, vmdocker.RemoveScript(name), nil, execTimeout)
	switch {
	case errors.Is(err, agentenv.ErrGone), errors.Is(err, agentenv.ErrNotFound):
		return nil
	case err != nil:
		return err
	}
	return vmdocker.Removed(res.ExitCode, res.Stderr)
}
