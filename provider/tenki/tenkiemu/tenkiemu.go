// Package tenkiemu is an in-process emulator of the subset of Tenki's sandbox API that
// provider/tenki uses: a fake of a cloud that cannot be reached from here, written from Tenki's
// public SDKs (the Go SDK github.com/TenkiCloud/tenki-sdk-go, the TypeScript SDK
// @tenkicloud/sandbox) and served with connectrpc.com/connect, so the protocol is the real one
// (Connect, here with the JSON codec; HTTP/1.1 and cleartext HTTP/2):
//
//   - tenki.sandbox.v1.SandboxService: CreateSession (name, metadata, tags, max_duration,
//     registry_ref, cpu_cores 1-16, memory_mb 128-65536 in steps of 2, allow_inbound,
//     wait_ready: held until the session runs, with its data plane endpoint and credential;
//     NotFound for an unknown registry_ref), GetSession (NotFound for an id never made),
//     ListWorkspaceSandboxes (pages of page_size by page_token, filtered by tags, the ended
//     sessions only with include_terminated), TerminateSession (NotFound for an unknown id,
//     FailedPrecondition "session already terminated" for an ended one), ExposePort and
//     ListExposedPorts (a running session open to inbound traffic; preview URLs),
//     CreateSessionCredential (NOT_READY while the session starts, FailedPrecondition once it
//     has ended); the API key as a bearer token ("tk_..."), Unauthenticated without it.
//   - tenki.sandbox.v1.SandboxSessionDataPlaneService at each session's own endpoint, with the
//     session's credential in x-tenki-session-cert (Unauthenticated without a valid one):
//     Run (bidirectional: a start frame, stdin frames and their end, then started, output and
//     exit frames), WriteFile and ReadFile (NotFound "no such file or directory").
//   - a preview URL per exposed port, an origin of its own (a loopback listener), answered while
//     the session runs (502 once it has ended).
//
// A session is CREATING for StartDelay, then RUNNING until it is terminated, Expire is called or
// its max_duration passes (TERMINATED). Without a VM a command does nothing: one that is
// `/bin/sh -c "exit N"` exits N and any other exits 0 with no output (they are recorded,
// Commands); a start script that powers the guest off after its command (its script contains
// "poweroff"; the command follows its $0) ends the session ExitAfter after it started when that
// command is `sh -c "exit N"`, as a guest shutting down would; files are kept in memory; a
// preview URL answers 200 "ok".
//
// With a VM backend (SetVMBackend; DinD(emuvm host) is the real one) a session of one of the
// backend's images is backed by a real VM: its create starts the VM (Internal and nothing made if
// that fails), its end removes it, commands run in it for real as root (stdin streamed in,
// output sent once it exits), files are written and read in it, and its preview URLs are
// reverse-proxied, streaming, to the VM's ports while it runs.
//
// It misbehaves on demand: SetCreateFault (a create answered after the client gave up while the
// session exists, a create that hangs, a create refused with a status such as 429 or 503,
// answered as Connect's code for it, a create whose answer is lost), SetKillFault (terminates
// failing N times).
package tenkiemu

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/emuapi"
	"github.com/agentenv/agentenv/internal/emufault"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/internal/shellquote"
	"github.com/agentenv/agentenv/provider/tenki/internal/wire"
)

// CreateFault makes CreateSession misbehave (see emufault.Create).
type CreateFault = emufault.Create

// VM is the real machine behind a session (see emuvm.Machine).
type VM = emuvm.Machine

// VMBackend starts the VMs behind sessions (see emuvm.Backend); labels are the session's
// metadata.
type VMBackend = emuvm.Backend

// DinD returns a VMBackend whose VMs are h's Docker-in-Docker containers.
func DinD(h *emuvm.Host) VMBackend { return emuvm.DinD(h) }

// Command is a command run in a session through the data plane.
type Command struct {
	Session    string
	Argv       []string
	Env        map[string]string
	Privileged bool
}

