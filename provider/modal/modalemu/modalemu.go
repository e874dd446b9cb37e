// Package modalemu is an in-process emulator of the subset of Modal's control-plane gRPC
// service (modal.client.ModalClient, as generated in github.com/modal-labs/modal-client/go
// v0.11.1, proto/modal_proto) that provider/modal uses through the official Go SDK: AuthTokenGet,
// EnvironmentGetOrCreate, AppGetOrCreate, ImageGetOrCreate, SecretGetOrCreate, SandboxCreate,
// SandboxGetTaskId, SandboxGetTunnels, SandboxWait, SandboxTerminate, SandboxList,
// SandboxTagsGet and TaskGetCommandRouterAccess; and of the exec half of the task command router
// (modal.task_command_router.TaskCommandRouter: TaskExecStart, TaskExecStdinWrite,
// TaskExecStdioRead, TaskExecWait),
// served on the same port. It speaks the real wire format: a grpc.Server on a loopback port,
// which the SDK reaches when MODAL_SERVER_URL is http://ADDR (and, the URL being a loopback one,
// the SDK dials the command router without TLS). Behaviour follows the SDK's own expectations,
// Modal's sandbox guide (https://modal.com/docs/guide/sandbox) and its private networking guide
// (https://modal.com/docs/guide/private-networking): terminate is a no-op once finished,
// tunnels of a finished sandbox are refused (FAILED_PRECONDITION, "already finished"), names are
// unique among an app's running sandboxes (ALREADY_EXISTS), finished sandboxes are not listed,
// and an i6pn sandbox must be pinned to exactly one region (INVALID_ARGUMENT otherwise).
//
// By default workloads are emulated, not run: a sandbox whose command is "exit N" finishes with
// code N shortly after it is scheduled; any other command "runs" until terminated or its
// timeout, and each of its open ports is served by a local HTTP server answering 200 on "/",
// which is what its tunnel points at. An i6pn sandbox gets a made-up private IPv6 address.
//
// With Options.Docker, every sandbox is a real container on that engine: the image is the local
// image of the tag in the SDK's FromRegistry FROM line (nothing is pulled; a tag the engine lacks
// fails the image build), run with the request's command, env (from its secrets) and workdir.
// Sandboxes with i6pn join one bridge network per emulator, the stand-in for the workspace's
// i6pn; a container's address on it is its private address (IPv4 here, where Modal's is IPv6),
// and others reach it there. Tunnels point at the container's address on its network, which
// this host reaches directly; the emulator cannot terminate TLS, so every tunnel, encrypted or
// not, also carries that address as its unencrypted host and port. A container that exits
// finishes its sandbox with its exit code; terminate, timeout and Close remove it (with its
// anonymous volumes), on bounded contexts. Every container and the network carry
// agentenv.record (the sandbox's record tag, else its id; the network's own name), the
// sandbox's tags, and modalemu.emulator=<id> (see Server.Labels).
//
// With Options.VM, every sandbox created with Runtime "vm" (Modal's VM sandboxes,
// https://modal.com/docs/guide/vm-sandboxes, which run Docker inside:
// https://modal.com/docs/guide/docker-in-sandboxes) is a real VM of internal/emuvm, a
// Docker-in-Docker container with its own engine already running (whatever image the request
// names: it must exist, and is otherwise unused). Its tunnels point at the VM's address at each
// open port, unencrypted as above; execs run in it for real (see router); terminate, timeout
// and Close remove it with its volume. Everything it makes on the engine carries
// agentenv.record, the sandbox's tags and the emulator's labels, as for containers.
//
// Exec in any other sandbox runs no commands: it answers one, a lookup of i6pn.modal.local
// (argv ending in that name, such as "getent ahosts i6pn.modal.local"), with the sandbox's
// private address in getent's format, whatever the image holds. Real Modal runs the command in
// the container, so there the image must have the resolver; the emulator standing in for it is
// a deviation.
//
// It misbehaves on demand (SetCreateFault, SetTerminateFault): a create that completes after the
// client gave up, a create that hangs until released, a create that fails with a given status
// (RESOURCE_EXHAUSTED for rate or capacity), and terminates that fail.
package modalemu

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/client"
	pb "github.com/modal-labs/modal-client/go/proto/modal_proto"

	"github.com/agentenv/agentenv/internal/emuvm"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/status"
)

