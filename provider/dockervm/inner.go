package dockervm

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/ctxerr"
	"github.com/agentenv/agentenv/internal/engine"
	"github.com/agentenv/agentenv/internal/filetar"
)

// stackNetwork is the inner network every component of a VM's stack joins.
const stackNetwork = "stack"

var anyAddr = netip.MustParseAddr("0.0.0.0")

// inner returns a client of vm's inner engine. Each connection it opens is an exec of
// `docker system dial-stdio` in the VM; keep-alives are off so that no exec outlives a request.
func (p *Provider) inner(vm string) (*client.Client, error) {
	tr := &http.Transport{
		DialContext:       func(ctx context.Context, _, _ string) (net.Conn, error) { return p.dialInner(ctx, vm) },
		DisableKeepAlives: true,
	}
	return client.New(client.WithHost("http://"+vm+".vm"), client.WithHTTPClient(&http.Client{Transport: tr}))
}

// dialInner opens a stream to vm's inner engine socket.
func (p *Provider) dialInner(ctx context.Context, vm string) (net.Conn, error) {
	ex, err := p.cli.ExecCreate(ctx, vm, client.ExecCreateOptions{
		AttachStdin: true, AttachStdout: true, AttachStderr: true,
		Cmd: []string{"docker", "system", "dial-stdio"},
	})
	if err != nil {
		return nil, fmt.Errorf("dial vm %s: %w", vm, engine.Kind(p.host, err))
	}
	att, err := p.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("dial vm %s: %w", vm, engine.Kind(p.host, err))
	}
	return &demuxConn{Conn: att.Conn, r: att.Reader}, nil
}

// demuxConn is a net.Conn over a non-TTY exec: writes go to the process's stdin, reads come
// from its stdout frames (the engine's 8-byte-header multiplexing); stderr frames are dropped.
type demuxConn struct {
	net.Conn
	r    io.Reader
	left int // bytes left in the current stdout frame
}

func (c *demuxConn) Read(b []byte) (int, error) {
	for c.left == 0 {
		var hdr [8]byte
		if _, err := io.ReadFull(c.r, hdr[:]); err != nil {
			if errors.Is(err, io.ErrUnexpectedEOF) {
				err = io.EOF
			}
			return 0, err
		}
		n := int(binary.BigEndian.Uint32(hdr[4:]))
		if hdr[0] != 1 { // not stdout
			if _, err := io.CopyN(io.Discard, c.r, int64(n)); err != nil {
				return 0, err
			}
			continue
		}
		c.left = n
	}
	if len(b) > c.left {
		b = b[:c.left]
	}
	n, err := c.r.Read(b)
	c.left -= n
	return n, err
}

// CloseWrite closes the process's stdin, as HTTP/1 clients expect of a half-closable conn.
func (c *demuxConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// RunInVM implements agentenv.VMHost: it loads spec.Image into vm's engine if it is missing or
// differs from the host's (with spec.Pinned, it has vm's engine pull that instead, and loads
// spec.Image only when the pull fails: Sandbox.ImageNote says which), then starts a container named spec.Name on the VM's inner network
// (reachable as spec.Name and spec.Aliases), with the VM's labels plus spec's role, every
// capability dropped but spec.CapAdd, and each of spec.Ports published on a free slot. The
// returned Sandbox has ID "VM-NAME", Name spec.Name, and Endpoints on the host. On error the
// container is removed and the VM left.
func (p *Provider) RunInVM(ctx context.Context, vm string, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	sb, err := p.run(ctx, vm, spec, nil, false)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker_vm: run %s in vm %s: %w", spec.Name, vm, err)
	}
	return sb, nil
}

