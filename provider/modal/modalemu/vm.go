package modalemu

import (
	"context"
	"net"
	"time"

	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
)

// Bounds of the VM backend.
const (
	vmStartBound  = 3 * time.Minute // starting one VM (its inner engine included)
	vmRemoveBound = 90 * time.Second
)

// createVM backs a new VM-runtime sandbox with a VM of Options.VM: it reserves the name, then
// starts the VM on a detached bounded context (a create completes even if the client gave up,
// as Modal's does), and returns the sandbox id once its engine answers. The VM is named
// modalemu-EMU-SANDBOX and labelled with the sandbox's tags, the emulator's labels and
// agentenv.record (the record tag, else the sandbox id). The image of the request is not used:
// every VM runs the VM backend's image. Tunnels point at the VM's address, at each open port.
// A sandbox terminated meanwhile has its VM removed as soon as it exists.
func (s *Server) createVM(ctx context.Context, req *pb.SandboxCreateRequest) (string, error) {
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
	if _, ok := s.images[def.GetImageId()]; !ok {
		s.mu.Unlock()
		return "", status.Errorf(codes.InvalidArgument, "image %s not found", def.GetImageId())
	}
	sb := &sandbox{
		id: s.id("sb"), name: def.GetName(), app: req.GetAppId(), tags: map[string]string{},
		created: time.Now(), timeout: time.Duration(def.GetTimeoutSecs()) * time.Second,
	}
	for _, t := range req.GetTags() {
		sb.tags[t.GetTagName()] = t.GetTagValue()
	}
	for _, p := range def.GetOpenPorts().GetPorts() {
		sb.ports = append(sb.ports, int(p.GetPort()))
	}
	sb.runCtx, sb.endRuns = context.WithCancel(context.Background())
	s.sandboxes[sb.id] = sb
	s.work.Add(1) // Close waits for this create
	s.mu.Unlock()
	defer s.work.Done()

	labels := map[string]string{}
	for k, v := range sb.tags {
		labels[k] = v
	}
	if labels[agentenv.LabelRecord] == "" {
		labels[agentenv.LabelRecord] = sb.id
	}
	labels[labelEmulator], labels[labelSandbox] = s.emu, sb.id
	cctx, cancel := cleanup.Context(ctx, vmStartBound)
	defer cancel()
	vm, err := s.vms.Start(cctx, "modalemu-"+s.emu+"-"+sb.id, labels)

	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if !sb.finished {
			sb.finish(pb.GenericResult_GENERIC_STATUS_FAILURE, 1)
		}
		delete(s.sandboxes, sb.id) // Modal made nothing (Start removed what it made)
		return "", status.Errorf(codes.Internal, "start vm for sandbox %s: %v", sb.id, err)
	}
	sb.vm = vm
	sb.removed = make(chan struct{})
	sb.onStop = func() { s.removeVM(sb) }
	if sb.finished || s.closed {
		// Terminated (or the emulator closed) while it started.
		sb.stop()
		return sb.id, nil
	}
	sb.tunnel, _, _ = net.SplitHostPort(vm.Addr(1))
	if sb.timeout > 0 {
		sb.timer = time.AfterFunc(time.Until(sb.created.Add(sb.timeout)), func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if !s.closed {
				sb.done()
			}
		})
	}
	return sb.id, nil
}

// removeVM removes sb's VM in the background, on a bounded context, and closes sb.removed when
// it is done; the caller holds s.mu. Close waits for it.
func (s *Server) removeVM(sb *sandbox) {
	vm, removed := sb.vm, sb.removed
	s.work.Add(1)
	go func() {
		defer s.work.Done()
		defer close(removed)
		ctx, cancel := context.WithTimeout(context.Background(), vmRemoveBound)
		defer cancel()
		if err := vm.Remove(ctx); err != nil {
			s.log.Warn("modalemu: remove a sandbox's vm", "sandbox_id", sb.id, "vm", vm.Name(), "err", err)
		}
	}()
}