// CreateFault makes SandboxCreate misbehave.
type CreateFault struct {
	// Err, if set, is returned and nothing is created (e.g. status.Error(codes.ResourceExhausted, ...)).
	Err error
	// Delay makes the server create the sandbox at once but answer only after Delay, whether or
	// not the client is still waiting: a create that completes after the client cancelled.
	Delay time.Duration
	// Hang, if set, holds the request until it is closed; the sandbox is created then (even if
	// the client has gone): a create request that hangs.
	Hang <-chan struct{}
	// LoseAnswer makes the server create the sandbox and answer UNAVAILABLE, as a connection
	// dropped after the create would: the SDK retries, and the retry finds the name taken.
	LoseAnswer bool
	// Times is how many creates the fault applies to; 0 means every one.
	Times int
}

// Server is the emulator. Its methods are safe for concurrent use.
type Server struct {
	pb.UnimplementedModalClientServer

	addr   string
	gs     *grpc.Server
	docker *client.Client // nil: workloads are emulated in memory
	vms    *emuvm.Host    // nil: VM-runtime sandboxes are emulated as the others are
	log    *slog.Logger
	emu    string // this emulator's id, in the names and labels of what it makes on the engine

	netMu   sync.Mutex // serialises making the i6pn network
	network string     // the i6pn stand-in network's name, once made

	mu        sync.Mutex
	next      int
	closed    bool
	apps      map[string]string            // name -> id
	images    map[string]string            // image id -> the tag of its FROM line
	secrets   map[string]map[string]string // secret id -> env
	sandboxes map[string]*sandbox
	createF   *CreateFault
	termErr   error
	termTimes int
	calls     map[string]int
	pending   sync.WaitGroup
	creating  sync.WaitGroup // container creates in flight; Close sweeps after them
	work      sync.WaitGroup // container removals, exit watchers and VM creates in flight
}

type sandbox struct {
	id, name, app string
	tags          map[string]string
	created       time.Time
	timeout       time.Duration
	finished      bool
	status        pb.GenericResult_GenericStatus
	exit          int
	servers       map[int]*httptest.Server

	i6pn   bool
	addr   string      // private (i6pn) address, "" without i6pn
	ports  []int       // open ports
	tunnel string      // docker: the container's address on its network, which tunnels point at
	onStop func()      // docker: removes the container
	timer  *time.Timer // docker: the timeout
	execs  map[string]*execution

	vm      *emuvm.VM          // VM runtime with a VM backend: the VM, once started
	removed chan struct{}      // VM: closed once the VM is removed after the sandbox stopped
	runCtx  context.Context    // VM: the context of the sandbox's execs, ended when it stops
	endRuns context.CancelFunc // VM: ends runCtx
}

// Options configure an emulator; the zero value emulates workloads in memory.
type Options struct {
	// Docker, if set, backs every sandbox with a real container on this engine (see the package
	// doc). The emulator does not close it.
	Docker *client.Client
	// VM, if set, backs every sandbox created with Runtime "vm" (the SDK's SandboxRuntimeVM)
	// by a real VM of this host (see the package doc). The emulator does not close it.
	VM *emuvm.Host
	// Logger receives the emulator's warnings (a removal that failed); nil discards.
	Logger *slog.Logger
}

// Start runs an emulator with in-memory workloads on a loopback port until Close.
func Start() (*Server, error) { return StartWith(Options{}) }

// StartWith runs an emulator configured by o on a loopback port until Close.
func StartWith(o Options) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("modalemu: listen: %w", err)
	}
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		l.Close()
		return nil, fmt.Errorf("modalemu: id: %w", err)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	// The SDK pings every 30 s, with or without a call in flight, as Modal's servers allow;
	// gRPC's default policy (5 min, only during calls) would answer with GOAWAY
	// "too_many_pings" and drop the calls on that connection.
	gs := grpc.NewServer(grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}))
	s := &Server{
		addr: l.Addr().String(), gs: gs, docker: o.Docker, vms: o.VM, log: o.Logger, emu: hex.EncodeToString(b[:]),
		apps: map[string]string{}, images: map[string]string{}, secrets: map[string]map[string]string{},
		sandboxes: map[string]*sandbox{}, calls: map[string]int{},
	}
	pb.RegisterModalClientServer(s.gs, s)
	pb.RegisterTaskCommandRouterServer(s.gs, &router{s: s})
	go s.gs.Serve(l)
	return s, nil
}