// run starts spec in vm; slots, if set, fixes the slot of each port. With built, spec.Image
// is one built in the VM (Create's build), which the host engine has not: it is not loaded.
func (p *Provider) run(ctx context.Context, vm string, spec agentenv.SandboxSpec, slots map[int]int, built bool) (sb agentenv.Sandbox, err error) {
	if err := checkName("vm", vm); err != nil {
		return agentenv.Sandbox{}, err
	}
	if err := checkName("component", spec.Name); err != nil {
		return agentenv.Sandbox{}, err
	}
	if spec.Image == "" {
		return agentenv.Sandbox{}, fmt.Errorf("no image: %w", agentenv.ErrInvalid)
	}
	outer, err := p.cli.ContainerInspect(ctx, vm, client.ContainerInspectOptions{})
	if err != nil {
		return agentenv.Sandbox{}, engine.Kind(p.host, ctxerr.Prefer(ctx, err))
	}
	if outer.Container.Config == nil || outer.Container.Config.Labels[agentenv.LabelRecord] != vm {
		return agentenv.Sandbox{}, fmt.Errorf("not an agentenv vm: %w", agentenv.ErrInvalid)
	}
	if outer.Container.State == nil || !outer.Container.State.Running {
		return agentenv.Sandbox{}, fmt.Errorf("vm is not running: %w", agentenv.ErrGone)
	}
	vmSB := p.fromInspect(vm, outer.Container)
	labels := maps.Clone(outer.Container.Config.Labels)
	delete(labels, labelMain)
	delete(labels, labelPorts)
	if role := spec.Labels[agentenv.LabelRole]; role != "" {
		labels[agentenv.LabelRole] = role
	}
	in, err := p.inner(vm)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	defer in.Close()
	note := ""
	if !built {
		if spec.Image, note, err = p.image(ctx, in, vm, outer.Container, spec); err != nil {
			return agentenv.Sandbox{}, err
		}
	}
	net := stackNetwork
	if spec.Network != "" {
		if err := checkName("network", spec.Network); err != nil {
			return agentenv.Sandbox{}, err
		}
		net = spec.Network
	}
	if err := p.ensureNetwork(ctx, in, vm, net); err != nil {
		return agentenv.Sandbox{}, err
	}

	defer p.locks.Lock(vm)()
	chosen := slots
	if chosen == nil {
		if chosen, err = p.freeSlots(ctx, in, spec.Ports); err != nil {
			return agentenv.Sandbox{}, err
		}
	}
	opts, err := innerOptions(spec, net, labels, chosen)
	if err != nil {
		return agentenv.Sandbox{}, err
	}
	made := false
	defer func() {
		if err != nil && made {
			cctx, cancel := cleanup.Context(ctx, cleanupBound)
			defer cancel()
			if _, rerr := in.ContainerRemove(cctx, spec.Name, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); rerr != nil && !engine.IsGone(rerr) {
				err = errors.Join(err, fmt.Errorf("remove %s after failed start: %w", spec.Name, rerr))
			}
		}
	}()
	made = true
	cctx, cancel := cleanup.Detached(ctx, createBound)
	_, err = in.ContainerCreate(cctx, opts)
	cancel()
	if err != nil {
		if cerrdefs.IsConflict(err) {
			made = false
			return agentenv.Sandbox{}, fmt.Errorf("name in use: %w: %w", agentenv.ErrConflict, err)
		}
		return agentenv.Sandbox{}, engine.Kind(p.host, ctxerr.Prefer(ctx, err))
	}
	if len(spec.Files) > 0 {
		archive, err := filetar.Pack("/", spec.Files)
		if err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("files: %w: %w", err, agentenv.ErrInvalid)
		}
		if _, err := in.CopyToContainer(ctx, spec.Name, client.CopyToContainerOptions{DestinationPath: "/", Content: bytes.NewReader(archive)}); err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("write files: %w", ctxerr.Prefer(ctx, err))
		}
	}
	if _, err := in.ContainerStart(ctx, spec.Name, client.ContainerStartOptions{}); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("start: %w", engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
	}
	res, err := in.ContainerInspect(ctx, spec.Name, client.ContainerInspectOptions{})
	if err != nil {
		return agentenv.Sandbox{}, engine.Kind(p.host, ctxerr.Prefer(ctx, err))
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, err
	}
	sb = agentenv.Sandbox{ID: vm + "-" + spec.Name, Name: spec.Name, Provider: p.cfg.Name, State: agentenv.SandboxRunning,
		Labels: labels, Endpoints: map[string]string{}, Created: time.Now(), ImageNote: note}
	if st := res.Container.State; st != nil && !st.Running {
		sb.State, sb.ExitCode = agentenv.SandboxExited, st.ExitCode
	}
	for port, slot := range chosen {
		if a := vmSB.Endpoints[strconv.Itoa(slot)]; a != "" {
			sb.Endpoints[strconv.Itoa(port)] = a
		}
	}
	return sb, nil
}

