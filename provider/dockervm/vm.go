package dockervm

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"strconv"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/ctxerr"
	"github.com/agentenv/agentenv/internal/engine"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

// Bounds of steps that run on a detached context, so that a cancelled caller never leaves an
// object whose existence is unknown.
const (
	createBound  = 30 * time.Second
	cleanupBound = 60 * time.Second
)

var loopback = netip.MustParseAddr("127.0.0.1")

// CreateVM implements agentenv.VMHost: it starts the DinD container named spec.Name with its
// inner-engine volume, both labelled spec.Labels, publishes the slot ports, and returns once the
// inner engine answers (bounded by Config.ReadyWait). spec.Image and spec.Command are ignored.
// On any error or cancellation everything labelled with the record is removed before it returns.
func (p *Provider) CreateVM(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	return p.createVM(ctx, spec, nil)
}

// Create runs spec as the only container of a fresh VM: CreateVM, then the image is loaded and
// the container started inside as RunInVM does, its ports on the VM's first slots. The Sandbox
// is the VM (ID and Name the record id), with the container's endpoints and state: it is
// exited, and Get reports ErrGone, once the container has finished. This is what a bare
// sandbox is on a VM-mode provider; deploys use CreateVM and RunInVM.
//
// With spec.Build (Capabilities.BuildInVM), the image is built inside the fresh VM first (see
// build) and runs as BuiltImage, the Sandbox's Image; its context and base images are checked
// on this host before the VM is made. The build lives and dies with the VM: nothing of it is
// on the host engine, and nothing is reused by the next VM.
func (p *Provider) Create(ctx context.Context, spec agentenv.SandboxSpec) (sb agentenv.Sandbox, err error) {
	if (spec.Image == "") == (spec.Build == nil) {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: create %s: want an image or a build, one of them: %w", spec.Name, agentenv.ErrInvalid)
	}
	if len(spec.Ports) > p.cfg.Slots {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: create %s: %d ports, a vm has %d slots: %w", spec.Name, len(spec.Ports), p.cfg.Slots, agentenv.ErrInvalid)
	}
	var vb vmBuild
	if spec.Build != nil {
		if vb, err = p.prepareBuild(ctx, spec); err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("docker_vm: create %s: build: %w", spec.Name, err)
		}
	} else if _, err := p.cli.ImageInspect(ctx, spec.Image); err != nil && spec.Pinned == "" {
		if cerrdefs.IsNotFound(err) {
			return agentenv.Sandbox{}, fmt.Errorf("docker_vm: create %s: image %s is not on the host engine: %w", spec.Name, spec.Image, agentenv.ErrInvalid)
		}
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: create %s: image %s: %w", spec.Name, spec.Image, engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
	}
	slots := map[int]int{}
	for i, port := range spec.Ports {
		slots[port] = p.cfg.SlotBase + i
	}
	extra := map[string]string{labelMain: "main", labelPorts: vmdocker.FormatSlots(slots)}
	vm, err := p.createVM(ctx, spec, extra)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	defer func() {
		if err != nil {
			p.undo(ctx, spec.Name)
		}
	}()
	inner := spec
	inner.Name, inner.Build = "main", nil
	if spec.Build != nil {
		start := time.Now()
		if inner.Image, err = p.build(ctx, vm.ID, vb); err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("docker_vm: create %s: %w", spec.Name, err)
		}
		p.log.Debug("vm's image ready", "record_id", spec.Name, "context", spec.Build.Context, "took", time.Since(start))
	}
	in, err := p.run(ctx, vm.ID, inner, slots, spec.Build != nil)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: create %s: %w", spec.Name, err)
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: create %s: %w", spec.Name, err)
	}
	vm.State, vm.ExitCode, vm.Endpoints, vm.ImageNote = in.State, in.ExitCode, in.Endpoints, in.ImageNote
	if spec.Build != nil {
		vm.Image = inner.Image
	}
	return vm, nil
}