// Labels returns the labels that every container and network this emulator makes on the
// engine carries (besides agentenv.record and the sandbox's tags), to find its leftovers.
func (s *Server) Labels() map[string]string { return map[string]string{labelEmulator: s.emu} }

// URL is the value of MODAL_SERVER_URL that points the SDK here.
func (s *Server) URL() string { return "http://" + s.addr }

// Close stops the server and every workload, once the requests held by faults end. With a
// Docker backend it waits for the container creates in flight (gRPC's Stop does not wait for
// their handlers, and a create goes on after its client gave up), then removes every container
// and network the emulator made (bounded; a failure is logged), and returns once its removals
// and watchers have ended.
func (s *Server) Close() {
	s.gs.Stop()
	s.pending.Wait()
	s.mu.Lock()
	s.closed = true
	for _, sb := range s.sandboxes {
		if sb.timer != nil {
			sb.timer.Stop()
		}
		sb.stop()
	}
	s.mu.Unlock()
	if s.docker != nil {
		s.creating.Wait()
		s.sweep()
	}
	s.work.Wait()
}

// SetCreateFault makes the next creates misbehave as f says; nil clears it.
func (s *Server) SetCreateFault(f *CreateFault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.createF = f
}

// SetTerminateFault makes the next times terminates (every one if times is 0) fail with err;
// a nil err clears it.
func (s *Server) SetTerminateFault(err error, times int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.termErr, s.termTimes = err, times
}

// Calls returns how many times method (such as "SandboxCreate") was called.
func (s *Server) Calls(method string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.calls[method]
}

// Running returns the ids of the sandboxes that have not finished, sorted.
func (s *Server) Running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for id, sb := range s.sandboxes {
		if !sb.done() {
			out = append(out, id+" ("+sb.name+")")
		}
	}
	sort.Strings(out)
	return out
}

// Kill finishes sandbox id out of band with exit code, as an OOM kill or a crash would.
func (s *Server) Kill(id string, code int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb := s.sandboxes[id]; sb != nil && !sb.done() {
		sb.finish(pb.GenericResult_GENERIC_STATUS_FAILURE, code)
	}
}

// done reports whether sb has finished, finishing it first if its timeout passed.
func (sb *sandbox) done() bool {
	if !sb.finished && sb.timeout > 0 && time.Since(sb.created) > sb.timeout {
		sb.finish(pb.GenericResult_GENERIC_STATUS_TIMEOUT, 124)
	}
	return sb.finished
}

func (sb *sandbox) finish(st pb.GenericResult_GenericStatus, code int) {
	sb.finished, sb.status, sb.exit = true, st, code
	sb.stop()
}

func (sb *sandbox) stop() {
	if sb.endRuns != nil {
		sb.endRuns()
	}
	for _, srv := range sb.servers {
		srv.Close()
	}
	sb.servers = nil
	if sb.onStop != nil {
		sb.onStop()
		sb.onStop = nil
	}
}

func (s *Server) count(method string) {
	s.mu.Lock()
	s.calls[method]++
	s.mu.Unlock()
}

// id returns a fresh object id in Modal's form: a prefix, a dash and 22 base-62 characters
// (the SDK tells a V1 sandbox from a V2 one by this shape).
func (s *Server) id(prefix string) string {
	s.next++
	return fmt.Sprintf("%s-emu%019d", prefix, s.next)
}

// AuthTokenGet implements the SDK's token fetch: an unsigned JWT whose exp is an hour away.
func (s *Server) AuthTokenGet(context.Context, *pb.AuthTokenGetRequest) (*pb.AuthTokenGetResponse, error) {
	s.count("AuthTokenGet")
	return pb.AuthTokenGetResponse_builder{Token: token()}.Build(), nil
}

// EnvironmentGetOrCreate returns the one environment, with an image builder version.
func (s *Server) EnvironmentGetOrCreate(_ context.Context, req *pb.EnvironmentGetOrCreateRequest) (*pb.EnvironmentGetOrCreateResponse, error) {
	s.count("EnvironmentGetOrCreate")
	return pb.EnvironmentGetOrCreateResponse_builder{
		EnvironmentId: "en-emu",
		Metadata: pb.EnvironmentMetadata_builder{
			Name:     "main",
			Settings: pb.EnvironmentSettings_builder{ImageBuilderVersion: "2024.10"}.Build(),
		}.Build(),
	}.Build(), nil
}

