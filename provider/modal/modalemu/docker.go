package modalemu

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/engine"
)

// Labels of what the Docker backend makes, besides agentenv.record and the sandbox's tags.
const (
	labelEmulator = "modalemu.emulator" // the emulator's id
	labelSandbox  = "modalemu.sandbox"  // the sandbox id a container backs
)

// Bounds of the Docker backend's engine calls.
const (
	startBound  = 2 * time.Minute  // creating and starting one container
	removeBound = 30 * time.Second // removing one sandbox's container
	sweepBound  = time.Minute      // Close's removal of everything left
)

// createContainer backs a new sandbox with a container: it reserves the name, then creates and
// starts the container on a detached bounded context (a create completes even if the client
// gave up, as Modal's does), and returns the sandbox id once it runs. A sandbox terminated
// meanwhile has its container removed as soon as it exists.
func (s *Server) createContainer(ctx context.Context, req *pb.SandboxCreateRequest) (string, error) {
	def := req.GetDefinition()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return "", status.Error(codes.Unavailable, "the emulator is closing")
	}
	if name := def.GetName(); name != "" {
		for _, o := range s.sandboxes {
			if o.name == name && o.app == req.GetAppId() && !o.done() {
				s.mu.Unlock()
				return "", status.Errorf(codes.AlreadyExists, "Sandbox with name '%s' already exists", name)
			}
		}
	}
	image, ok := s.images[def.GetImageId()]
	if !ok {
		s.mu.Unlock()
		return "", status.Errorf(codes.InvalidArgument, "image %s not found", def.GetImageId())
	}
	env := map[string]string{}
	for _, id := range def.GetSecretIds() {
		maps.Copy(env, s.secrets[id])
	}
	sb := &sandbox{
		id: s.id("sb"), name: def.GetName(), app: req.GetAppId(), tags: map[string]string{},
		created: time.Now(), timeout: time.Duration(def.GetTimeoutSecs()) * time.Second, i6pn: def.GetI6PnEnabled(),
	}
	for _, t := range req.GetTags() {
		sb.tags[t.GetTagName()] = t.GetTagValue()
	}
	for _, p := range def.GetOpenPorts().GetPorts() {
		sb.ports = append(sb.ports, int(p.GetPort()))
	}
	id := sb.id
	sb.onStop = func() { s.removeContainer(id) }
	s.sandboxes[sb.id] = sb
	s.creating.Add(1) // Close sweeps after this create
	s.mu.Unlock()
	defer s.creating.Done()

	cctx, cancel := cleanup.Context(ctx, startBound)
	defer cancel()
	tunnel, err := s.run(cctx, sb, image, env, def)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if !sb.finished {
			sb.finish(pb.GenericResult_GENERIC_STATUS_FAILURE, 1)
		}
		delete(s.sandboxes, sb.id) // Modal made nothing
		return "", status.Errorf(codes.Internal, "run sandbox %s: %v", sb.id, err)
	}
	if sb.finished || s.closed {
		// Terminated (or the emulator closed, whose sweep follows) while it started: remove
		// what start made.
		if !s.closed {
			s.removeContainer(sb.id)
		}
		return sb.id, nil
	}
	sb.tunnel = tunnel
	if sb.i6pn {
		sb.addr = tunnel
	}
	if sb.timeout > 0 {
		sb.timer = time.AfterFunc(time.Until(sb.created.Add(sb.timeout)), func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if !s.closed {
				sb.done()
			}
		})
	}
	s.watch(sb.id)
	return sb.id, nil
}

// run creates and starts sb's container and returns its address on its network.
func (s *Server) run(ctx context.Context, sb *sandbox, image string, env map[string]string, def *pb.Sandbox) (string, error) {
	netName := "bridge"
	if sb.i6pn {
		var err error
		if netName, err = s.i6pnNetwork(ctx); err != nil {
			return "", err
		}
	}
	labels := maps.Clone(sb.tags)
	if labels[agentenv.LabelRecord] == "" {
		labels[agentenv.LabelRecord] = sb.id
	}
	labels[labelEmulator], labels[labelSandbox] = s.emu, sb.id
	var envList []string
	for _, k := range slices.Sorted(maps.Keys(env)) {
		envList = append(envList, k+"="+env[k])
	}
	withInit := true
	name := "modalemu-" + s.emu + "-" + sb.id
	_, err := s.docker.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name: name,
		Config: &container.Config{
			Image: image, Cmd: def.GetEntrypointArgs(), Env: envList, WorkingDir: def.GetWorkdir(), Labels: labels,
		},
		HostConfig: &container.HostConfig{Init: &withInit, NetworkMode: container.NetworkMode(netName)},
	})
	if err != nil {
		if !cerrdefs.IsConflict(err) && !cerrdefs.IsNotFound(err) && !cerrdefs.IsInvalidArgument(err) {
			s.removeNow(sb.id) // the engine may have made it though the answer was lost
		}
		return "", fmt.Errorf("create container: %w", err)
	}
	if _, err := s.docker.ContainerStart(ctx, name, client.ContainerStartOptions{}); err != nil {
		s.removeNow(sb.id)
		return "", fmt.Errorf("start container: %w", err)
	}
	res, err := s.docker.ContainerInspect(ctx, name, client.ContainerInspectOptions{})
	if err != nil {
		s.removeNow(sb.id)
		return "", fmt.Errorf("inspect container: %w", err)
	}
	if ns := res.Container.NetworkSettings; ns != nil {
		if ep := ns.Networks[netName]; ep != nil && ep.IPAddress.IsValid() {
			return ep.IPAddress.String(), nil
		}
	}
	s.removeNow(sb.id)
	return "", fmt.Errorf("container %s has no address on network %s", name, netName)
}

