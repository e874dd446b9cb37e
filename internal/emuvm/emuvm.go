// Package emuvm backs an emulated cloud sandbox with a real VM on the host's Docker engine, so
// that an API emulator (provider/e2b/e2bemu) runs what its clients ask for instead of only
// recording it. A VM is a Docker-in-Docker container: the agentenv-dind image (built by
// images/debian/build.sh dind) started with the capability recipe of provider/dockervm and of
// the feasibility notes (no --privileged, which this host refuses), its inner engine's
// /var/lib/docker on a volume of its own.
//
// A cloud template made for agentenv (an E2B template, for one) is built with the env's images
// baked in, so a sandbox made from it starts with them. A Host emulates that: the first Start
// loads Config.Preload from the host engine (docker save | docker load) into a template volume
// once, and every VM's engine starts on a copy of it (a copy takes seconds, a load of a large
// image tens of seconds).
//
// Every container and volume a Host makes carries the label agentenv.record (the VM's name, or
// the one given) and the labels it is given, so the repository's leftover checks and
// `agentenv gc` see them. A VM is reached from the host at its container's address on the
// engine's bridge network: nothing is published.
package emuvm

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"slices"
	"strconv"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/ctxerr"
	"github.com/agentenv/agentenv/internal/engine"
)

// Defaults for the zero values of Config.
const (
	DefaultImage     = "agentenv-dind:local"
	DefaultReadyWait = 60 * time.Second
	// DefaultLoadWait bounds the build of the template (every preloaded image).
	DefaultLoadWait = 5 * time.Minute
)

// Bounds of steps run on detached contexts.
const (
	createBound  = 30 * time.Second
	removeBound  = 60 * time.Second
	startCommand = "/usr/local/bin/agentenv-dind-start"
)

// Config configures a Host. Zero values mean the documented defaults.
type Config struct {
	Host      string            // engine address; default $DOCKER_HOST, else the local socket
	Image     string            // DinD image; default agentenv-dind:local
	Preload   []string          // host images every VM's engine starts with
	ReadyWait time.Duration     // wall-clock bound on a VM's inner engine start; default 60s
	LoadWait  time.Duration     // wall-clock bound on loading Preload into the template; default 5m
	Labels    map[string]string // added to everything the Host makes (test labels, say)
	// InMemory keeps each VM's engine data on a tmpfs volume (the template stays on disk): a
	// VM starts faster and costs memory, about the size of the preloaded images.
	InMemory bool
}

// Host starts VMs on one engine. It is safe for concurrent use. Close removes its template.
type Host struct {
	cfg Config
	cli *client.Client
	log *slog.Logger

	tmplOnce sync.Once
	tmpl     string // the template's builder container; its volume tmpl-docker is the template
	tmplErr  error
}

