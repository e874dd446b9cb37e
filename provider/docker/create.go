package docker

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/ctxerr"
	"github.com/agentenv/agentenv/internal/engine"
	"github.com/agentenv/agentenv/internal/registrylogin"
)

// Bounds of the steps that run on a detached context, so that a cancelled caller never leaves
// a container whose existence we do not know.
const (
	createBound  = 30 * time.Second // one ContainerCreate request
	cleanupBound = 30 * time.Second // removing what a failed Create made
)

// loopback is where published ports listen: never on every interface.
var loopback = netip.MustParseAddr("127.0.0.1")

// Create makes a container named spec.Name from spec and returns once it is running, with its
// published ports read back into Endpoints. A process that exits at once is reported in the
// returned Sandbox (State exited, ExitCode) rather than as an error; Get then reports ErrGone.
//
// The container is created on a detached, bounded context, so Create always knows whether it
// exists; if ctx ends or any later step fails, Create removes everything labelled with the
// record before returning. A missing image is pulled once; if that fails the error wraps
// ErrInvalid and names the image. A spec whose agentenv.record label is not spec.Name is
// ErrInvalid. A container of the same name that already exists is ErrConflict and is left alone.
// With spec.Pinned, the pinned image runs (pulled by digest when the engine lacks it), or
// spec.Image when that pull fails; Sandbox.ImageNote says which.
func (p *Provider) Create(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if got := spec.Labels[agentenv.LabelRecord]; got != spec.Name {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create %s: label %s=%q, want the record id %q: %w",
			spec.Name, agentenv.LabelRecord, got, spec.Name, agentenv.ErrInvalid)
	}
	// On failure, everything labelled with the record goes.
	return p.create(ctx, spec.Name, spec, func(ctx context.Context) error { return p.terminate(ctx, spec.Name) })
}

// create makes and starts container name from spec; on failure it calls undo on a detached,
// bounded context if a container may exist.
func (p *Provider) create(ctx context.Context, name string, spec agentenv.SandboxSpec, undo func(context.Context) error) (sb agentenv.Sandbox, err error) {
	note := ""
	if spec.Pinned != "" {
		spec.Image, note = p.pinned(ctx, spec)
	}
	opts, err := containerOptions(p.cfg, name, spec)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create %s: %w", name, err)
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create %s: %w", name, err)
	}
	if err := p.checkMounts(ctx, spec); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create %s: %w", name, err)
	}
	log := p.log.With("record_id", spec.Labels[agentenv.LabelRecord], "container", name, "op", "create")
	log.Debug("create container", "image", spec.Image)

	made := false // whether a container may exist that this call must remove on error
	defer func() {
		if err == nil || !made {
			return
		}
		cctx, cancel := cleanup.Context(ctx, cleanupBound)
		defer cancel()
		if cerr := undo(cctx); cerr != nil {
			log.Warn("remove after failed create", "err", cerr)
			err = errors.Join(err, fmt.Errorf("docker: remove %s after failed create: %w", name, cerr))
		}
	}()

	made, err = p.createContainer(ctx, opts)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create %s: %w", name, engine.Kind(p.host, err))
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create %s: %w", name, err)
	}
	for file, data := range spec.Files {
		if err := p.WriteFile(ctx, name, file, data); err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("docker: create %s: %w", name, err)
		}
	}
	for _, j := range spec.Join {
		// Before the start, so the process never runs without the networks it needs. (The
		// engine's create takes one network before API 1.44.)
		_, err := p.cli.NetworkConnect(ctx, j.Network, client.NetworkConnectOptions{Container: name,
			EndpointConfig: &network.EndpointSettings{Aliases: slices.Clone(j.Aliases)}})
		if err != nil {
			if cerrdefs.IsNotFound(err) {
				err = fmt.Errorf("network %q: %w: %w", j.Network, agentenv.ErrInvalid, err)
			}
			return agentenv.Sandbox{}, fmt.Errorf("docker: join %s to network %s: %w", name, j.Network, engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
		}
	}
	if _, err := p.cli.ContainerStart(ctx, name, client.ContainerStartOptions{}); err != nil {
		if cerrdefs.IsNotFound(err) && spec.Network != "" && strings.Contains(err.Error(), "network") {
			// The engine checks the network to join at start, not at create.
			err = fmt.Errorf("network %q: %w: %w", spec.Network, agentenv.ErrInvalid, err)
		}
		return agentenv.Sandbox{}, fmt.Errorf("docker: start %s: %w", name, engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
	}
	res, err := p.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: inspect %s: %w", name, engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create %s: %w", name, err)
	}
	sb = p.fromInspect(name, res.Container)
	sb.ImageNote = note
	log.Debug("sandbox created", "state", sb.State, "endpoints", sb.Endpoints)
	return sb, nil
}