// AppGetOrCreate looks an app up by name, creating it when asked to.
func (s *Server) AppGetOrCreate(_ context.Context, req *pb.AppGetOrCreateRequest) (*pb.AppGetOrCreateResponse, error) {
	s.count("AppGetOrCreate")
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.apps[req.GetAppName()]
	if !ok {
		if req.GetObjectCreationType() != pb.ObjectCreationType_OBJECT_CREATION_TYPE_CREATE_IF_MISSING {
			return nil, status.Errorf(codes.NotFound, "App '%s' not found", req.GetAppName())
		}
		id = s.id("ap")
		s.apps[req.GetAppName()] = id
	}
	return pb.AppGetOrCreateResponse_builder{AppId: id}.Build(), nil
}

// ImageGetOrCreate "builds" an image at once. A FROM line naming an image with "invalid" in it
// fails the build, as a registry image that does not exist would; with a Docker backend, so
// does one the engine does not have (the emulator pulls nothing).
func (s *Server) ImageGetOrCreate(ctx context.Context, req *pb.ImageGetOrCreateRequest) (*pb.ImageGetOrCreateResponse, error) {
	s.count("ImageGetOrCreate")
	s.mu.Lock()
	id := s.id("im")
	s.mu.Unlock()
	res := pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_SUCCESS}
	tag := ""
	for _, c := range req.GetImage().GetDockerfileCommands() {
		if from, ok := strings.CutPrefix(c, "FROM "); ok {
			tag = strings.TrimSpace(from)
		}
	}
	switch {
	case strings.Contains(tag, "invalid"):
		res = pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_FAILURE, Exception: "pull access denied for " + tag}
	case s.docker != nil:
		if _, err := s.docker.ImageInspect(ctx, tag); err != nil {
			res = pb.GenericResult_builder{Status: pb.GenericResult_GENERIC_STATUS_FAILURE, Exception: fmt.Sprintf("image %s: not on the local engine: %v", tag, err)}
		}
	}
	s.mu.Lock()
	s.images[id] = tag
	s.mu.Unlock()
	return pb.ImageGetOrCreateResponse_builder{ImageId: id, Result: res.Build()}.Build(), nil
}

// SecretGetOrCreate stores the env dict and returns an id (the SDK folds env vars into a
// secret); a sandbox naming it gets that env.
func (s *Server) SecretGetOrCreate(_ context.Context, req *pb.SecretGetOrCreateRequest) (*pb.SecretGetOrCreateResponse, error) {
	s.count("SecretGetOrCreate")
	s.mu.Lock()
	defer s.mu.Unlock()
	id := s.id("st")
	s.secrets[id] = maps.Clone(req.GetEnvDict())
	return pb.SecretGetOrCreateResponse_builder{SecretId: id}.Build(), nil
}

// SandboxCreate creates a sandbox, subject to the create fault.
func (s *Server) SandboxCreate(ctx context.Context, req *pb.SandboxCreateRequest) (*pb.SandboxCreateResponse, error) {
	s.count("SandboxCreate")
	s.mu.Lock()
	f := s.createF
	if f != nil && f.Times > 0 {
		f.Times--
		if f.Times == 0 {
			s.createF = nil
		}
	}
	s.mu.Unlock()
	if f != nil && f.Err != nil {
		return nil, f.Err
	}
	if f != nil && f.Hang != nil {
		s.pending.Add(1)
		defer s.pending.Done()
		<-f.Hang
	}
	id, err := s.create(ctx, req)
	if err != nil {
		return nil, err
	}
	if f != nil && f.Delay > 0 {
		s.pending.Add(1)
		defer s.pending.Done()
		time.Sleep(f.Delay) // the sandbox exists; the answer comes late, waited for or not
	}
	if f != nil && f.LoseAnswer {
		return nil, status.Error(codes.Unavailable, "modalemu: connection lost after the create")
	}
	return pb.SandboxCreateResponse_builder{SandboxId: id}.Build(), nil
}