// New returns a Host for cfg. It does no I/O. A nil logger discards.
func New(cfg Config, logger *slog.Logger) (*Host, error) {
	if cfg.Image == "" {
		cfg.Image = DefaultImage
	}
	if cfg.ReadyWait <= 0 {
		cfg.ReadyWait = DefaultReadyWait
	}
	if cfg.LoadWait <= 0 {
		cfg.LoadWait = DefaultLoadWait
	}
	cli, _, err := engine.Client(cfg.Host)
	if err != nil {
		return nil, fmt.Errorf("emuvm: engine client: %w", err)
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Host{cfg: cfg, cli: cli, log: logger}, nil
}

// Close removes the template volume (after every VM made from it is removed) and closes the
// engine client, on a detached context bounded by a minute.
func (h *Host) Close(ctx context.Context) error {
	var err error
	if h.tmpl != "" {
		cctx, cancel := cleanup.Context(ctx, removeBound)
		defer cancel()
		err = h.removeAll(cctx, h.tmpl)
	}
	return errors.Join(err, h.cli.Close())
}

// VM is one DinD container and its volume. Its methods are safe for concurrent use.
type VM struct {
	h    *Host
	name string
	ip   string
}

// Name returns the VM's container name.
func (v *VM) Name() string { return v.name }

// Addr returns host:port at which the host reaches port of the VM: the container's address on
// the engine's bridge network.
func (v *VM) Addr(port int) string { return net.JoinHostPort(v.ip, strconv.Itoa(port)) }

// Start starts the VM name (a container name) labelled with labels plus agentenv.record=name
// unless labels name a record, and returns once its inner engine answers (bounded by
// Config.ReadyWait) with the preloaded images in it. On error or cancellation everything it made
// is removed before it returns.
func (h *Host) Start(ctx context.Context, name string, labels map[string]string) (_ *VM, err error) {
	if err := h.template(ctx); err != nil {
		return nil, fmt.Errorf("emuvm: start %s: %w", name, err)
	}
	all := maps.Clone(h.cfg.Labels)
	if all == nil {
		all = map[string]string{}
	}
	maps.Copy(all, labels)
	if all[agentenv.LabelRecord] == "" {
		all[agentenv.LabelRecord] = name
	}
	start := time.Now()
	defer func() {
		if err != nil {
			cctx, cancel := cleanup.Context(ctx, removeBound)
			defer cancel()
			if rerr := h.removeAll(cctx, name); rerr != nil {
				h.log.Warn("remove a vm that failed to start", "vm", name, "err", rerr)
			}
		}
	}()
	cmd := []string{startCommand}
	var mounts []mount.Mount
	if h.tmpl != "" {
		cmd = []string{"/bin/sh", "-c", "cp -a /template/. /var/lib/docker/ && exec " + startCommand}
		mounts = append(mounts, mount.Mount{Type: mount.TypeVolume, Source: h.tmpl + "-docker", Target: "/template", ReadOnly: true})
	}
	ip, err := h.run(ctx, name, all, cmd, mounts, h.cfg.InMemory)
	if err != nil {
		return nil, fmt.Errorf("emuvm: start %s: %w", name, err)
	}
	h.log.Debug("vm started", "vm", name, "ip", ip, "took", time.Since(start))
	return &VM{h: h, name: name, ip: ip}, nil
}

// run creates and starts a DinD container name with its data volume, and waits for its engine.
func (h *Host) run(ctx context.Context, name string, labels map[string]string, cmd []string, mounts []mount.Mount, tmpfs bool) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	cctx, cancel := cleanup.Detached(ctx, createBound)
	defer cancel()
	vol := name + "-docker"
	vo := client.VolumeCreateOptions{Name: vol, Labels: labels}
	if tmpfs {
		vo.Driver, vo.DriverOpts = "local", map[string]string{"type": "tmpfs", "device": "tmpfs"}
	}
	if _, err := h.cli.VolumeCreate(cctx, vo); err != nil {
		return "", fmt.Errorf("volume: %w", err)
	}
	mounts = append(mounts, mount.Mount{Type: mount.TypeVolume, Source: vol, Target: "/var/lib/docker"})
	_, err := h.cli.ContainerCreate(cctx, client.ContainerCreateOptions{
		Name:   name,
		Config: &container.Config{Image: h.cfg.Image, Labels: labels, Cmd: cmd},
		HostConfig: &container.HostConfig{
			CapAdd:        []string{"ALL"},
			CapDrop:       []string{"SYS_RESOURCE"},
			SecurityOpt:   []string{"seccomp=unconfined", "apparmor=unconfined"},
			MaskedPaths:   []string{},
			ReadonlyPaths: []string{},
			CgroupnsMode:  container.CgroupnsModePrivate,
			Resources:     container.Resources{DeviceCgroupRules: []string{"a *:* rwm"}},
			Mounts:        mounts,
		},
	})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			err = fmt.Errorf("image %s (build it with images/debian/build.sh dind): %w: %w", h.cfg.Image, agentenv.ErrInvalid, err)
		}
		return "", fmt.Errorf("create: %w", err)
	}
	if _, err := h.cli.ContainerStart(cctx, name, client.ContainerStartOptions{}); err != nil {
		return "", fmt.Errorf("start: %w", err)
	}
	if err := h.waitEngine(ctx, name); err != nil {
		return "", err
	}
	res, err := h.cli.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		return "", fmt.Errorf("inspect: %w", err)
	}
	if ns := res.Container.NetworkSettings; ns != nil {
		for _, ep := range ns.Networks {
			if ep != nil && ep.IPAddress.IsValid() {
				return ep.IPAddress.String(), nil
			}
		}
	}
	return "", fmt.Errorf("no address on any network: %w", agentenv.ErrUnavailable)
}