// i6pnNetwork returns the emulator's one bridge network, the stand-in for the workspace's i6pn,
// making it on first use.
func (s *Server) i6pnNetwork(ctx context.Context) (string, error) {
	s.netMu.Lock()
	defer s.netMu.Unlock()
	if s.network != "" {
		return s.network, nil
	}
	name := "modalemu-" + s.emu + "-i6pn"
	_, err := s.docker.NetworkCreate(ctx, name, client.NetworkCreateOptions{
		Driver: "bridge",
		Labels: map[string]string{agentenv.LabelRecord: name, labelEmulator: s.emu},
	})
	if err != nil {
		return "", fmt.Errorf("create i6pn network: %w", err)
	}
	s.network = name
	return name, nil
}

// watch finishes sandbox id when its container exits on its own, with the container's exit
// code, as Modal reports a sandbox whose entrypoint returned.
func (s *Server) watch(id string) {
	s.work.Add(1)
	go func() {
		defer s.work.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 25*time.Hour) // beyond any sandbox timeout
		defer cancel()
		res := s.docker.ContainerWait(ctx, "modalemu-"+s.emu+"-"+id, client.ContainerWaitOptions{Condition: container.WaitConditionNotRunning})
		code := -1
		select {
		case r := <-res.Result:
			code = int(r.StatusCode)
		case <-res.Error:
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		sb := s.sandboxes[id]
		if sb == nil || sb.finished || s.closed {
			return
		}
		st := pb.GenericResult_GENERIC_STATUS_FAILURE
		if code == 0 {
			st = pb.GenericResult_GENERIC_STATUS_SUCCESS
		}
		sb.finish(st, code)
	}()
}

// removeContainer removes sandbox id's container in the background, on a bounded context. The
// caller holds s.mu. Once the emulator is closed, Close's sweep does it instead.
func (s *Server) removeContainer(id string) {
	if s.closed {
		return
	}
	s.work.Add(1)
	go func() {
		defer s.work.Done()
		s.removeNow(id)
	}()
}

// removeNow force-removes the containers (with their anonymous volumes) that back sandbox id,
// and returns once the engine lists none (a removal already in progress is waited for), or
// after removeBound.
func (s *Server) removeNow(id string) {
	ctx, cancel := context.WithTimeout(context.Background(), removeBound)
	defer cancel()
	labels := map[string]string{labelEmulator: s.emu, labelSandbox: id}
	for {
		left, err := s.remove(ctx, labels, false)
		if err == nil && left == 0 {
			return
		}
		select {
		case <-ctx.Done():
			s.log.Warn("modalemu: remove a sandbox's container; Close removes it", "sandbox_id", id, "left", left, "err", err)
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// sweep removes every container, then the network, this emulator made.
func (s *Server) sweep() {
	ctx, cancel := context.WithTimeout(context.Background(), sweepBound)
	defer cancel()
	if _, err := s.remove(ctx, map[string]string{labelEmulator: s.emu}, true); err != nil {
		s.log.Warn("modalemu: close: remove what the emulator made", "emulator", s.emu, "err", err)
	}
}

// remove force-removes the containers carrying labels, and with networks also the networks.
// It returns how many containers it found (0: none was left to remove).
func (s *Server) remove(ctx context.Context, labels map[string]string, networks bool) (int, error) {
	f, err := engine.LabelFilter(labels)
	if err != nil {
		return -1, err
	}
	cs, err := s.docker.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return -1, fmt.Errorf("list containers: %w", err)
	}
	var errs []error
	for _, c := range cs.Items {
		_, err := s.docker.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
		if err != nil && !engine.IsGone(err) {
			errs = append(errs, fmt.Errorf("remove container %s: %w", c.ID, err))
		}
	}
	if !networks {
		return len(cs.Items), errors.Join(errs...)
	}
	ns, err := s.docker.NetworkList(ctx, client.NetworkListOptions{Filters: f})
	if err != nil {
		return len(cs.Items), errors.Join(append(errs, fmt.Errorf("list networks: %w", err))...)
	}
	for _, n := range ns.Items {
		if _, err := s.docker.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("remove network %s: %w", n.Name, err))
		}
	}
	return len(cs.Items), errors.Join(errs...)
}