func (p *Provider) createVM(ctx context.Context, spec agentenv.SandboxSpec, extra map[string]string) (sb agentenv.Sandbox, err error) {
	id := spec.Name
	if err := checkName("sandbox id", id); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: create vm: %w", err)
	}
	if got := spec.Labels[agentenv.LabelRecord]; got != id {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: create vm %s: label %s=%q, want the record id: %w", id, agentenv.LabelRecord, got, agentenv.ErrInvalid)
	}
	if spec.Memory < 0 || spec.CPUs < 0 {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: create vm %s: negative limits: %w", id, agentenv.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: create vm %s: %w", id, err)
	}
	labels := maps.Clone(spec.Labels)
	if _, ok := labels[agentenv.LabelExpires]; !ok && !spec.Expires.IsZero() {
		labels[agentenv.LabelExpires] = spec.Expires.UTC().Format(time.RFC3339)
	}
	log := p.log.With("record_id", id, "op", "create_vm")

	made := false
	defer func() {
		if err != nil && made {
			p.undo(ctx, id)
		}
	}()
	made = true // from the first request on, something may exist
	cctx, cancel := cleanup.Detached(ctx, createBound)
	_, err = p.cli.VolumeCreate(cctx, client.VolumeCreateOptions{Name: id + "-docker", Labels: labels})
	if err == nil {
		_, err = p.cli.ContainerCreate(cctx, p.containerOptions(id, spec, labels, extra))
	}
	cancel()
	if err != nil {
		if cerrdefs.IsConflict(err) {
			made = false // the name is an earlier create's, not ours to remove
			return agentenv.Sandbox{}, fmt.Errorf("docker_vm: create vm %s: name in use: %w: %w", id, agentenv.ErrConflict, err)
		}
		if cerrdefs.IsNotFound(err) {
			err = fmt.Errorf("image %s (build it with images/debian/build.sh dind): %w: %w", p.cfg.Image, agentenv.ErrInvalid, err)
		}
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: create vm %s: %w", id, engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: create vm %s: %w", id, err)
	}
	if err := p.writeDaemonConfig(ctx, id); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: create vm %s: %w", id, err)
	}
	if _, err := p.cli.ContainerStart(ctx, id, client.ContainerStartOptions{}); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: start vm %s: %w", id, engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
	}
	if err := p.waitEngine(ctx, id); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: vm %s: %w", id, err)
	}
	res, err := p.cli.ContainerInspect(ctx, id, client.ContainerInspectOptions{})
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: inspect vm %s: %w", id, engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: create vm %s: %w", id, err)
	}
	sb = p.fromInspect(id, res.Container)
	log.Debug("vm created", "endpoints", sb.Endpoints)
	return sb, nil
}

// containerOptions is the outer container: the DinD recipe without --privileged.
func (p *Provider) containerOptions(id string, spec agentenv.SandboxSpec, labels, extra map[string]string) client.ContainerCreateOptions {
	all := maps.Clone(labels)
	maps.Copy(all, extra)
	exposed := network.PortSet{}
	bindings := network.PortMap{}
	for i := range p.cfg.Slots {
		port, _ := network.PortFrom(uint16(p.cfg.SlotBase+i), network.TCP)
		exposed[port] = struct{}{}
		bindings[port] = []network.PortBinding{{HostIP: loopback}}
	}
	memory, cpus := spec.Memory, spec.CPUs
	if memory == 0 {
		memory = p.cfg.Memory
	}
	if cpus == 0 {
		cpus = p.cfg.CPUs
	}
	return client.ContainerCreateOptions{
		Name: id,
		Config: &container.Config{
			Image:        p.cfg.Image,
			Labels:       all,
			ExposedPorts: exposed,
		},
		HostConfig: &container.HostConfig{
			CapAdd:      []string{"ALL"},
			CapDrop:     []string{"SYS_RESOURCE"},
			SecurityOpt: []string{"seccomp=unconfined", "apparmor=unconfined"},
			// What the CLI's --security-opt systempaths=unconfined sends.
			MaskedPaths:   []string{},
			ReadonlyPaths: []string{},
			CgroupnsMode:  container.CgroupnsModePrivate,
			Resources: container.Resources{
				DeviceCgroupRules: []string{"a *:* rwm"},
				Memory:            memory,
				NanoCPUs:          int64(cpus * 1e9),
			},
			Mounts:       []mount.Mount{{Type: mount.TypeVolume, Source: id + "-docker", Target: "/var/lib/docker"}},
			PortBindings: bindings,
		},
	}
}