// ensureImage loads image from the host engine into vm's engine unless the same image id is
// there already. Loads of one image into one VM are serialized.
func (p *Provider) ensureImage(ctx context.Context, in *client.Client, vm, image string) error {
	host, err := p.cli.ImageInspect(ctx, image)
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("image %s is not on the host engine: %w", image, agentenv.ErrInvalid)
		}
		return fmt.Errorf("image %s: %w", image, engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
	}
	defer p.locks.Lock(vm + "\x00" + image)()
	if got, err := in.ImageInspect(ctx, image); err == nil && got.ID == host.ID {
		return nil
	}
	start := time.Now()
	saved, err := p.cli.ImageSave(ctx, []string{image})
	if err != nil {
		return fmt.Errorf("save %s: %w", image, engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
	}
	defer saved.Close()
	loaded, err := in.ImageLoad(ctx, saved, client.ImageLoadWithQuiet(true))
	if err != nil {
		return fmt.Errorf("load %s into vm: %w", image, engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
	}
	defer loaded.Close()
	dec := json.NewDecoder(loaded)
	for {
		var msg struct {
			Error       string `json:"error"`
			ErrorDetail *struct {
				Message string `json:"message"`
			} `json:"errorDetail"`
		}
		if err := dec.Decode(&msg); err == io.EOF {
			break
		} else if err != nil {
			return fmt.Errorf("load %s into vm: %w", image, ctxerr.Prefer(ctx, err))
		}
		if msg.Error != "" {
			return fmt.Errorf("load %s into vm: %s", image, msg.Error)
		}
	}
	p.log.Debug("image loaded into vm", "record_id", vm, "image", image, "took", time.Since(start))
	return nil
}

// ensureNetwork makes the network net of the VM's stack once; the inner engine would accept
// two of one name, so creation is serialized.
func (p *Provider) ensureNetwork(ctx context.Context, in *client.Client, vm, net string) error {
	defer p.locks.Lock(vm + "\x00network")()
	if _, err := in.NetworkInspect(ctx, net, client.NetworkInspectOptions{}); err == nil {
		return nil
	}
	if _, err := in.NetworkCreate(ctx, net, client.NetworkCreateOptions{Driver: "bridge"}); err != nil {
		return fmt.Errorf("stack network %s: %w", net, engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
	}
	return nil
}

// freeSlots picks a free slot for each port, reading the slots the stack's containers publish.
func (p *Provider) freeSlots(ctx context.Context, in *client.Client, ports []int) (map[int]int, error) {
	if len(ports) == 0 {
		return nil, nil
	}
	cs, err := in.ContainerList(ctx, client.ContainerListOptions{All: true})
	if err != nil {
		return nil, fmt.Errorf("list stack: %w", engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
	}
	used := map[int]bool{}
	for _, c := range cs.Items {
		res, err := in.ContainerInspect(ctx, c.ID, client.ContainerInspectOptions{})
		if err != nil || res.Container.HostConfig == nil {
			continue
		}
		for _, bs := range res.Container.HostConfig.PortBindings {
			for _, b := range bs {
				if n, err := strconv.Atoi(b.HostPort); err == nil {
					used[n] = true
				}
			}
		}
	}
	out := map[int]int{}
	next := p.cfg.SlotBase
	for _, port := range ports {
		for next < p.cfg.SlotBase+p.cfg.Slots && used[next] {
			next++
		}
		if next >= p.cfg.SlotBase+p.cfg.Slots {
			return nil, fmt.Errorf("no free port slot (a vm has %d): %w", p.cfg.Slots, agentenv.ErrUnavailable)
		}
		out[port] = next
		next++
	}
	return out, nil
}

// innerOptions maps spec to the inner engine's create request. It does no I/O.
func innerOptions(spec agentenv.SandboxSpec, net string, labels map[string]string, slots map[int]int) (client.ContainerCreateOptions, error) {
	if spec.Memory < 0 || spec.CPUs < 0 {
		return client.ContainerCreateOptions{}, fmt.Errorf("negative limits: %w", agentenv.ErrInvalid)
	}
	pids := spec.Pids
	if pids <= 0 {
		pids = agentenv.DefaultPidsLimit
	}
	exposed := network.PortSet{}
	bindings := network.PortMap{}
	for _, n := range spec.Ports {
		port, ok := network.PortFrom(uint16(n), network.TCP)
		if !ok || n < 1 || n > 65535 {
			return client.ContainerCreateOptions{}, fmt.Errorf("port %d: want 1-65535: %w", n, agentenv.ErrInvalid)
		}
		exposed[port] = struct{}{}
		bindings[port] = []network.PortBinding{{HostIP: anyAddr, HostPort: strconv.Itoa(slots[n])}}
	}
	env := make([]string, 0, len(spec.Env))
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		env = append(env, k+"="+spec.Env[k])
	}
	return client.ContainerCreateOptions{
		Name: spec.Name,
		Config: &container.Config{
			Image: spec.Image, Cmd: spec.Command, Env: env, WorkingDir: spec.WorkDir,
			Labels: labels, ExposedPorts: exposed,
		},
		HostConfig: &container.HostConfig{
			NetworkMode:  container.NetworkMode(net),
			SecurityOpt:  []string{"no-new-privileges"},
			CapDrop:      []string{"ALL"},
			CapAdd:       slices.Clone(spec.CapAdd),
			PortBindings: bindings,
			Resources:    container.Resources{Memory: spec.Memory, MemorySwap: spec.Memory, NanoCPUs: int64(spec.CPUs * 1e9), PidsLimit: &pids},
		},
		NetworkingConfig: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{
			net: {Aliases: append([]string{spec.Name}, spec.Aliases...)},
		}},
	}, nil
}

// RemoveFromVM implements agentenv.VMHost: it removes the container name of vm's stack. A
// container, or a VM, that is gone counts as removed.
func (p *Provider) RemoveFromVM(ctx context.Context, vm, name string) error {
	if err := checkName("vm", vm); err != nil {
		return fmt.Errorf("docker_vm: remove from vm: %w", err)
	}
	if err := checkName("component", name); err != nil {
		return fmt.Errorf("docker_vm: remove from vm %s: %w", vm, err)
	}
	res, err := p.cli.ContainerInspect(ctx, vm, client.ContainerInspectOptions{})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("docker_vm: remove %s from vm %s: %w", name, vm, engine.Kind(p.host, err))
	}
	if res.Container.State == nil || !res.Container.State.Running {
		return nil // its stack is not running either; Terminate of the VM removes it
	}
	in, err := p.inner(vm)
	if err != nil {
		return fmt.Errorf("docker_vm: remove %s from vm %s: %w", name, vm, err)
	}
	defer in.Close()
	var nets []string
	if c, err := in.ContainerInspect(ctx, name, client.ContainerInspectOptions{}); err == nil && c.Container.NetworkSettings != nil {
		for n := range c.Container.NetworkSettings.Networks {
			if n != stackNetwork {
				nets = append(nets, n)
			}
		}
	}
	if _, err := in.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !engine.IsGone(err) {
		return fmt.Errorf("docker_vm: remove %s from vm %s: %w", name, vm, engine.Kind(p.host, err))
	}
	// A deployment's own network goes with its last container; while others are on it, the
	// engine refuses, and it stays for them.
	defer p.locks.Lock(vm + "\x00network")()
	for _, n := range nets {
		if _, err := in.NetworkRemove(ctx, n, client.NetworkRemoveOptions{}); err != nil {
			p.log.Debug("stack network kept", "record_id", vm, "network", n, "err", err)
		}
	}
	return nil
}