// Session is what the emulator holds of one session.
type Session struct {
	ID          string
	Name        string
	Image       string // registry_ref; "" for the default image
	Metadata    map[string]string
	Tags        []string
	State       wire.SessionState
	MaxDuration time.Duration // 0: none was sent
	Inbound     bool
	CPUCores    int32
	MemoryMB    int32
	Ports       []int // exposed
}

// Server is the emulator: its sessions and their commands on the cloud emulators' shared base
// (emuapi.Base: the server, key check and call counts, faults, Kills (the TerminateSession
// calls), VMs); it is a lifecycletest.Emulator. Its methods are safe for concurrent use.
type Server struct {
	*emuapi.Base

	// StartDelay is how long a session is CREATING; ExitAfter how long a powered-off guest's
	// command runs; CredentialTTL how long a data-plane credential is valid; PageSize the most
	// sessions a list page holds (at most 100). Set them before the first call.
	StartDelay, ExitAfter, CredentialTTL time.Duration
	PageSize                             int

	mu       sync.Mutex
	images   map[string]bool
	vmImages map[string]bool
	backend  VMBackend
	sessions map[string]*session
	order    []string
	commands []Command
}

type session struct {
	Session
	created   time.Time
	runningAt time.Time
	exitAt    time.Time // zero: no command powers the guest off
	endReason string
	creds     map[string]time.Time // credential -> expiry
	files     map[string][]byte
	previews  map[int]*httptest.Server // exposed port -> its preview origin
}

// Start runs an emulator on a loopback port until Close. Control-plane requests must carry key
// ("tk_...") as a bearer token. It knows the default image ("") and "sandbox" (AddImage adds
// more).
func Start(key string) *Server {
	s := &Server{
		Base:       emuapi.New(emuapi.Bearer(key), unauthenticated),
		StartDelay: 20 * time.Millisecond, ExitAfter: 100 * time.Millisecond, CredentialTTL: 10 * time.Minute,
		PageSize: 100,
		images:   map[string]bool{"": true, "sandbox": true},
		vmImages: map[string]bool{}, sessions: map[string]*session{},
	}
	codec := connect.WithCodec(wire.Codec{Strict: true})
	for procedure, h := range map[string]http.Handler{
		wire.CreateSession:           connect.NewUnaryHandler(wire.CreateSession, s.createSession, codec),
		wire.GetSession:              connect.NewUnaryHandler(wire.GetSession, s.getSession, codec),
		wire.ListWorkspaceSandboxes:  connect.NewUnaryHandler(wire.ListWorkspaceSandboxes, s.list, codec),
		wire.TerminateSession:        connect.NewUnaryHandler(wire.TerminateSession, s.terminate, codec),
		wire.ExposePort:              connect.NewUnaryHandler(wire.ExposePort, s.exposePort, codec),
		wire.ListExposedPorts:        connect.NewUnaryHandler(wire.ListExposedPorts, s.listExposedPorts, codec),
		wire.CreateSessionCredential: connect.NewUnaryHandler(wire.CreateSessionCredential, s.credential, codec),
	} {
		s.Handle(procedure, procedureName(procedure), h.ServeHTTP)
	}
	s.SetKillOps(procedureName(wire.TerminateSession))
	s.dataPlane(wire.Run, connect.NewBidiStreamHandler(wire.Run, s.run, codec))
	s.dataPlane(wire.WriteFile, connect.NewUnaryHandler(wire.WriteFile, s.writeFile, codec))
	s.dataPlane(wire.ReadFile, connect.NewUnaryHandler(wire.ReadFile, s.readFile, codec))
	s.Serve()
	return s
}

// unauthenticated answers a control-plane call without the key as Connect does: 401 and the
// error's JSON.
func unauthenticated(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusUnauthorized)
	w.Write([]byte(`{"code":"unauthenticated","message":"invalid or missing API key"}`))
}

// procedureName is the method name of a Connect procedure, "/pkg.Service/Method" -> "Method":
// what Calls counts it as.
func procedureName(p string) string { return p[strings.LastIndex(p, "/")+1:] }

// sessionKey carries the session id of a data-plane endpoint's path into its handler.
type sessionKey struct{}