func (s *Server) create(ctx context.Context, req *pb.SandboxCreateRequest) (string, error) {
	def := req.GetDefinition()
	if def.GetI6PnEnabled() && len(def.GetSchedulerPlacement().GetRegions()) != 1 {
		// Modal's private networking guide: pin every sandbox of the group to one region.
		return "", status.Errorf(codes.InvalidArgument, "i6pn sandboxes must be pinned to exactly one region, have %v", def.GetSchedulerPlacement().GetRegions())
	}
	if def.GetRuntime() == "vm" && s.vms != nil {
		return s.createVM(ctx, req)
	}
	if s.docker != nil {
		return s.createContainer(ctx, req)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if name := def.GetName(); name != "" {
		for _, o := range s.sandboxes {
			if o.name == name && o.app == req.GetAppId() && !o.done() {
				return "", status.Errorf(codes.AlreadyExists, "Sandbox with name '%s' already exists", name)
			}
		}
	}
	sb := &sandbox{
		id: s.id("sb"), name: def.GetName(), app: req.GetAppId(), tags: map[string]string{},
		created: time.Now(), timeout: time.Duration(def.GetTimeoutSecs()) * time.Second, servers: map[int]*httptest.Server{},
	}
	for _, t := range req.GetTags() {
		sb.tags[t.GetTagName()] = t.GetTagValue()
	}
	if sb.i6pn = def.GetI6PnEnabled(); sb.i6pn {
		sb.addr = fmt.Sprintf("fdaa:0:e:%x::2", s.next)
	}
	args := def.GetEntrypointArgs()
	if len(args) == 2 && args[0] == "exit" {
		code, _ := strconv.Atoi(args[1])
		time.AfterFunc(200*time.Millisecond, func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if !sb.finished {
				sb.finish(pb.GenericResult_GENERIC_STATUS_FAILURE, code)
			}
		})
	} else {
		for _, p := range def.GetOpenPorts().GetPorts() {
			sb.servers[int(p.GetPort())] = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				fmt.Fprintf(w, "emulated %s port %d\n", sb.id, p.GetPort())
			}))
		}
	}
	s.sandboxes[sb.id] = sb
	return sb.id, nil
}

// lookup returns sandbox id or NOT_FOUND.
func (s *Server) lookup(id string) (*sandbox, error) {
	sb := s.sandboxes[id]
	if sb == nil {
		return nil, status.Errorf(codes.NotFound, "Sandbox %s not found", id)
	}
	return sb, nil
}

func (sb *sandbox) result() *pb.GenericResult {
	if !sb.done() {
		return nil
	}
	return pb.GenericResult_builder{Status: sb.status, Exitcode: int32(sb.exit)}.Build()
}