// waitEngine waits until the inner engine of name answers `docker info`, failing at once if the
// container stops.
func (h *Host) waitEngine(ctx context.Context, name string) error {
	wctx, cancel := context.WithTimeout(ctx, h.cfg.ReadyWait)
	defer cancel()
	var last error
	for {
		res, err := h.exec(wctx, name, []string{"docker", "info", "--format", "{{.ID}}"}, nil)
		if err == nil && res.ExitCode == 0 {
			return nil
		}
		last = err
		if err == nil {
			last = fmt.Errorf("docker info exited %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
		}
		if in, ierr := h.cli.ContainerInspect(wctx, name, client.ContainerInspectOptions{}); ierr == nil &&
			in.Container.State != nil && !in.Container.State.Running {
			return fmt.Errorf("inner engine exited (code %d): %w", in.Container.State.ExitCode, agentenv.ErrUnavailable)
		}
		select {
		case <-wctx.Done():
			if err := ctx.Err(); err != nil {
				return err
			}
			return fmt.Errorf("inner engine not ready within %s: %w: %w", h.cfg.ReadyWait, agentenv.ErrUnavailable, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Prepare builds the template now (the preloaded images loaded into an engine), once, so that
// the first Start does not pay for it within its caller's deadline; Start calls it too.
func (h *Host) Prepare(ctx context.Context) error {
	if err := h.template(ctx); err != nil {
		return fmt.Errorf("emuvm: prepare: %w", err)
	}
	return nil
}

// template builds the template volume once: a DinD container on it loads every preloaded image,
// then stops cleanly and is removed, leaving the volume.
func (h *Host) template(ctx context.Context) error {
	if len(h.cfg.Preload) == 0 {
		return nil
	}
	h.tmplOnce.Do(func() {
		// Built on a detached bounded context: concurrent Starts wait for it, and one caller's
		// cancellation must not fail them all.
		bctx, cancel := cleanup.Context(ctx, h.cfg.LoadWait)
		defer cancel()
		b := make([]byte, 4)
		rand.Read(b)
		name := "emuvm-template-" + hex.EncodeToString(b)
		h.tmpl = name
		h.tmplErr = h.buildTemplate(bctx, name)
	})
	return h.tmplErr
}

func (h *Host) buildTemplate(ctx context.Context, name string) error {
	start := time.Now()
	labels := maps.Clone(h.cfg.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	labels[agentenv.LabelRecord] = name
	if _, err := h.run(ctx, name, labels, []string{startCommand}, nil, false); err != nil {
		return fmt.Errorf("template: %w", err)
	}
	// The container goes; its volume is the template (named name-docker).
	defer func() {
		cctx, cancel := cleanup.Context(ctx, removeBound)
		defer cancel()
		if _, err := h.cli.ContainerRemove(cctx, name, client.ContainerRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
			h.log.Warn("remove the template's builder", "container", name, "err", err)
		}
	}()
	for _, image := range h.cfg.Preload {
		if err := h.load(ctx, name, image); err != nil {
			return fmt.Errorf("template: %w", err)
		}
	}
	timeout := 20
	if _, err := h.cli.ContainerStop(ctx, name, client.ContainerStopOptions{Timeout: &timeout}); err != nil {
		return fmt.Errorf("template: stop builder: %w", err)
	}
	h.log.Debug("template built", "volume", name+"-docker", "images", h.cfg.Preload, "took", time.Since(start))
	return nil
}

// load copies image from the host engine into the engine of container name.
func (h *Host) load(ctx context.Context, name, image string) error {
	saved, err := h.cli.ImageSave(ctx, []string{image})
	if err != nil {
		if cerrdefs.IsNotFound(err) {
			return fmt.Errorf("image %s is not on the host engine: %w: %w", image, agentenv.ErrInvalid, err)
		}
		return fmt.Errorf("save %s: %w", image, err)
	}
	defer saved.Close()
	res, err := h.exec(ctx, name, []string{"docker", "load", "-q"}, saved)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("docker load exited %d: %s", res.ExitCode, bytes.TrimSpace(res.Stderr))
	}
	if err != nil {
		return fmt.Errorf("load %s: %w", image, err)
	}
	return nil
}

// Run runs script with /bin/sh -c in the VM (as root, in its outer container, where the docker
// CLI talks to the inner engine), with stdin if not nil, and returns its exit code and output.
// When ctx ends first it returns ctx's error; the process may run on in the VM.
func (v *VM) Run(ctx context.Context, script string, stdin io.Reader) (agentenv.ExecResult, error) {
	res, err := v.h.exec(ctx, v.name, []string{"/bin/sh", "-c", script}, stdin)
	if err != nil {
		return res, fmt.Errorf("emuvm: run in %s: %w", v.name, err)
	}
	return res, nil
}

// exec runs cmd in container name and waits for it, bounded by ctx.
func (h *Host) exec(ctx context.Context, name string, cmd []string, stdin io.Reader) (agentenv.ExecResult, error) {
	ex, err := h.cli.ExecCreate(ctx, name, client.ExecCreateOptions{
		AttachStdin: stdin != nil, AttachStdout: true, AttachStderr: true, Cmd: cmd,
	})
	if err != nil {
		return agentenv.ExecResult{}, ctxerr.Prefer(ctx, err)
	}
	att, err := h.cli.ExecAttach(ctx, ex.ID, client.ExecAttachOptions{})
	if err != nil {
		return agentenv.ExecResult{}, ctxerr.Prefer(ctx, err)
	}
	defer att.Close()
	stop := context.AfterFunc(ctx, func() { att.Close() })
	defer stop()
	var out, errb bytes.Buffer
	done := make(chan error, 1)
	if stdin != nil {
		go func() {
			_, err := io.Copy(att.Conn, stdin)
			if cerr := att.CloseWrite(); err == nil {
				err = cerr
			}
			done <- err
		}()
	} else {
		done <- nil
	}
	_, rerr := stdcopy.StdCopy(&out, &errb, att.Reader)
	werr := <-done
	res := agentenv.ExecResult{Stdout: out.Bytes(), Stderr: errb.Bytes()}
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if rerr != nil {
		return res, fmt.Errorf("read output: %w", rerr)
	}
	if werr != nil {
		return res, fmt.Errorf("write input: %w", werr)
	}
	in, err := h.cli.ExecInspect(ctx, ex.ID, client.ExecInspectOptions{})
	if err != nil {
		return res, ctxerr.Prefer(ctx, err)
	}
	res.ExitCode = in.ExitCode
	return res, nil
}

// Remove removes the VM's container and volume, and so everything inside, on a detached
// context bounded by a minute. A VM that is gone counts as removed.
func (v *VM) Remove(ctx context.Context) error {
	cctx, cancel := cleanup.Context(ctx, removeBound)
	defer cancel()
	if err := v.h.removeAll(cctx, v.name); err != nil {
		return fmt.Errorf("emuvm: remove %s: %w", v.name, err)
	}
	return nil
}

// removeAll removes container name and its volume name-docker.
func (h *Host) removeAll(ctx context.Context, name string) error {
	var errs []error
	if _, err := h.cli.ContainerRemove(ctx, name, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil && !engine.IsGone(err) {
		errs = append(errs, fmt.Errorf("remove container: %w", err))
	}
	// The engine can still count the volume as in use by the container just removed (seen on a
	// loaded host): try again until ctx ends.
	for {
		_, err := h.cli.VolumeRemove(ctx, name+"-docker", client.VolumeRemoveOptions{Force: true})
		if err == nil || engine.IsGone(err) {
			break
		}
		if !cerrdefs.IsConflict(err) || ctx.Err() != nil {
			errs = append(errs, fmt.Errorf("remove volume: %w", err))
			break
		}
		select {
		case <-ctx.Done():
		case <-time.After(250 * time.Millisecond):
		}
	}
	return errors.Join(errs...)
}

// Machine is the real machine behind an emulated sandbox: a shell to run processes in, its
// ports' addresses, and its removal. *VM is one.
type Machine interface {
	// Run runs script with /bin/sh -c as root, with stdin if not nil, until it exits or ctx ends.
	Run(ctx context.Context, script string, stdin io.Reader) (agentenv.ExecResult, error)
	// Addr is host:port at which this process reaches port of the VM.
	Addr(port int) string
	// Remove removes the VM and everything in it; a VM that is gone counts as removed.
	Remove(ctx context.Context) error
}

// Backend starts the machines behind an emulator's sandboxes. name is unique per sandbox;
// labels are the sandbox's, which every object the backend makes must carry.
type Backend interface {
	StartVM(ctx context.Context, name string, labels map[string]string) (Machine, error)
}

// DinD returns a Backend whose machines are h's Docker-in-Docker containers.
func DinD(h *Host) Backend { return dind{h} }

type dind struct{ h *Host }

func (d dind) StartVM(ctx context.Context, name string, labels map[string]string) (Machine, error) {
	return d.h.Start(ctx, name, labels)
}

// Reaper removes an emulator's machines, now or in the background, and keeps the failures
// for a test to assert there are none. The zero value is ready; its methods are safe for
// concurrent use.
type Reaper struct {
	mu   sync.Mutex
	errs []error
	wg   sync.WaitGroup
}

// Remove removes m, the machine of sandbox id, bounded by a minute, and waits for it; a
// failure is kept for Errors.
func (r *Reaper) Remove(id string, m Machine) {
	ctx, cancel := context.WithTimeout(context.Background(), removeBound)
	defer cancel()
	if err := m.Remove(ctx); err != nil {
		r.mu.Lock()
		r.errs = append(r.errs, fmt.Errorf("sandbox %s: %w", id, err))
		r.mu.Unlock()
	}
}

// Go runs remove in the background; Wait waits for it.
func (r *Reaper) Go(remove func()) {
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		remove()
	}()
}

// Wait waits for every removal started with Go.
func (r *Reaper) Wait() { r.wg.Wait() }

// Errors returns the failed removals so far.
func (r *Reaper) Errors() []error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.errs)
}