// dataPlane serves procedure of h at every session's data-plane endpoint, /dp/{id}; the
// handler checks the session's credential itself.
func (s *Server) dataPlane(procedure string, h http.Handler) {
	name := procedureName(procedure)
	s.Open("/dp/{id}"+procedure, func(w http.ResponseWriter, r *http.Request) {
		s.Count(name)
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sessionKey{}, r.PathValue("id"))))
	})
}

// Close releases requests held by faults, ends every session, stops the server, removes every
// VM and closes the preview URLs.
func (s *Server) Close() {
	s.Base.Close(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, ss := range s.sessions {
			s.end(ss, "server closed")
		}
	})
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, ss := range s.sessions {
		for _, p := range ss.previews {
			p.Close()
		}
	}
}

// AddImage makes registry reference image known, so that sessions can be created from it.
func (s *Server) AddImage(image string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.images[image] = true
}

// SetVMBackend backs every session created from now on from one of images with a VM of b.
func (s *Server) SetVMBackend(b VMBackend, images ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.backend = b
	s.vmImages = map[string]bool{}
	for _, img := range images {
		s.vmImages[img] = true
		s.images[img] = true
	}
}

// Running returns the ids of the sessions not ended (creating or running), sorted.
func (s *Server) Running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return emuapi.Running(s.sessions, func(ss *session) bool { return !s.state(ss).Ended() })
}

// Session returns what the emulator holds of session id.
func (s *Server) Session(id string) (Session, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, ok := s.sessions[id]
	if !ok {
		return Session{}, false
	}
	s.state(ss)
	out := ss.Session
	out.Metadata, out.Tags, out.Ports = maps.Clone(ss.Metadata), slices.Clone(ss.Tags), slices.Clone(ss.Ports)
	return out, true
}

// Made returns the ids of every session created so far, in order.
func (s *Server) Made() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.order)
}

// Commands returns the commands run through the data plane, in order.
func (s *Server) Commands() []Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.commands)
}

// Expire ends session id as its max_duration would.
func (s *Server) Expire(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss, ok := s.sessions[id]; ok {
		s.end(ss, "max duration reached")
	}
}

// state brings ss's state up to now and returns it. Call with s.mu held.
func (s *Server) state(ss *session) wire.SessionState {
	now := time.Now()
	if ss.State == wire.StateCreating && !now.Before(ss.runningAt) {
		ss.State = wire.StateRunning
	}
	if ss.State == wire.StateRunning {
		switch {
		case !ss.exitAt.IsZero() && now.After(ss.exitAt):
			s.end(ss, "guest powered off")
		case ss.MaxDuration > 0 && now.After(ss.created.Add(ss.MaxDuration)):
			s.end(ss, "max duration reached")
		}
	}
	return ss.State
}

// end terminates ss (if it has not ended), its VM removed in the background. Call with s.mu held.
func (s *Server) end(ss *session, reason string) {
	if ss.State.Ended() {
		return
	}
	ss.State, ss.endReason = wire.StateTerminated, reason
	s.RemoveVMLater(ss.ID)
}

// codeOf is the Connect code a server answers for HTTP status (a fault's), as connect-go maps
// them.
func codeOf(status int) connect.Code {
	switch status {
	case http.StatusBadRequest:
		return connect.CodeInvalidArgument
	case http.StatusUnauthorized:
		return connect.CodeUnauthenticated
	case http.StatusForbidden:
		return connect.CodePermissionDenied
	case http.StatusNotFound:
		return connect.CodeNotFound
	case http.StatusConflict:
		return connect.CodeAlreadyExists
	case http.StatusTooManyRequests:
		return connect.CodeResourceExhausted
	case http.StatusServiceUnavailable, http.StatusBadGateway, http.StatusGatewayTimeout:
		return connect.CodeUnavailable
	}
	return connect.CodeInternal
}

func errorf(code connect.Code, format string, args ...any) error {
	return connect.NewError(code, fmt.Errorf(format, args...))
}