// SandboxGetTaskId schedules every sandbox at once.
func (s *Server) SandboxGetTaskId(_ context.Context, req *pb.SandboxGetTaskIdRequest) (*pb.SandboxGetTaskIdResponse, error) {
	s.count("SandboxGetTaskId")
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, err := s.lookup(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	return pb.SandboxGetTaskIdResponse_builder{TaskId: new("ta-" + sb.id)}.Build(), nil
}

// SandboxGetTunnels returns a tunnel per open port; a finished sandbox's are refused.
func (s *Server) SandboxGetTunnels(_ context.Context, req *pb.SandboxGetTunnelsRequest) (*pb.SandboxGetTunnelsResponse, error) {
	s.count("SandboxGetTunnels")
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, err := s.lookup(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if sb.done() {
		return nil, status.Errorf(codes.FailedPrecondition, "Sandbox has already finished with status %s", sb.status)
	}
	var ts []*pb.TunnelData
	if sb.tunnel != "" {
		// A real container: its ports are reached on its bridge address (no TLS: every tunnel,
		// encrypted or not, also carries the unencrypted host and port).
		for _, port := range sb.ports {
			ts = append(ts, pb.TunnelData_builder{
				Host: sb.tunnel, Port: uint32(port), UnencryptedHost: &sb.tunnel, UnencryptedPort: new(uint32(port)), ContainerPort: uint32(port),
			}.Build())
		}
	}
	for port, srv := range sb.servers {
		host, p, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
		n, _ := strconv.Atoi(p)
		ts = append(ts, pb.TunnelData_builder{
			Host: host, Port: uint32(n), UnencryptedHost: &host, UnencryptedPort: new(uint32(n)), ContainerPort: uint32(port),
		}.Build())
	}
	return pb.SandboxGetTunnelsResponse_builder{Tunnels: ts}.Build(), nil
}

// SandboxWait returns the result of a finished sandbox; for a running one it waits up to the
// request's timeout.
func (s *Server) SandboxWait(ctx context.Context, req *pb.SandboxWaitRequest) (*pb.SandboxWaitResponse, error) {
	s.count("SandboxWait")
	deadline := time.Now().Add(time.Duration(req.GetTimeout() * float32(time.Second)))
	for {
		s.mu.Lock()
		sb, err := s.lookup(req.GetSandboxId())
		var res *pb.GenericResult
		if err == nil {
			res = sb.result()
		}
		s.mu.Unlock()
		if err != nil {
			return nil, err
		}
		if res != nil || !time.Now().Before(deadline) {
			return pb.SandboxWaitResponse_builder{Result: res}.Build(), nil
		}
		select {
		case <-ctx.Done():
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// SandboxTerminate terminates a running sandbox; a finished one keeps its result (no-op).
func (s *Server) SandboxTerminate(_ context.Context, req *pb.SandboxTerminateRequest) (*pb.SandboxTerminateResponse, error) {
	s.count("SandboxTerminate")
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.termErr != nil {
		err := s.termErr
		if s.termTimes > 0 {
			if s.termTimes--; s.termTimes == 0 {
				s.termErr = nil
			}
		}
		return nil, err
	}
	sb, err := s.lookup(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	if !sb.done() {
		sb.finish(pb.GenericResult_GENERIC_STATUS_TERMINATED, 137)
	}
	res := sb.result()
	if sb.removed != nil {
		// Answer once the VM is gone (bounded), as for a container below.
		s.mu.Unlock()
		select {
		case <-sb.removed:
		case <-time.After(vmRemoveBound):
		}
		s.mu.Lock()
	} else if s.docker != nil && !s.closed {
		// Answer once the container is gone (bounded), so that a caller that lists the
		// engine after a terminate finds nothing.
		s.mu.Unlock()
		s.removeNow(sb.id)
		s.mu.Lock()
	}
	return pb.SandboxTerminateResponse_builder{ExistingResult: res}.Build(), nil
}

// SandboxList lists the app's running sandboxes carrying every requested tag, newest first,
// in pages of 2 (to exercise the SDK's paging) before BeforeTimestamp.
func (s *Server) SandboxList(_ context.Context, req *pb.SandboxListRequest) (*pb.SandboxListResponse, error) {
	s.count("SandboxList")
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*sandbox
	for _, sb := range s.sandboxes {
		if req.GetAppId() != "" && sb.app != req.GetAppId() || sb.done() && !req.GetIncludeFinished() {
			continue
		}
		if b := req.GetBeforeTimestamp(); b != 0 && ts(sb.created) >= b {
			continue
		}
		match := true
		for _, t := range req.GetTags() {
			if sb.tags[t.GetTagName()] != t.GetTagValue() {
				match = false
			}
		}
		if match {
			out = append(out, sb)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].created.After(out[j].created) })
	if len(out) > 2 {
		out = out[:2]
	}
	infos := make([]*pb.SandboxInfo, len(out))
	for i, sb := range out {
		infos[i] = pb.SandboxInfo_builder{Id: sb.id, CreatedAt: ts(sb.created), AppId: sb.app, Name: sb.name}.Build()
	}
	return pb.SandboxListResponse_builder{Sandboxes: infos}.Build(), nil
}

func ts(t time.Time) float64 { return float64(t.UnixNano()) / 1e9 }

// SandboxTagsGet returns a sandbox's tags.
func (s *Server) SandboxTagsGet(_ context.Context, req *pb.SandboxTagsGetRequest) (*pb.SandboxTagsGetResponse, error) {
	s.count("SandboxTagsGet")
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, err := s.lookup(req.GetSandboxId())
	if err != nil {
		return nil, err
	}
	var tags []*pb.SandboxTag
	for k, v := range sb.tags {
		tags = append(tags, pb.SandboxTag_builder{TagName: k, TagValue: v}.Build())
	}
	return pb.SandboxTagsGetResponse_builder{Tags: tags}.Build(), nil
}

// SandboxTerminateV2 answers as Modal does for an id that names no V2 sandbox: not found (the
// SDK routes ids that are not V1-shaped here; the emulator makes V1 sandboxes only).
func (s *Server) SandboxTerminateV2(_ context.Context, req *pb.SandboxTerminateRequest) (*pb.SandboxTerminateResponse, error) {
	s.count("SandboxTerminateV2")
	return nil, status.Errorf(codes.NotFound, "Sandbox %s not found", req.GetSandboxId())
}

// SandboxWaitV2 answers not found, as SandboxTerminateV2 does.
func (s *Server) SandboxWaitV2(_ context.Context, req *pb.SandboxWaitRequest) (*pb.SandboxWaitResponse, error) {
	s.count("SandboxWaitV2")
	return nil, status.Errorf(codes.NotFound, "Sandbox %s not found", req.GetSandboxId())
}