// pinned returns the image to run for spec.Pinned, and how it came: the pinned reference when
// the engine holds it or pulls it now (by digest), else spec.Image as the engine has it, with
// the pull's failure in the note. It never fails: a missing spec.Image fails the create as
// any missing image does.
func (p *Provider) pinned(ctx context.Context, spec agentenv.SandboxSpec) (image, note string) {
	if _, err := p.cli.ImageInspect(ctx, spec.Pinned); err == nil {
		return spec.Pinned, "pinned " + spec.Pinned + " (on the engine)"
	}
	if err := p.pull(ctx, spec.Pinned, spec.PullAuth); err != nil {
		p.log.Debug("pull of a pinned image failed; running the engine's own", "image", spec.Pinned, "fallback", spec.Image, "err", err)
		return spec.Image, fmt.Sprintf("pull of %s failed (%v); running %s from this host", spec.Pinned, err, spec.Image)
	}
	return spec.Pinned, "pulled " + spec.Pinned
}

// createContainer creates the container on a detached, bounded context, pulling a missing image
// once. It reports whether a container may exist: true unless the engine certainly made none.
func (p *Provider) createContainer(ctx context.Context, opts client.ContainerCreateOptions) (made bool, err error) {
	pulled := false
	for {
		cctx, cancel := cleanup.Detached(ctx, createBound)
		_, err = p.cli.ContainerCreate(cctx, opts)
		cancel()
		switch {
		case err == nil:
			return true, nil
		case client.IsErrConnectionFailed(err):
			return false, err
		case cerrdefs.IsConflict(err):
			// The name is taken: by an earlier create of the same record, which is not ours
			// to remove.
			return false, fmt.Errorf("container name %s in use: %w: %w", opts.Name, agentenv.ErrConflict, err)
		case cerrdefs.IsInvalidArgument(err):
			return false, fmt.Errorf("%w: %w", agentenv.ErrInvalid, err)
		case !cerrdefs.IsNotFound(err):
			return true, err
		}
		image := opts.Config.Image
		if _, ierr := p.cli.ImageInspect(ctx, image); ierr == nil {
			// The image is here, so what is missing is the network to join.
			return false, fmt.Errorf("network %q: %w: %w", opts.HostConfig.NetworkMode, agentenv.ErrInvalid, err)
		}
		if pulled {
			return false, fmt.Errorf("image %s: %w: %w", image, agentenv.ErrInvalid, err)
		}
		if perr := p.pull(ctx, image, nil); perr != nil {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			return false, fmt.Errorf("image %s not found locally and pull failed: %w: %w", image, agentenv.ErrInvalid, perr)
		}
		pulled = true
	}
}

// pull pulls image, logging in with auth (nil: anonymously), and waits for the pull to finish.
// An image of ImageRepo is one CreateImage
// built here, never a registry's: it is not asked for.
func (p *Provider) pull(ctx context.Context, image string, auth *agentenv.RegistryAuth) error {
	if strings.HasPrefix(image, ImageRepo+":") {
		return fmt.Errorf("an image agentenv builds on this engine (CreateImage), not pulled; it was removed or never built")
	}
	p.log.Info("pull image", "image", image)
	resp, err := p.cli.ImagePull(ctx, image, client.ImagePullOptions{RegistryAuth: registrylogin.Header(image, auth)})
	if err != nil {
		return err
	}
	defer resp.Close()
	return resp.Wait(ctx)
}