// view is the wire form of ss. Call with s.mu held.
func (s *Server) view(ss *session) *wire.Session {
	created := ss.created.UTC()
	v := &wire.Session{ID: ss.ID, State: s.state(ss), Name: ss.Name, Metadata: maps.Clone(ss.Metadata),
		Tags: slices.Clone(ss.Tags), CreatedAt: &created, InboundEnabled: ss.Inbound, CPUCores: ss.CPUCores, MemoryMB: ss.MemoryMB}
	if ss.MaxDuration > 0 {
		t := ss.created.Add(ss.MaxDuration).UTC()
		v.TimeoutAt = &t
	}
	if ss.State.Ended() {
		v.TerminalError = ss.endReason
	}
	return v
}

// lookup returns session id, or NotFound as the service words it. Call with s.mu held.
func (s *Server) lookup(id string) (*session, error) {
	ss, ok := s.sessions[id]
	if !ok {
		return nil, errorf(connect.CodeNotFound, "session %s not found", id)
	}
	return ss, nil
}

func (s *Server) createSession(ctx context.Context, req *connect.Request[wire.CreateSessionRequest]) (*connect.Response[wire.CreateSessionResponse], error) {
	in := req.Msg
	image := ""
	if in.RegistryRef != nil {
		image = *in.RegistryRef
	}
	switch {
	case in.CPUCores != nil && (*in.CPUCores < 1 || *in.CPUCores > 16):
		return nil, errorf(connect.CodeInvalidArgument, "cpu_cores %d: want 1-16", *in.CPUCores)
	case in.MemoryMB != nil && (*in.MemoryMB < 128 || *in.MemoryMB > 65536 || *in.MemoryMB%2 != 0):
		return nil, errorf(connect.CodeInvalidArgument, "memory_mb %d: want 128-65536, aligned to 2 MiB", *in.MemoryMB)
	case in.MaxDuration != nil && *in.MaxDuration <= 0:
		return nil, errorf(connect.CodeInvalidArgument, "max_duration must be positive")
	}
	s.mu.Lock()
	known := s.images[image]
	f := s.TakeCreate()
	s.mu.Unlock()
	switch {
	case !known:
		return nil, errorf(connect.CodeNotFound, "registry image %q not found", image)
	case f != nil && f.Status != 0:
		return nil, connect.NewError(codeOf(f.Status), errors.New(f.Message))
	}
	if !f.Hold(s.Closed()) {
		return nil, errorf(connect.CodeUnavailable, "server closed")
	}
	now := time.Now()
	ss := &session{
		Session: Session{ID: "ses_" + emuapi.RandHex(20), Name: in.Name, Image: image, Metadata: maps.Clone(in.Metadata),
			Tags: slices.Clone(in.Tags), State: wire.StateCreating, Inbound: in.AllowInbound == nil || *in.AllowInbound},
		created: now, runningAt: now.Add(s.StartDelay), creds: map[string]time.Time{}, files: map[string][]byte{},
		previews: map[int]*httptest.Server{},
	}
	if in.MaxDuration != nil {
		ss.MaxDuration = time.Duration(*in.MaxDuration)
	}
	if in.CPUCores != nil {
		ss.CPUCores = *in.CPUCores
	}
	if in.MemoryMB != nil {
		ss.MemoryMB = *in.MemoryMB
	}
	s.mu.Lock()
	s.sessions[ss.ID] = ss
	s.order = append(s.order, ss.ID)
	backend := s.backend
	if !s.vmImages[image] {
		backend = nil
	}
	s.mu.Unlock()
	if backend != nil {
		if err := s.startVM(ctx, ss, backend); err != nil {
			return nil, errorf(connect.CodeInternal, "failed to start the sandbox: %v", err)
		}
	}
	if f != nil && f.Lost {
		panic(http.ErrAbortHandler) // the session exists; its answer never leaves
	}
	f.Linger(s.Closed())
	if in.WaitReady {
		select {
		case <-time.After(time.Until(ss.runningAt)):
		case <-s.Closed():
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	out := &wire.CreateSessionResponse{Session: s.view(ss)}
	if ss.State == wire.StateRunning {
		out.DataPlaneEndpoint, out.Credential, out.RouteStatus = s.grant(ss)
	}
	return connect.NewResponse(out), nil
}

// grant mints a data-plane credential of ss. Call with s.mu held.
func (s *Server) grant(ss *session) (string, *wire.SessionCredential, wire.RouteStatus) {
	cred := "cert_" + emuapi.RandHex(32)
	exp := time.Now().Add(s.CredentialTTL).UTC()
	ss.creds[cred] = exp
	return s.URL() + "/dp/" + url.PathEscape(ss.ID), &wire.SessionCredential{Credential: cred, ExpiresAt: &exp}, wire.RouteVerified
}

// startVM starts the VM of ss on a detached bounded context (Tenki finishes a create whether or
// not its client waits); if ss ended meanwhile the VM is removed at once.
func (s *Server) startVM(ctx context.Context, ss *session, b VMBackend) error {
	ctx, cancel := cleanup.Detached(ctx, emuapi.VMStartBound)
	defer cancel()
	labels := maps.Clone(ss.Metadata)
	if labels == nil {
		labels = map[string]string{}
	}
	if labels[agentenv.LabelRecord] == "" {
		labels[agentenv.LabelRecord] = ss.Name
	}
	vm, err := b.StartVM(ctx, "tenkiemu-"+ss.ID, labels)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.end(ss, "vm failed to start")
		return err
	}
	s.SetVM(ss.ID, vm)
	if s.state(ss).Ended() {
		s.RemoveVMLater(ss.ID)
	}
	return nil
}

func (s *Server) getSession(_ context.Context, req *connect.Request[wire.SessionID]) (*connect.Response[wire.SessionAnswer], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, err := s.lookup(req.Msg.SessionID)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(&wire.SessionAnswer{Session: s.view(ss)}), nil
}

func (s *Server) list(_ context.Context, req *connect.Request[wire.ListWorkspaceSandboxesRequest]) (*connect.Response[wire.ListWorkspaceSandboxesResponse], error) {
	in := req.Msg
	size := int(in.PageSize)
	if size <= 0 || size > s.PageSize {
		size = s.PageSize
	}
	start := 0
	if in.PageToken != "" {
		n, err := strconv.Atoi(in.PageToken)
		if err != nil || n < 0 {
			return nil, errorf(connect.CodeInvalidArgument, "page_token %q is invalid", in.PageToken)
		}
		start = n
	}
	s.mu.Lock()
	var all []*wire.Session
	for _, id := range s.order {
		ss := s.sessions[id]
		if (!in.IncludeTerminated && s.state(ss).Ended()) || !hasTags(ss.Tags, in.Tags) {
			continue
		}
		all = append(all, s.view(ss))
	}
	s.mu.Unlock()
	start = min(start, len(all))
	end := min(start+size, len(all))
	out := &wire.ListWorkspaceSandboxesResponse{Sessions: all[start:end]}
	if end < len(all) {
		out.NextPageToken = strconv.Itoa(end)
	}
	return connect.NewResponse(out), nil
}

// hasTags reports whether have holds every one of want, compared as the SDKs normalise tags.
func hasTags(have, want []string) bool {
	for _, w := range want {
		if !slices.ContainsFunc(have, func(h string) bool { return strings.EqualFold(strings.TrimSpace(h), strings.TrimSpace(w)) }) {
			return false
		}
	}
	return true
}

func (s *Server) terminate(_ context.Context, req *connect.Request[wire.SessionID]) (*connect.Response[wire.SessionAnswer], error) {
	s.mu.Lock()
	ss, err := s.lookup(req.Msg.SessionID)
	if err != nil {
		s.mu.Unlock()
		return nil, err
	}
	if s.state(ss).Ended() {
		s.mu.Unlock()
		return nil, errorf(connect.CodeFailedPrecondition, "session %s already terminated", ss.ID)
	}
	if code := s.TakeKill(); code != 0 {
		s.mu.Unlock()
		return nil, errorf(codeOf(code), "failed to terminate session: internal error")
	}
	ss.State, ss.endReason = wire.StateTerminated, "terminated by request"
	s.mu.Unlock()
	s.RemoveVM(ss.ID) // answered once the session is gone
	s.mu.Lock()
	defer s.mu.Unlock()
	return connect.NewResponse(&wire.SessionAnswer{Session: s.view(ss)}), nil
}

// running returns session id if it runs, else the error the service answers for it. Call with
// s.mu held.
func (s *Server) running(id string) (*session, error) {
	ss, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	switch st := s.state(ss); {
	case st.Ended():
		return nil, errorf(connect.CodeFailedPrecondition, "session %s is terminated", id)
	case st != wire.StateRunning:
		return nil, errorf(connect.CodeFailedPrecondition, "session %s is not running (state=%s)", id, st)
	}
	return ss, nil
}

func (s *Server) exposePort(_ context.Context, req *connect.Request[wire.ExposePortRequest]) (*connect.Response[wire.PortExposure], error) {
	in := req.Msg
	if in.Port < 1 || in.Port > 65535 {
		return nil, errorf(connect.CodeInvalidArgument, "port %d: want 1-65535", in.Port)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, err := s.running(in.SessionID)
	if err != nil {
		return nil, err
	}
	if !ss.Inbound {
		return nil, errorf(connect.CodeFailedPrecondition, "inbound access is disabled for session %s", ss.ID)
	}
	port := int(in.Port)
	if _, ok := ss.previews[port]; !ok {
		ss.previews[port] = httptest.NewServer(s.preview(ss, port))
		ss.Ports = append(ss.Ports, port)
	}
	return connect.NewResponse(&wire.PortExposure{Port: in.Port, PreviewURL: ss.previews[port].URL}), nil
}

func (s *Server) listExposedPorts(_ context.Context, req *connect.Request[wire.SessionID]) (*connect.Response[wire.ListExposedPortsResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, err := s.lookup(req.Msg.SessionID)
	if err != nil {
		return nil, err
	}
	out := &wire.ListExposedPortsResponse{}
	for _, port := range ss.Ports {
		out.Ports = append(out.Ports, &wire.PortExposure{Port: int32(port), PreviewURL: ss.previews[port].URL})
	}
	return connect.NewResponse(out), nil
}

func (s *Server) credential(_ context.Context, req *connect.Request[wire.SessionID]) (*connect.Response[wire.CreateSessionCredentialResponse], error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, err := s.lookup(req.Msg.SessionID)
	if err != nil {
		return nil, err
	}
	switch st := s.state(ss); {
	case st.Ended():
		return nil, errorf(connect.CodeFailedPrecondition, "session %s is terminated", ss.ID)
	case st != wire.StateRunning:
		return connect.NewResponse(&wire.CreateSessionCredentialResponse{RouteStatus: wire.RouteNotReady}), nil
	}
	endpoint, cred, route := s.grant(ss)
	return connect.NewResponse(&wire.CreateSessionCredentialResponse{Credential: cred, DataPlaneEndpoint: endpoint, RouteStatus: route}), nil
}

// dataSession returns the running session of a data-plane call's endpoint, checking its
// credential and the session id its message names.
func (s *Server) dataSession(ctx context.Context, h http.Header, named string) (*session, error) {
	id, _ := ctx.Value(sessionKey{}).(string)
	s.mu.Lock()
	defer s.mu.Unlock()
	ss, err := s.lookup(id)
	if err != nil {
		return nil, err
	}
	exp, ok := ss.creds[h.Get(wire.HeaderSessionCert)]
	if !ok || time.Now().After(exp) {
		return nil, errorf(connect.CodeUnauthenticated, "missing or expired session credential")
	}
	if named != id {
		return nil, errorf(connect.CodeInvalidArgument, "session_id %q does not match the endpoint's session %s", named, id)
	}
	return s.running(id)
}

// exitScript is a command's `/bin/sh -c "exit N"`.
var exitScript = regexp.MustCompile(`^exit ([0-9]+)$`)

// exitCode returns N if argv is /bin/sh -c "exit N".
func exitCode(argv []string) (int, bool) {
	if len(argv) == 3 && (argv[0] == "/bin/sh" || argv[0] == "sh") && argv[1] == "-c" {
		if m := exitScript.FindStringSubmatch(strings.TrimSpace(argv[2])); m != nil {
			n, _ := strconv.Atoi(m[1])
			return n, true
		}
	}
	return 0, false
}

// poweredOff returns the command a start script runs before it powers the guest off (its
// arguments after $0), if argv is one.
func poweredOff(argv []string) ([]string, bool) {
	if len(argv) > 4 && (argv[0] == "/bin/sh" || argv[0] == "sh") && argv[1] == "-c" && strings.Contains(argv[2], "poweroff") {
		return argv[4:], true
	}
	return nil, false
}

func (s *Server) run(ctx context.Context, st *connect.BidiStream[wire.RunCall, wire.RunAnswer]) error {
	first, err := st.Receive()
	if err != nil {
		return errorf(connect.CodeInvalidArgument, "no start frame: %v", err)
	}
	start := (*wire.RunStart)(nil)
	if first.Frame != nil {
		start = first.Frame.Start
	}
	if start == nil || len(start.Cmd) == 0 {
		return errorf(connect.CodeInvalidArgument, "the first frame must start a command")
	}
	ss, err := s.dataSession(ctx, st.RequestHeader(), start.SessionID)
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.commands = append(s.commands, Command{Session: ss.ID, Argv: slices.Clone(start.Cmd), Env: maps.Clone(start.Env), Privileged: start.Privileged})
	pid := len(s.commands)
	s.mu.Unlock()
	vm, _ := s.VM(ss.ID)
	if err := st.Send(&wire.RunAnswer{Frame: &wire.RunResponse{Started: &wire.RunStarted{PID: wire.Uint64(pid), StdinWindowBytes: 1 << 20}}}); err != nil {
		return err
	}
	stdin, stdinDone := s.stdin(st, start.StreamStdin)
	began := time.Now()
	var res agentenv.ExecResult
	if vm != nil {
		rctx, cancel := emuapi.WhileAlive(ctx, s.Closed(), func() bool {
			s.mu.Lock()
			defer s.mu.Unlock()
			return !s.state(ss).Ended()
		})
		res, err = vm.Run(rctx, runScript(start), stdin)
		cancel()
		if err != nil {
			res = agentenv.ExecResult{ExitCode: 137, Stderr: []byte(err.Error())}
		}
	} else {
		io.Copy(io.Discard, stdin)
		res.ExitCode, _ = exitCode(start.Cmd)
		if cmd, ok := poweredOff(start.Cmd); ok {
			if _, exits := exitCode(cmd); exits {
				s.mu.Lock()
				ss.exitAt = time.Now().Add(s.ExitAfter)
				s.mu.Unlock()
			}
		}
	}
	stdin.Close()
	<-stdinDone
	for _, out := range []*wire.RunResponse{{Stdout: res.Stdout}, {Stderr: res.Stderr}} {
		if len(out.Stdout)+len(out.Stderr) > 0 {
			if err := st.Send(&wire.RunAnswer{Frame: out}); err != nil {
				return err
			}
		}
	}
	exit := &wire.RunExit{ExitCode: int32(res.ExitCode), Reason: "exit", DurationMs: wire.Uint64(time.Since(began).Milliseconds())}
	return st.Send(&wire.RunAnswer{Frame: &wire.RunResponse{Exit: exit}})
}

// runScript is start's command as a script for a VM's root shell, with its env and cwd.
func runScript(start *wire.RunStart) string {
	var b strings.Builder
	if start.Cwd != "" {
		b.WriteString("cd " + shellquote.Join([]string{start.Cwd}) + " && ")
	}
	if len(start.Env) > 0 {
		b.WriteString("env")
		for _, k := range slices.Sorted(maps.Keys(start.Env)) {
			b.WriteString(" " + shellquote.Join([]string{k + "=" + start.Env[k]}))
		}
		b.WriteString(" ")
	}
	b.WriteString(shellquote.Join(start.Cmd))
	return b.String()
}

// stdin returns a reader of the stdin frames a Run stream sends until their end, and a channel
// closed once the stream's request side is read to that end. Without streamStdin the reader is
// empty.
func (s *Server) stdin(st *connect.BidiStream[wire.RunCall, wire.RunAnswer], stream bool) (*io.PipeReader, <-chan struct{}) {
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		if !stream {
			pw.Close()
			return
		}
		for {
			msg, err := st.Receive()
			if err != nil {
				pw.CloseWithError(err)
				return
			}
			if f := msg.Frame; f != nil {
				if len(f.Stdin) > 0 {
					if _, err := pw.Write(f.Stdin); err != nil {
						return // the command is done with its stdin
					}
				}
				if f.StdinClose {
					pw.Close()
					return
				}
			}
		}
	}()
	return pr, done
}

// fileSession is dataSession for a file call of path, which must be absolute.
func (s *Server) fileSession(ctx context.Context, h http.Header, named, path string) (*session, error) {
	if !strings.HasPrefix(path, "/") {
		return nil, errorf(connect.CodeInvalidArgument, "path %q must be absolute", path)
	}
	return s.dataSession(ctx, h, named)
}

func (s *Server) writeFile(ctx context.Context, req *connect.Request[wire.WriteFileCall]) (*connect.Response[wire.WriteFileAnswer], error) {
	in := req.Msg.Request
	if in == nil {
		return nil, errorf(connect.CodeInvalidArgument, "no request")
	}
	ss, err := s.fileSession(ctx, req.Header(), in.SessionID, in.Path)
	if err != nil {
		return nil, err
	}
	if vm, ok := s.VM(ss.ID); !ok {
		s.mu.Lock()
		ss.files[in.Path] = slices.Clone(in.Content)
		s.mu.Unlock()
	} else {
		q := shellquote.Join([]string{in.Path})
		res, err := vm.Run(ctx, `mkdir -p "$(dirname `+q+`)" && cat >`+q, strings.NewReader(string(in.Content)))
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
		}
		if err != nil {
			return nil, errorf(connect.CodeInternal, "write %s: %v", in.Path, err)
		}
	}
	return connect.NewResponse(&wire.WriteFileAnswer{Response: &wire.WriteFileResponse{Path: in.Path, SizeBytes: wire.Int64(len(in.Content))}}), nil
}

func (s *Server) readFile(ctx context.Context, req *connect.Request[wire.ReadFileCall]) (*connect.Response[wire.ReadFileAnswer], error) {
	in := req.Msg.Request
	if in == nil {
		return nil, errorf(connect.CodeInvalidArgument, "no request")
	}
	ss, err := s.fileSession(ctx, req.Header(), in.SessionID, in.Path)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	data, found := ss.files[in.Path]
	s.mu.Unlock()
	if vm, ok := s.VM(ss.ID); ok {
		q := shellquote.Join([]string{in.Path})
		res, err := vm.Run(ctx, "test -f "+q+" || exit 44; cat "+q, nil)
		switch {
		case err != nil:
			return nil, errorf(connect.CodeInternal, "read %s: %v", in.Path, err)
		case res.ExitCode == 44:
			found = false
		case res.ExitCode != 0:
			return nil, errorf(connect.CodeInternal, "read %s: %s", in.Path, res.Stderr)
		default:
			data, found = res.Stdout, true
		}
	}
	if !found {
		return nil, errorf(connect.CodeNotFound, "open %s: no such file or directory", in.Path)
	}
	return connect.NewResponse(&wire.ReadFileAnswer{Response: &wire.ReadFileResponse{Path: in.Path, Content: data}}), nil
}

// preview serves port of ss at its preview URL, an origin of its own as Tenki's are: the VM's
// port through a reverse proxy, else 200 "ok"; 502 once the session has ended.
func (s *Server) preview(ss *session, port int) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/{rest...}", func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		st := s.state(ss)
		s.mu.Unlock()
		if st != wire.StateRunning {
			http.Error(w, "sandbox is "+string(st), http.StatusBadGateway)
			return
		}
		vm, ok := s.VM(ss.ID)
		if !ok {
			w.Write([]byte("ok"))
			return
		}
		emuapi.Proxy(w, r, vm, port, func(w http.ResponseWriter, msg string) { http.Error(w, msg, http.StatusBadGateway) })
	})
	return mux
}