// waitEngine waits until the inner engine of vm answers, failing at once if the VM stops.
func (p *Provider) waitEngine(ctx context.Context, vm string) error {
	wctx, cancel := context.WithTimeout(ctx, p.cfg.ReadyWait)
	defer cancel()
	var last error
	for {
		in, err := p.inner(vm)
		if err == nil {
			pctx, pcancel := context.WithTimeout(wctx, 5*time.Second)
			_, err = in.Ping(pctx, client.PingOptions{NegotiateAPIVersion: true})
			pcancel()
			in.Close()
			if err == nil {
				return nil
			}
		}
		last = err
		if res, ierr := p.cli.ContainerInspect(wctx, vm, client.ContainerInspectOptions{}); ierr == nil &&
			res.Container.State != nil && !res.Container.State.Running {
			return fmt.Errorf("inner engine exited (code %d): %w", res.Container.State.ExitCode, agentenv.ErrUnavailable)
		}
		select {
		case <-wctx.Done():
			if err := ctx.Err(); err != nil {
				return err
			}
			return fmt.Errorf("inner engine not ready within %s: %w: %w", p.cfg.ReadyWait, agentenv.ErrUnavailable, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// undo removes everything of record id after a failed create, on a detached bounded context;
// what it cannot remove is still found by List.
func (p *Provider) undo(ctx context.Context, id string) {
	cctx, cancel := cleanup.Context(ctx, cleanupBound)
	defer cancel()
	if err := p.terminate(cctx, id); err != nil {
		p.log.Warn("remove vm after failed create", "record_id", id, "err", err)
	}
}

// Terminate removes every container and volume labelled agentenv.record=id: the VM, and with
// it its stack. One that is gone or being removed counts as removed; an unknown id is nil.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	if err := checkName("sandbox id", id); err != nil {
		return fmt.Errorf("docker_vm: terminate: %w", err)
	}
	if err := p.terminate(ctx, id); err != nil {
		return fmt.Errorf("docker_vm: terminate %s: %w", id, engine.Kind(p.host, err))
	}
	p.forget(id)
	return nil
}

func (p *Provider) terminate(ctx context.Context, id string) error {
	cs, err := p.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: engine.IDFilter(id)})
	if err != nil {
		return fmt.Errorf("list containers: %w", err)
	}
	var errs []error
	for _, c := range cs.Items {
		if _, err := p.cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !engine.IsGone(err) {
			errs = append(errs, fmt.Errorf("remove container %.12s: %w", c.ID, err))
		}
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	vs, err := p.cli.VolumeList(ctx, client.VolumeListOptions{Filters: engine.IDFilter(id)})
	if err != nil {
		return fmt.Errorf("list volumes: %w", err)
	}
	for _, v := range vs.Items {
		if _, err := p.cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true}); err != nil && !engine.IsGone(err) {
			errs = append(errs, fmt.Errorf("remove volume %s: %w", v.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Get returns the running VM of record id. It is ErrNotFound when nothing carries the record's
// label, and ErrGone when the VM (or, for a VM made by Create, its container) has finished.
func (p *Provider) Get(ctx context.Context, id string) (agentenv.Sandbox, error) {
	if err := checkName("sandbox id", id); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: get: %w", err)
	}
	sbs, err := p.list(ctx, map[string]string{agentenv.LabelRecord: id})
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: get %s: %w", id, engine.Kind(p.host, err))
	}
	if len(sbs) == 0 {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: get %s: %w", id, agentenv.ErrNotFound)
	}
	if sbs[0].State == agentenv.SandboxExited {
		return sbs[0], fmt.Errorf("docker_vm: get %s: exit code %d: %w", id, sbs[0].ExitCode, agentenv.ErrGone)
	}
	return sbs[0], nil
}

// List returns one Sandbox per record among the VMs (and volumes of VMs whose create failed
// half-way, listed as running so that a terminate removes them) that carry every one of labels.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]agentenv.Sandbox, error) {
	sbs, err := p.list(ctx, labels)
	if err != nil {
		return nil, fmt.Errorf("docker_vm: list: %w", engine.Kind(p.host, err))
	}
	return sbs, nil
}

func (p *Provider) list(ctx context.Context, labels map[string]string) ([]agentenv.Sandbox, error) {
	f := engine.RecordFilter(labels)
	cs, err := p.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return nil, err
	}
	vs, err := p.cli.VolumeList(ctx, client.VolumeListOptions{Filters: f})
	if err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	var out []agentenv.Sandbox
	for _, c := range cs.Items {
		id := c.Labels[agentenv.LabelRecord]
		if seen[id] {
			continue
		}
		seen[id] = true
		sb := agentenv.Sandbox{
			ID: id, Name: id, Provider: p.cfg.Name, Labels: c.Labels, Created: time.Unix(c.Created, 0),
			State: agentenv.SandboxExited, Endpoints: map[string]string{},
		}
		slotAddr := map[int]string{}
		for _, ps := range c.Ports {
			if ps.PublicPort != 0 && (!ps.IP.IsValid() || ps.IP.Is4()) {
				slotAddr[int(ps.PrivatePort)] = net.JoinHostPort(loopback.String(), strconv.Itoa(int(ps.PublicPort)))
			}
		}
		switch c.State {
		case container.StateRunning, container.StatePaused, container.StateRestarting:
			sb.State = agentenv.SandboxRunning
		case container.StateCreated:
			sb.State = agentenv.SandboxCreating
		}
		if c.Labels[labelMain] != "" {
			for port, slot := range vmdocker.ParseSlots(c.Labels[labelPorts]) {
				if a := slotAddr[slot]; a != "" {
					sb.Endpoints[strconv.Itoa(port)] = a
				}
			}
			if sb.State == agentenv.SandboxRunning {
				sb.State, sb.ExitCode = p.mainState(ctx, id, c.Labels[labelMain])
			}
		} else {
			for slot, a := range slotAddr {
				sb.Endpoints[strconv.Itoa(slot)] = a
			}
		}
		out = append(out, sb)
	}
	for _, v := range vs.Items {
		id := v.Labels[agentenv.LabelRecord]
		if seen[id] {
			continue
		}
		seen[id] = true
		out = append(out, agentenv.Sandbox{ID: id, Name: id, Provider: p.cfg.Name, Labels: v.Labels, State: agentenv.SandboxRunning, Endpoints: map[string]string{}})
	}
	return out, nil
}