// containerOptions maps spec to the engine's create request. It does no I/O.
func containerOptions(cfg Config, name string, spec agentenv.SandboxSpec) (client.ContainerCreateOptions, error) {
	if err := checkID(name); err != nil {
		return client.ContainerCreateOptions{}, err
	}
	if spec.Labels[agentenv.LabelRecord] == "" {
		return client.ContainerCreateOptions{}, fmt.Errorf("no %s label: %w", agentenv.LabelRecord, agentenv.ErrInvalid)
	}
	if spec.Image == "" {
		return client.ContainerCreateOptions{}, fmt.Errorf("no image: %w", agentenv.ErrInvalid)
	}
	if spec.Memory < 0 || spec.CPUs < 0 || spec.Pids < 0 {
		return client.ContainerCreateOptions{}, fmt.Errorf("negative limits: %w", agentenv.ErrInvalid)
	}
	exposed, bindings, err := portBindings(spec.Ports)
	if err != nil {
		return client.ContainerCreateOptions{}, err
	}
	labels := maps.Clone(spec.Labels)
	if _, ok := labels[agentenv.LabelExpires]; !ok && !spec.Expires.IsZero() {
		labels[agentenv.LabelExpires] = spec.Expires.UTC().Format(time.RFC3339)
	}
	env := make([]string, 0, len(spec.Env))
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		env = append(env, k+"="+spec.Env[k])
	}
	memory, cpus := spec.Memory, spec.CPUs
	if memory == 0 {
		memory = cfg.DefaultMemory
	}
	if cpus == 0 {
		cpus = cfg.DefaultCPUs
	}
	pids := spec.Pids
	if pids == 0 {
		pids = cfg.DefaultPids
	}
	if pids == 0 {
		pids = agentenv.DefaultPidsLimit
	}
	grace := int((cfg.StopGrace + time.Second - 1) / time.Second)
	withInit := true

	opts := client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image:        spec.Image,
			Cmd:          spec.Command,
			Env:          env,
			WorkingDir:   spec.WorkDir,
			User:         spec.User,
			Labels:       labels,
			ExposedPorts: exposed,
			StopTimeout:  &grace,
		},
		HostConfig: &container.HostConfig{
			Init:         &withInit,
			SecurityOpt:  []string{"no-new-privileges"},
			CapDrop:      []string{"ALL"},
			CapAdd:       slices.Clone(spec.CapAdd),
			PortBindings: bindings,
			ShmSize:      spec.ShmSize,
			Resources: container.Resources{
				Memory:     memory,
				MemorySwap: memory, // the limit holds swap included: no swapping past it
				NanoCPUs:   int64(cpus * 1e9),
				PidsLimit:  &pids,
			},
		},
	}
	if opts.HostConfig.Mounts, err = mounts(spec); err != nil {
		return client.ContainerCreateOptions{}, err
	}
	if spec.Network != "" {
		if err := checkID(spec.Network); err != nil {
			return client.ContainerCreateOptions{}, fmt.Errorf("network: %w", err)
		}
		opts.HostConfig.NetworkMode = container.NetworkMode(spec.Network)
		opts.NetworkingConfig = &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			spec.Network: {Aliases: slices.Clone(spec.Aliases)},
		}}
	} else if len(spec.Aliases) > 0 || len(spec.Join) > 0 {
		return client.ContainerCreateOptions{}, fmt.Errorf("aliases or more networks without a network: %w", agentenv.ErrInvalid)
	}
	for _, j := range spec.Join {
		if err := checkID(j.Network); err != nil {
			return client.ContainerCreateOptions{}, fmt.Errorf("join network: %w", err)
		}
	}
	return opts, nil
}

// portBindings publishes each TCP port on 127.0.0.1 at a host port the engine picks.
func portBindings(ports []int) (network.PortSet, network.PortMap, error) {
	if len(ports) == 0 {
		return nil, nil, nil
	}
	exposed := make(network.PortSet, len(ports))
	bindings := make(network.PortMap, len(ports))
	for _, n := range ports {
		port, ok := network.PortFrom(uint16(n), network.TCP)
		if !ok || n < 1 || n > 65535 {
			return nil, nil, fmt.Errorf("port %d: want 1-65535: %w", n, agentenv.ErrInvalid)
		}
		exposed[port] = struct{}{}
		bindings[port] = []network.PortBinding{{HostIP: loopback, HostPort: ""}}
	}
	return exposed, bindings, nil
}

// endpointsFromBindings maps each published TCP port to the host address it is reached at.
func endpointsFromBindings(ports network.PortMap) map[string]string {
	out := make(map[string]string)
	for port, bs := range ports {
		if port.Proto() != network.TCP {
			continue
		}
		for _, b := range bs {
			if b.HostPort == "" {
				continue
			}
			ip := b.HostIP
			if !ip.IsValid() || ip.IsUnspecified() {
				ip = loopback
			}
			key := strconv.Itoa(int(port.Num()))
			if _, seen := out[key]; !seen || ip.Is4() {
				out[key] = net.JoinHostPort(ip.String(), b.HostPort)
			}
		}
	}
	return out
}

// endpointsFromSummary is endpointsFromBindings for the port list of a container listing.
func endpointsFromSummary(ports []container.PortSummary) map[string]string {
	out := make(map[string]string)
	for _, ps := range ports {
		if ps.PublicPort == 0 || (ps.Type != "" && ps.Type != "tcp") {
			continue
		}
		ip := ps.IP
		if !ip.IsValid() || ip.IsUnspecified() {
			ip = loopback
		}
		key := strconv.Itoa(int(ps.PrivatePort))
		if _, seen := out[key]; !seen || ip.Is4() {
			out[key] = net.JoinHostPort(ip.String(), strconv.Itoa(int(ps.PublicPort)))
		}
	}
	return out
}

// fromInspect makes the Sandbox of record id from a container's inspection.
func (p *Provider) fromInspect(id string, c container.InspectResponse) agentenv.Sandbox {
	sb := agentenv.Sandbox{ID: id, Name: id, Provider: p.cfg.Name, State: agentenv.SandboxCreating}
	if c.Config != nil {
		sb.Labels = c.Config.Labels
	}
	if c.State != nil {
		sb.State = sandboxState(c.State.Status)
		sb.ExitCode = c.State.ExitCode
	}
	if c.NetworkSettings != nil {
		sb.Endpoints = endpointsFromBindings(c.NetworkSettings.Ports)
	}
	sb.Created, _ = time.Parse(time.RFC3339Nano, c.Created)
	return sb
}

// sandboxState maps a container state to a sandbox state.
func sandboxState(s container.ContainerState) agentenv.SandboxState {
	switch s {
	case container.StateCreated:
		return agentenv.SandboxCreating
	case container.StateRunning, container.StatePaused, container.StateRestarting:
		return agentenv.SandboxRunning
	}
	return agentenv.SandboxExited // exited, dead, removing
}

// EnsureImage makes image available on the engine: present already, or pulled once. It is how a
// deploy refuses an env whose image cannot run before it starts anything. A missing image
// wraps ErrInvalid and names it; an engine that does not answer wraps ErrUnavailable.
func (p *Provider) EnsureImage(ctx context.Context, image string) error {
	_, err := p.cli.ImageInspect(ctx, image)
	if err == nil {
		return nil
	}
	if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("docker: image %s: %w", image, engine.Kind(p.host, err))
	}
	if perr := p.pull(ctx, image, nil); perr != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("docker: image %s: %w", image, ctx.Err())
		}
		return fmt.Errorf("docker: image %s not found locally and pull failed: %w: %w", image, agentenv.ErrInvalid, perr)
	}
	return nil
}