// mainState reads the state of the main container of a VM made by Create; a VM whose inner
// engine does not answer counts as running (it is, as far as anyone can tell).
func (p *Provider) mainState(ctx context.Context, vm, main string) (agentenv.SandboxState, int) {
	in, err := p.inner(vm)
	if err != nil {
		return agentenv.SandboxRunning, 0
	}
	defer in.Close()
	res, err := in.ContainerInspect(ctx, main, client.ContainerInspectOptions{})
	if err != nil || res.Container.State == nil {
		return agentenv.SandboxRunning, 0
	}
	st := res.Container.State
	switch {
	case st.Running || st.Restarting || st.Paused:
		return agentenv.SandboxRunning, 0
	case st.Status == container.StateCreated:
		return agentenv.SandboxCreating, 0
	}
	return agentenv.SandboxExited, st.ExitCode
}

// fromInspect makes the Sandbox of VM id from its outer container's inspection; Endpoints
// maps each slot port to its host address.
func (p *Provider) fromInspect(id string, c container.InspectResponse) agentenv.Sandbox {
	sb := agentenv.Sandbox{ID: id, Name: id, Provider: p.cfg.Name, State: agentenv.SandboxRunning, Endpoints: map[string]string{}}
	if c.Config != nil {
		sb.Labels = c.Config.Labels
	}
	if c.State != nil && !c.State.Running {
		sb.State, sb.ExitCode = agentenv.SandboxExited, c.State.ExitCode
	}
	if c.NetworkSettings != nil {
		for port, bs := range c.NetworkSettings.Ports {
			for _, b := range bs {
				if b.HostPort != "" && (!b.HostIP.IsValid() || b.HostIP.Is4()) {
					sb.Endpoints[strconv.Itoa(int(port.Num()))] = net.JoinHostPort(loopback.String(), b.HostPort)
				}
			}
		}
	}
	sb.Created, _ = time.Parse(time.RFC3339Nano, c.Created)
	return sb
}
