// Package vercelemu is an in-process emulator of the subset of Vercel Sandbox's REST API that
// provider/vercel uses: a fake of a cloud that cannot be reached from here, written from the
// public TypeScript SDK @vercel/sandbox 3.x (src/api-client/api-client.ts for the paths and
// bodies, validators.ts for the answers' shapes, base-client.ts for the error body, sandbox.ts
// for the status codes the SDK tells apart):
//
//   - every request carries the token as a bearer token (401 without it) and the team as the
//     teamId query parameter (403 for another team); errors are {"error": {"code", "message"}};
//   - POST /v3/sandboxes (image) and POST /v2/sandboxes (runtime): projectId, name, image or
//     runtime, ports (at most 15, 1024-65535), timeout in ms (at most MaxTimeout), resources
//     {vcpus}, persistent, env, tags (at most 5, non-empty keys), answering {sandbox, session,
//     routes}; 409 for a name a sandbox not yet deleted holds, 400 for an unknown image or a
//     bad field;
//   - GET /v2/sandboxes/{name}?projectId (resume=true is refused: the provider never resumes),
//     PATCH /v2/sandboxes/{name} (ports, tags, timeout; answering {sandbox, routes}), DELETE
//     /v2/sandboxes/{name} (404 for a name it does not hold, 422 sandbox_stopping while the
//     session stops); GET /v2/sandboxes?project with limit, cursor, namePrefix and one tags
//     filter key:value (two are 400, as the SDK refuses them), answering {sandboxes,
//     pagination {count, next}};
//   - a session's API under /v2/sandboxes/sessions/{id}: POST stop (idempotent), POST cmd
//     (detached: {command}; with wait, an application/x-ndjson stream of {command}, log lines
//     {stream, data} and the finished {command}), GET cmd/{cmdId} (wait=true waits), POST
//     cmd/{cmdId}/kill, POST fs/write (a gzipped tar, extracted under the x-cwd header's
//     directory), POST fs/read ({path, cwd}: application/octet-stream, 404 for a missing file),
//     POST fs/mkdir; 410 sandbox_stopped once the session has stopped;
//   - a route of port P (https://SUBDOMAIN.vercel.run): here a loopback server of its own, so
//     that a route's URL is a host whose paths are the port's, as Vercel's are; answered for a
//     running session (200 "ok", or proxied to the VM), 502 once it has stopped, 404 once the
//     sandbox is deleted or the port no longer routed.
//
// A session is "pending" for StartDelay after its create, then "running"; "stopping" for
// StopDelay after a stop, then "stopped"; it stops on its own when its timeout passes or Expire
// is called. Without a VM, commands are not run: `/bin/sh -c "exit N"` exits N at once, a
// waited command exits 0 with no output, and a detached one runs until its session stops (they
// are recorded, Commands); files are kept in memory.
//
// With a VM backend (SetVMBackend; DinD(emuvm host) is the real one) a sandbox of one of the
// backend's images is backed by a real VM: its create starts the VM (500 and nothing created if
// that fails), the end of its session removes it, commands run in it for real (as root: the VM
// has one user), files are written and read in it, and routes are reverse-proxied, streaming, to
// the VM's ports.
//
// It misbehaves on demand: SetCreateFault (see emufault.Create) and SetKillFault (stops and
// deletes failing N times, the sandbox left as it was).
package vercelemu

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentenv/agentenv/internal/emuapi"
	"github.com/agentenv/agentenv/internal/emufault"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/internal/shellquote"
)

// Limits the emulator enforces, as the SDK documents them.
const (
	MaxTags  = 5  // "Key-value tags to associate with the sandbox. Maximum 5 tags."
	MaxPorts = 15 // "Sandboxes can expose up to 15 ports."
	// DefaultMaxTimeout is the plan's longest sandbox timeout (Pro: 5 hours).
	DefaultMaxTimeout = 5 * time.Hour
)

// CreateFault makes a create misbehave (see emufault.Create).
type CreateFault = emufault.Create

// VM is the real machine behind a session (see emuvm.Machine).
type VM = emuvm.Machine

// VMBackend starts the VMs behind sessions (see emuvm.Backend).
type VMBackend = emuvm.Backend

// DinD returns a VMBackend whose VMs are h's Docker-in-Docker containers.
func DinD(h *emuvm.Host) VMBackend { return emuvm.DinD(h) }

// Command is a command run in a session.
type Command struct {
	Sandbox string
	Argv    []string
	Cwd     string
	Env     map[string]string
	Sudo    bool
}

// Sandbox is what the emulator holds of one sandbox, as a test reads it.
type Sandbox struct {
	Name       string
	Image      string
	Ports      []int
	Timeout    time.Duration
	VCPUs      int
	Tags       map[string]string
	Env        map[string]string
	Persistent bool
	Status     string         // its current session's
	Session    string         // its current session's id
	Routes     map[int]string // port -> its route's URL
}

// Server is the emulator. Its methods are safe for concurrent use; it has those of
// emuapi.Base (URL, Calls, SetCreateFault, SetKillFault, Kills, VMErrors), a VM keyed by session
// id, and it is a lifecycletest.Emulator. Kills counts the stop and delete requests (Calls counts
// create, list, get, update, delete, stop, cmd, cmd_get, cmd_kill, fs_write, fs_read and
// fs_mkdir); a kill fault (SetKillFault) fails stops and deletes alike, leaving the sandbox as it
// was.
type Server struct {
	*emuapi.Base
	project string

	// StartDelay is how long a session stays pending, StopDelay how long it stays stopping;
	// MaxTimeout the longest timeout a create may ask. Set them before the first create.
	StartDelay, StopDelay, MaxTimeout time.Duration

	mu        sync.Mutex
	images    map[string]bool
	vmImages  map[string]bool
	backend   VMBackend
	sandboxes map[string]*sandbox // by name, the deleted ones dropped
	sessions  map[string]*session // by id, every one made
	routes    map[string]route    // by subdomain, while routed
	hosts     []*httptest.Server  // every route's server, closed by Close
	made      []string
	commands  []Command
}

type sandbox struct {
	Sandbox
	runtime   string
	created   time.Time
	updated   time.Time
	current   *session
	nextRoute map[int]string // port -> subdomain, kept across updates
	hostOf    map[int]string // port -> its route's URL
}

type session struct {
	id        string
	sb        *sandbox
	status    string
	requested time.Time
	started   time.Time
	stopAt    time.Time // when a stopping session is stopped
	stopped   time.Time
	deadline  time.Time // its timeout
	cmds      map[string]*command
	files     map[string][]byte
	vm        bool               // a VM backs it (emuapi.Base.VM(id)) from its create to its end
	stop      context.CancelFunc // ends the commands running in its VM
	ctx       context.Context
}

type route struct {
	sess *session
	port int
}

type command struct {
	id      string
	argv    []string
	cwd     string
	sess    string
	started time.Time
	done    chan struct{}
	mu      sync.Mutex
	exit    *int
	endedAt time.Time
	logs    []logLine
}

type logLine struct {
	Stream string `json:"stream"`
	Data   string `json:"data"`
}

// Start runs an emulator on a loopback port until Close. Requests must carry token as a bearer
// token and team as their teamId; sandboxes belong to project. It knows Vercel's managed images
// (AddImage adds more) and the runtimes node22, node24, node26 and python3.13.
func Start(token, team, project string) *Server {
	s := &Server{
		project:    project,
		StartDelay: 20 * time.Millisecond, StopDelay: 10 * time.Millisecond, MaxTimeout: DefaultMaxTimeout,
		images: map[string]bool{"": true, "universal": true, "vercel/sandbox/universal": true, "node:22": true, "node:24": true,
			"node:26": true, "python:3.14": true, "ubuntu": true, "arch": true},
		vmImages:  map[string]bool{},
		sandboxes: map[string]*sandbox{}, sessions: map[string]*session{}, routes: map[string]route{},
	}
	// A request must carry the token and the team: 401 without the token, 403 in another team.
	s.Base = emuapi.New(func(r *http.Request) bool { return emuapi.Bearer(token)(r) && r.URL.Query().Get("teamId") == team },
		func(w http.ResponseWriter, r *http.Request) {
			if !emuapi.Bearer(token)(r) {
				apiError(w, http.StatusUnauthorized, "unauthorized", "missing or invalid token")
				return
			}
			apiError(w, http.StatusForbidden, "forbidden", "you do not have access to team "+strconv.Quote(r.URL.Query().Get("teamId")))
		})
	s.Handle("POST /v3/sandboxes", "create", s.create)
	s.Handle("POST /v2/sandboxes", "create", s.create)
	s.Handle("GET /v2/sandboxes", "list", s.list)
	s.Handle("GET /v2/sandboxes/{name}", "get", s.get)
	s.Handle("PATCH /v2/sandboxes/{name}", "update", s.update)
	s.Handle("DELETE /v2/sandboxes/{name}", "delete", s.delete)
	s.Handle("POST /v2/sandboxes/sessions/{sid}/stop", "stop", s.stopSession)
	s.Handle("POST /v2/sandboxes/sessions/{sid}/cmd", "cmd", s.runCommand)
	s.Handle("GET /v2/sandboxes/sessions/{sid}/cmd/{cmd}", "cmd_get", s.getCommand)
	s.Handle("POST /v2/sandboxes/sessions/{sid}/cmd/{cmd}/kill", "cmd_kill", s.killCommand)
	s.Handle("POST /v2/sandboxes/sessions/{sid}/fs/write", "fs_write", s.writeFiles)
	s.Handle("POST /v2/sandboxes/sessions/{sid}/fs/read", "fs_read", s.readFile)
	s.Handle("POST /v2/sandboxes/sessions/{sid}/fs/mkdir", "fs_mkdir", s.mkdir)
	s.SetKillOps("stop", "delete")
	s.Serve()
	return s
}

// Close stops the server, ends every session and removes their VMs.
func (s *Server) Close() {
	s.Base.Close(func() {
		s.mu.Lock()
		for _, ss := range s.sessions {
			s.end(ss)
		}
		hosts := s.hosts
		s.mu.Unlock()
		for _, h := range hosts {
			h.CloseClientConnections()
			h.Close()
		}
	})
}

// AddImage makes image known to creates.
func (s *Server) AddImage(image string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.images[image] = true
}

// SetVMBackend backs the sessions of sandboxes made from images with real VMs of b.
func (s *Server) SetVMBackend(b VMBackend, images ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.backend = b
	for _, img := range images {
		s.images[img], s.vmImages[img] = true, true
	}
}

// Running returns the names of the sandboxes whose session is pending or running, sorted.
func (s *Server) Running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return emuapi.Running(s.sandboxes, func(sb *sandbox) bool { return s.alive(sb.current) })
}

// Made returns the names of every sandbox created so far, in order.
func (s *Server) Made() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.made)
}

// Sandbox returns what the emulator holds of the sandbox name, while it is not deleted.
func (s *Server) Sandbox(name string) (Sandbox, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[name]
	if !ok {
		return Sandbox{}, false
	}
	out := sb.Sandbox
	out.Status, out.Routes = s.status(sb.current), map[int]string{}
	for _, p := range sb.Ports {
		out.Routes[p] = sb.hostOf[p]
	}
	return out, true
}

// Commands returns every command run so far, in order.
func (s *Server) Commands() []Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.commands)
}

// Expire stops the session of sandbox name as its timeout would.
func (s *Server) Expire(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb, ok := s.sandboxes[name]; ok && sb.current != nil {
		s.end(sb.current)
	}
}

// SandboxVM returns the VM behind sandbox name's session while it has one.
func (s *Server) SandboxVM(name string) (VM, bool) {
	s.mu.Lock()
	sb, ok := s.sandboxes[name]
	s.mu.Unlock()
	if !ok || sb.current == nil {
		return nil, false
	}
	return s.VM(sb.current.id)
}

// status brings ss's status up to date and returns it. Call with s.mu held.
func (s *Server) status(ss *session) string {
	if ss == nil {
		return "stopped"
	}
	now := time.Now()
	if ss.status == "pending" && !now.Before(ss.started) {
		ss.status = "running"
	}
	if ss.status == "running" && now.After(ss.deadline) {
		s.end(ss)
	}
	if ss.status == "stopping" && !now.Before(ss.stopAt) {
		ss.status, ss.stopped = "stopped", now
	}
	return ss.status
}

// alive reports whether ss is pending or running. Call with s.mu held.
func (s *Server) alive(ss *session) bool {
	st := s.status(ss)
	return st == "pending" || st == "running"
}

// end stops ss (if it is not already stopping), its commands ended and its VM removed in the
// background. Call with s.mu held.
func (s *Server) end(ss *session) {
	if ss.status == "stopping" || ss.status == "stopped" {
		return
	}
	ss.status, ss.stopAt = "stopping", time.Now().Add(s.StopDelay)
	if s.StopDelay <= 0 {
		ss.status, ss.stopped = "stopped", time.Now()
	}
	if ss.stop != nil {
		ss.stop()
	}
	s.RemoveVMLater(ss.id)
}

// apiError answers an error as the API does: {"error": {"code", "message"}}.
func apiError(w http.ResponseWriter, status int, code, msg string) {
	emuapi.WriteJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// checkProject answers 400 for a missing project and 404 for another, and reports whether the
// request may go on.
func (s *Server) checkProject(w http.ResponseWriter, project string) bool {
	switch project {
	case s.project:
		return true
	case "":
		apiError(w, http.StatusBadRequest, "bad_request", "projectId is required")
	default:
		apiError(w, http.StatusNotFound, "not_found", "project "+strconv.Quote(project)+" not found")
	}
	return false
}

type createRequest struct {
	ProjectID  string            `json:"projectId"`
	Name       string            `json:"name"`
	Image      *string           `json:"image"`
	Runtime    *string           `json:"runtime"`
	Ports      []int             `json:"ports"`
	Timeout    *int64            `json:"timeout"`
	Persistent *bool             `json:"persistent"`
	Env        map[string]string `json:"env"`
	Tags       map[string]string `json:"tags"`
	Resources  *struct {
		VCPUs int `json:"vcpus"`
	} `json:"resources"`
}

// runtimes are the runtimes POST /v2/sandboxes takes.
var runtimes = []string{"node22", "node24", "node26", "python3.13"}

// sandboxName is what the emulator takes as a sandbox name: what fits in a URL path segment
// unescaped. Vercel's own rules are not documented in the SDK.
var sandboxName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,127}$`)

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", "invalid JSON body: "+err.Error())
		return
	}
	if !s.checkProject(w, req.ProjectID) {
		return
	}
	v3 := r.URL.Path == "/v3/sandboxes"
	image, runtime := "", ""
	if req.Image != nil {
		image = *req.Image
	}
	if req.Runtime != nil {
		runtime = *req.Runtime
	}
	vcpus := 1
	if req.Resources != nil {
		vcpus = req.Resources.VCPUs
	}
	timeout := 5 * time.Minute // the SDK's documented default
	if req.Timeout != nil {
		timeout = time.Duration(*req.Timeout) * time.Millisecond
	}
	if msg := s.checkCreate(v3, req, runtime, vcpus, timeout); msg != "" {
		apiError(w, http.StatusBadRequest, "bad_request", msg)
		return
	}
	if req.Name == "" {
		req.Name = "sbx_" + emuapi.RandHex(24)
	}
	s.mu.Lock()
	_, taken := s.sandboxes[req.Name]
	known := s.images[image]
	f := s.TakeCreate()
	s.mu.Unlock()
	switch {
	case !known:
		apiError(w, http.StatusBadRequest, "image_not_found", fmt.Sprintf("image %q not found", image))
		return
	case taken:
		apiError(w, http.StatusConflict, "sandbox_exists", fmt.Sprintf("a sandbox named %q already exists", req.Name))
		return
	case f != nil && f.Status != 0:
		apiError(w, f.Status, "create_failed", f.Message)
		return
	}
	if !f.Hold(s.Closed()) {
		return
	}
	now := time.Now()
	sb := &sandbox{
		Sandbox: Sandbox{Name: req.Name, Image: image, Ports: req.Ports, Timeout: timeout, VCPUs: vcpus,
			Tags: req.Tags, Env: req.Env, Persistent: req.Persistent == nil || *req.Persistent},
		runtime: runtime, created: now, updated: now, nextRoute: map[int]string{}, hostOf: map[int]string{},
	}
	s.mu.Lock()
	if _, raced := s.sandboxes[req.Name]; raced {
		s.mu.Unlock()
		apiError(w, http.StatusConflict, "sandbox_exists", fmt.Sprintf("a sandbox named %q already exists", req.Name))
		return
	}
	ss := s.newSession(sb, now)
	s.sandboxes[sb.Name] = sb
	s.made = append(s.made, sb.Name)
	backend := s.backend
	if !s.vmImages[image] {
		backend = nil
	}
	s.mu.Unlock()
	if backend != nil {
		if err := s.startVM(r, ss, backend); err != nil {
			apiError(w, http.StatusInternalServerError, "internal_error", "failed to start the sandbox: "+err.Error())
			return
		}
	}
	if f != nil && f.Lost {
		emufault.DropAnswer(w)
		return
	}
	f.Linger(s.Closed())
	s.mu.Lock()
	body := s.full(sb)
	s.mu.Unlock()
	emuapi.WriteJSON(w, http.StatusOK, body)
}

// checkCreate returns why a create request is refused, or "".
func (s *Server) checkCreate(v3 bool, req createRequest, runtime string, vcpus int, timeout time.Duration) string {
	switch {
	case req.Image != nil && req.Runtime != nil:
		return "`runtime` and `image` cannot be used together"
	case v3 && req.Runtime != nil:
		return "runtime is not accepted by /v3/sandboxes; use image"
	case !v3 && req.Image != nil:
		return "image is not accepted by /v2/sandboxes; use /v3/sandboxes"
	case !v3 && runtime != "" && !slices.Contains(runtimes, runtime):
		return fmt.Sprintf("unknown runtime %q", runtime)
	case req.Name != "" && !sandboxName.MatchString(req.Name):
		return fmt.Sprintf("invalid sandbox name %q", req.Name)
	case vcpus < 1:
		return "resources.vcpus must be a positive integer"
	case timeout <= 0 || timeout > s.MaxTimeout:
		return fmt.Sprintf("timeout must be between 1 and %d ms", s.MaxTimeout.Milliseconds())
	}
	if msg := checkPorts(req.Ports); msg != "" {
		return msg
	}
	return checkTags(req.Tags)
}

func checkPorts(ports []int) string {
	if len(ports) > MaxPorts {
		return fmt.Sprintf("a sandbox exposes at most %d ports", MaxPorts)
	}
	for _, p := range ports {
		if p < 1024 || p > 65535 {
			return fmt.Sprintf("port %d: ports must be between 1024 and 65535", p)
		}
	}
	return ""
}

func checkTags(tags map[string]string) string {
	if len(tags) > MaxTags {
		return fmt.Sprintf("a sandbox has at most %d tags, got %d", MaxTags, len(tags))
	}
	for k := range tags {
		if k == "" {
			return "tag keys must not be empty"
		}
	}
	return ""
}

// newSession starts a session of sb, pending for StartDelay. Call with s.mu held.
func (s *Server) newSession(sb *sandbox, now time.Time) *session {
	ctx, cancel := context.WithCancel(context.Background())
	ss := &session{id: "sbx_" + emuapi.RandHex(24), sb: sb, status: "pending", requested: now,
		started: now.Add(s.StartDelay), deadline: now.Add(s.StartDelay + sb.Timeout),
		cmds: map[string]*command{}, files: map[string][]byte{}, ctx: ctx, stop: cancel}
	sb.current, sb.Session = ss, ss.id
	s.sessions[ss.id] = ss
	s.setRoutes(sb, sb.Ports)
	return ss
}

// setRoutes makes sb's routes those of ports, keeping the subdomain of a port already routed.
// Call with s.mu held.
func (s *Server) setRoutes(sb *sandbox, ports []int) {
	sb.Ports = slices.Clone(ports)
	for p, sub := range sb.nextRoute {
		if !slices.Contains(ports, p) {
			delete(s.routes, sub)
			delete(sb.nextRoute, p)
		}
	}
	for _, p := range ports {
		if _, ok := sb.nextRoute[p]; !ok {
			sub := "sb-" + emuapi.RandHex(12)
			sb.nextRoute[p], sb.hostOf[p] = sub, s.routeHost(sub)
		}
		s.routes[sb.nextRoute[p]] = route{sess: sb.current, port: p}
	}
}

// routeHost starts the server of route sub and returns its URL. Call with s.mu held.
func (s *Server) routeHost(sub string) string {
	mux := http.NewServeMux()
	mux.HandleFunc("/{rest...}", func(w http.ResponseWriter, r *http.Request) { s.traffic(w, r, sub) })
	srv := httptest.NewServer(mux)
	s.hosts = append(s.hosts, srv)
	return srv.URL
}

// startVM starts the VM of ss (emuapi.Base.StartVM: Vercel finishes a create whether or not its
// client waits); if ss ended meanwhile the VM is removed at once.
func (s *Server) startVM(r *http.Request, ss *session, b VMBackend) error {
	// The machine is the emulator's, not an agentenv sandbox: it carries no label of the sandbox
	// (emuvm names its own record after it), so that gc of this engine's docker provider does not
	// take it for the sandbox while the emulator removes it.
	vm, err := s.StartVM(r, b, "vercelemu-"+ss.id, nil)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		s.end(ss)
		delete(s.sandboxes, ss.sb.Name)
		return err
	}
	s.SetVM(ss.id, vm)
	ss.vm = true
	if !s.alive(ss) {
		s.RemoveVMLater(ss.id)
	}
	return nil
}

// sandboxJSON is the Sandbox of validators.ts. Call with s.mu held.
func (s *Server) sandboxJSON(sb *sandbox) map[string]any {
	st := s.status(sb.current)
	m := map[string]any{
		"name": sb.Name, "persistent": sb.Persistent, "region": "iad1", "vcpus": sb.VCPUs, "memory": sb.VCPUs * 2048,
		"timeout": sb.Timeout.Milliseconds(), "createdAt": sb.created.UnixMilli(), "updatedAt": sb.updated.UnixMilli(),
		"currentSessionId": sb.Session, "status": st, "statusUpdatedAt": sb.updated.UnixMilli(), "cwd": "/vercel/sandbox",
	}
	if sb.runtime != "" {
		m["runtime"] = sb.runtime
	} else {
		m["image"] = sb.Image
	}
	if len(sb.Tags) > 0 {
		m["tags"] = sb.Tags
	}
	return m
}

// sessionJSON is the Session of validators.ts. Call with s.mu held.
func (s *Server) sessionJSON(ss *session) map[string]any {
	st := s.status(ss)
	m := map[string]any{
		"id": ss.id, "memory": ss.sb.VCPUs * 2048, "vcpus": ss.sb.VCPUs, "region": "iad1",
		"timeout": ss.sb.Timeout.Milliseconds(), "status": st, "requestedAt": ss.requested.UnixMilli(),
		"createdAt": ss.requested.UnixMilli(), "updatedAt": time.Now().UnixMilli(), "cwd": "/vercel/sandbox",
	}
	if st != "pending" {
		m["startedAt"] = ss.started.UnixMilli()
	}
	if st == "stopped" {
		m["stoppedAt"] = ss.stopped.UnixMilli()
	}
	return m
}

// routesJSON is the routes of sb, in port order. Call with s.mu held.
func (s *Server) routesJSON(sb *sandbox) []map[string]any {
	out := []map[string]any{}
	ports := slices.Sorted(maps.Keys(sb.nextRoute))
	for _, p := range ports {
		sub := sb.nextRoute[p]
		out = append(out, map[string]any{"url": sb.hostOf[p], "subdomain": sub, "port": p})
	}
	return out
}

// full is {sandbox, session, routes}. Call with s.mu held.
func (s *Server) full(sb *sandbox) map[string]any {
	return map[string]any{"sandbox": s.sandboxJSON(sb), "session": s.sessionJSON(sb.current), "routes": s.routesJSON(sb)}
}

// named returns the sandbox of the request's {name} in the request's project, answering 404 if
// there is none. Call without s.mu.
func (s *Server) named(w http.ResponseWriter, r *http.Request) (*sandbox, bool) {
	if !s.checkProject(w, r.URL.Query().Get("projectId")) {
		return nil, false
	}
	return find(s, w, s.sandboxes, "sandbox", r.PathValue("name"))
}

// find returns m[key] (read under s.mu), answering 404 naming what if there is none.
func find[T any](s *Server, w http.ResponseWriter, m map[string]*T, what, key string) (*T, bool) {
	s.mu.Lock()
	v, ok := m[key]
	s.mu.Unlock()
	if !ok {
		apiError(w, http.StatusNotFound, "not_found", fmt.Sprintf("%s %q not found", what, key))
	}
	return v, ok
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	if r.URL.Query().Get("resume") == "true" {
		apiError(w, http.StatusBadRequest, "bad_request", "resume is not emulated")
		return
	}
	sb, ok := s.named(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	body := s.full(sb)
	s.mu.Unlock()
	emuapi.WriteJSON(w, http.StatusOK, body)
}

func (s *Server) update(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Ports   []int             `json:"ports"`
		Tags    map[string]string `json:"tags"`
		Timeout *int64            `json:"timeout"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", "invalid JSON body: "+err.Error())
		return
	}
	if msg := checkPorts(req.Ports) + checkTags(req.Tags); msg != "" {
		apiError(w, http.StatusBadRequest, "bad_request", msg)
		return
	}
	sb, ok := s.named(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	if req.Ports != nil {
		s.setRoutes(sb, req.Ports)
	}
	if req.Tags != nil {
		sb.Tags = req.Tags
	}
	if req.Timeout != nil {
		sb.Timeout = time.Duration(*req.Timeout) * time.Millisecond
	}
	sb.updated = time.Now()
	body := map[string]any{"sandbox": s.sandboxJSON(sb), "routes": s.routesJSON(sb)}
	s.mu.Unlock()
	emuapi.WriteJSON(w, http.StatusOK, body)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.named(w, r)
	if !ok {
		return
	}
	if s.killFault(w, "delete the sandbox") {
		return
	}
	s.mu.Lock()
	if s.status(sb.current) == "stopping" {
		s.mu.Unlock()
		apiError(w, http.StatusUnprocessableEntity, "sandbox_stopping", "the sandbox is stopping")
		return
	}
	s.end(sb.current)
	body := map[string]any{"sandbox": s.sandboxJSON(sb), "routes": []any{}}
	delete(s.sandboxes, sb.Name)
	for _, sub := range sb.nextRoute {
		delete(s.routes, sub)
	}
	s.mu.Unlock()
	emuapi.WriteJSON(w, http.StatusOK, body)
}

// listCursor is the opaque cursor of a page: the offset of its first sandbox.
func listCursor(off int) string {
	return base64.RawURLEncoding.EncodeToString(fmt.Appendf(nil, `{"offset":%d}`, off))
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	if !s.checkProject(w, q.Get("project")) {
		return
	}
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 || limit > 100 {
		limit = 50
	}
	start := 0
	if c := q.Get("cursor"); c != "" {
		b, err := base64.RawURLEncoding.DecodeString(c)
		var cur struct{ Offset int }
		if err != nil || json.Unmarshal(b, &cur) != nil || cur.Offset < 0 {
			apiError(w, http.StatusBadRequest, "bad_request", "invalid cursor")
			return
		}
		start = cur.Offset
	}
	if len(q["tags"]) > 1 {
		apiError(w, http.StatusBadRequest, "bad_request", "filtering by multiple tags is not supported")
		return
	}
	tagKey, tagValue, byTag := strings.Cut(q.Get("tags"), ":")
	if q.Get("tags") != "" && !byTag {
		apiError(w, http.StatusBadRequest, "bad_request", "a tags filter is key:value")
		return
	}
	prefix := q.Get("namePrefix")
	s.mu.Lock()
	var items []map[string]any
	for _, name := range s.made {
		sb, ok := s.sandboxes[name]
		if !ok || !strings.HasPrefix(name, prefix) {
			continue
		}
		if byTag {
			if v, ok := sb.Tags[tagKey]; !ok || v != tagValue {
				continue
			}
		}
		if slices.ContainsFunc(items, func(m map[string]any) bool { return m["name"] == name }) {
			continue
		}
		items = append(items, s.sandboxJSON(sb))
	}
	s.mu.Unlock()
	start = min(start, len(items))
	end := min(start+limit, len(items))
	page := map[string]any{"count": end - start, "next": nil}
	if end < len(items) {
		page["next"] = listCursor(end)
	}
	emuapi.WriteJSON(w, http.StatusOK, map[string]any{"sandboxes": append([]map[string]any{}, items[start:end]...), "pagination": page})
}

// sessionOf returns the request's session, answering 404 for one never made. Call without s.mu.
func (s *Server) sessionOf(w http.ResponseWriter, r *http.Request) (*session, bool) {
	return find(s, w, s.sessions, "session", r.PathValue("sid"))
}

// live returns the request's session if it runs, answering 410 sandbox_stopped (or 422
// sandbox_stopping) otherwise. Call without s.mu.
func (s *Server) live(w http.ResponseWriter, r *http.Request) (*session, bool) {
	ss, ok := s.sessionOf(w, r)
	if !ok {
		return nil, false
	}
	s.mu.Lock()
	st := s.status(ss)
	s.mu.Unlock()
	switch st {
	case "running":
		return ss, true
	case "pending":
		apiError(w, http.StatusUnprocessableEntity, "sandbox_not_ready", "the sandbox is starting")
	case "stopping":
		apiError(w, http.StatusUnprocessableEntity, "sandbox_stopping", "the sandbox is stopping")
	default:
		apiError(w, http.StatusGone, "sandbox_stopped", "the sandbox is stopped")
	}
	return nil, false
}

// killFault answers the status of an armed kill fault (SetKillFault), failing the request to
// do what, and reports whether it did.
func (s *Server) killFault(w http.ResponseWriter, what string) bool {
	code := s.TakeKill()
	if code != 0 {
		apiError(w, code, "internal_error", "failed to "+what)
	}
	return code != 0
}

func (s *Server) stopSession(w http.ResponseWriter, r *http.Request) {
	ss, ok := s.sessionOf(w, r)
	if !ok {
		return
	}
	if s.killFault(w, "stop the session") {
		return
	}
	s.mu.Lock()
	s.end(ss)
	body := map[string]any{"session": s.sessionJSON(ss)}
	if s.sandboxes[ss.sb.Name] == ss.sb {
		body["sandbox"] = s.sandboxJSON(ss.sb)
	}
	s.mu.Unlock()
	emuapi.WriteJSON(w, http.StatusOK, body)
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

// commandJSON is the Command of validators.ts.
func (c *command) json() map[string]any {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := map[string]any{"id": c.id, "name": c.argv[0], "args": c.argv[1:], "cwd": c.cwd, "sessionId": c.sess,
		"exitCode": nil, "startedAt": c.started.UnixMilli()}
	if c.exit != nil {
		m["exitCode"], m["durationMs"] = *c.exit, c.endedAt.Sub(c.started).Milliseconds()
	}
	return m
}

func (c *command) finish(code int, stdout, stderr []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.exit != nil {
		return
	}
	if len(stdout) > 0 {
		c.logs = append(c.logs, logLine{"stdout", string(stdout)})
	}
	if len(stderr) > 0 {
		c.logs = append(c.logs, logLine{"stderr", string(stderr)})
	}
	c.exit, c.endedAt = &code, time.Now()
	close(c.done)
}

func (s *Server) runCommand(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		Cwd     string            `json:"cwd"`
		Env     map[string]string `json:"env"`
		Sudo    bool              `json:"sudo"`
		Wait    bool              `json:"wait"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Command == "" {
		apiError(w, http.StatusBadRequest, "bad_request", "a command is required")
		return
	}
	ss, ok := s.live(w, r)
	if !ok {
		return
	}
	argv := append([]string{req.Command}, req.Args...)
	cwd := req.Cwd
	if cwd == "" {
		cwd = "/vercel/sandbox"
	}
	c := &command{id: "cmd_" + emuapi.RandHex(24), argv: argv, cwd: cwd, sess: ss.id, started: time.Now(), done: make(chan struct{})}
	s.mu.Lock()
	ss.cmds[c.id] = c
	s.commands = append(s.commands, Command{Sandbox: ss.sb.Name, Argv: argv, Cwd: req.Cwd, Env: req.Env, Sudo: req.Sudo})
	sctx := ss.ctx
	s.mu.Unlock()
	vm, _ := s.VM(ss.id)
	started := c.json() // the stream's first line is the command as it started
	switch code, exits := exitCode(argv); {
	case vm != nil:
		go func() {
			res, err := vm.Run(sctx, commandScript(argv, cwd, req.Env), nil)
			if err != nil {
				c.finish(-1, nil, []byte(err.Error()))
				return
			}
			c.finish(res.ExitCode, res.Stdout, res.Stderr)
		}()
	case exits:
		c.finish(code, nil, nil)
	case req.Wait:
		c.finish(0, nil, nil)
	default:
		go func() { <-sctx.Done(); c.finish(143, nil, nil) }()
	}
	if !req.Wait {
		emuapi.WriteJSON(w, http.StatusOK, map[string]any{"command": started})
		return
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	enc.Encode(map[string]any{"command": started})
	flush(w)
	select {
	case <-c.done:
	case <-r.Context().Done():
		return
	case <-s.Closed():
		return
	}
	c.mu.Lock()
	logs := slices.Clone(c.logs)
	c.mu.Unlock()
	for _, l := range logs {
		enc.Encode(l)
	}
	enc.Encode(map[string]any{"command": c.json()})
}

func flush(w http.ResponseWriter) {
	if f, ok := w.(http.Flusher); ok {
		f.Flush()
	}
}

// commandScript runs argv in cwd with env, in a VM's shell.
func commandScript(argv []string, cwd string, env map[string]string) string {
	var b strings.Builder
	b.WriteString("mkdir -p " + shellquote.Join([]string{cwd}) + " && cd " + shellquote.Join([]string{cwd}) + " && ")
	for _, k := range slices.Sorted(maps.Keys(env)) {
		b.WriteString("export " + shellquote.Join([]string{k + "=" + env[k]}) + "; ")
	}
	b.WriteString("exec " + shellquote.Join(argv))
	return b.String()
}

// commandOf returns the request's command of its session, answering 404 if there is none.
func (s *Server) commandOf(w http.ResponseWriter, r *http.Request) (*command, bool) {
	ss, ok := s.sessionOf(w, r)
	if !ok {
		return nil, false
	}
	return find(s, w, ss.cmds, "command", r.PathValue("cmd"))
}

func (s *Server) getCommand(w http.ResponseWriter, r *http.Request) {
	c, ok := s.commandOf(w, r)
	if !ok {
		return
	}
	if r.URL.Query().Get("wait") == "true" {
		select {
		case <-c.done:
		case <-r.Context().Done():
			return
		case <-s.Closed():
			return
		}
	}
	emuapi.WriteJSON(w, http.StatusOK, map[string]any{"command": c.json()})
}

func (s *Server) killCommand(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Signal int `json:"signal"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Signal <= 0 {
		apiError(w, http.StatusBadRequest, "bad_request", "a signal is required")
		return
	}
	c, ok := s.commandOf(w, r)
	if !ok {
		return
	}
	c.finish(128+req.Signal, nil, nil)
	emuapi.WriteJSON(w, http.StatusOK, map[string]any{"command": c.json()})
}

// resolve is p as the sandbox resolves it against cwd.
func resolve(p, cwd string) string {
	if !path.IsAbs(p) {
		if cwd == "" {
			cwd = "/vercel/sandbox"
		}
		p = path.Join(cwd, p)
	}
	return path.Clean(p)
}

func (s *Server) writeFiles(w http.ResponseWriter, r *http.Request) {
	dir := r.Header.Get("x-cwd")
	if !path.IsAbs(dir) {
		apiError(w, http.StatusBadRequest, "bad_request", "x-cwd must be an absolute directory")
		return
	}
	ss, ok := s.live(w, r)
	if !ok {
		return
	}
	zr, err := gzip.NewReader(r.Body)
	if err != nil {
		apiError(w, http.StatusBadRequest, "bad_request", "the body is not gzip: "+err.Error())
		return
	}
	tr := tar.NewReader(zr)
	vm, _ := s.VM(ss.id)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			apiError(w, http.StatusBadRequest, "bad_request", "the body is not a tar: "+err.Error())
			return
		}
		name := resolve(h.Name, dir)
		switch h.Typeflag {
		case tar.TypeDir:
			if vm != nil {
				if res, err := vm.Run(r.Context(), "mkdir -p "+shellquote.Join([]string{name}), nil); err != nil || res.ExitCode != 0 {
					apiError(w, http.StatusInternalServerError, "internal_error", fmt.Sprintf("mkdir %s: %v %s", name, err, res.Stderr))
					return
				}
			}
		case tar.TypeReg:
			if vm != nil {
				q := shellquote.Join([]string{name})
				script := fmt.Sprintf("mkdir -p \"$(dirname %s)\" && cat > %s && chmod %o %s", q, q, h.Mode&0o7777, q)
				if res, err := vm.Run(r.Context(), script, tr); err != nil || res.ExitCode != 0 {
					apiError(w, http.StatusInternalServerError, "internal_error", fmt.Sprintf("write %s: %v %s", name, err, res.Stderr))
					return
				}
				continue
			}
			b, err := io.ReadAll(tr)
			if err != nil {
				apiError(w, http.StatusBadRequest, "bad_request", "read "+name+": "+err.Error())
				return
			}
			s.mu.Lock()
			ss.files[name] = b
			s.mu.Unlock()
		}
	}
	emuapi.WriteJSON(w, http.StatusOK, map[string]any{})
}

// pathRequest reads a body {path, cwd} of a running session's request and returns the session
// and the path resolved, answering 400 or the session's error if it cannot.
func (s *Server) pathRequest(w http.ResponseWriter, r *http.Request) (*session, string, bool) {
	var req struct {
		Path string `json:"path"`
		Cwd  string `json:"cwd"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Path == "" {
		apiError(w, http.StatusBadRequest, "bad_request", "a path is required")
		return nil, "", false
	}
	ss, ok := s.live(w, r)
	return ss, resolve(req.Path, req.Cwd), ok
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) {
	ss, name, ok := s.pathRequest(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	b, found := ss.files[name]
	s.mu.Unlock()
	vm, _ := s.VM(ss.id)
	if vm != nil {
		q := shellquote.Join([]string{name})
		res, err := vm.Run(r.Context(), "test -f "+q+" || exit 44; cat "+q, nil)
		if err != nil {
			apiError(w, http.StatusInternalServerError, "internal_error", err.Error())
			return
		}
		b, found = res.Stdout, res.ExitCode == 0
		if !found && res.ExitCode != 44 {
			apiError(w, http.StatusInternalServerError, "internal_error", string(res.Stderr))
			return
		}
	}
	if !found {
		apiError(w, http.StatusNotFound, "file_not_found", fmt.Sprintf("file %q not found", name))
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(b)
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request) {
	ss, name, ok := s.pathRequest(w, r)
	if !ok {
		return
	}
	vm, _ := s.VM(ss.id)
	if vm != nil {
		if res, err := vm.Run(r.Context(), "mkdir -p "+shellquote.Join([]string{name}), nil); err != nil || res.ExitCode != 0 {
			apiError(w, http.StatusInternalServerError, "internal_error", fmt.Sprintf("mkdir: %v %s", err, res.Stderr))
			return
		}
	}
	emuapi.WriteJSON(w, http.StatusOK, map[string]any{})
}

func (s *Server) traffic(w http.ResponseWriter, r *http.Request, sub string) {
	s.mu.Lock()
	rt, ok := s.routes[sub]
	var status string
	if ok {
		status = s.status(rt.sess)
	}
	s.mu.Unlock()
	switch {
	case !ok:
		http.Error(w, "The deployment could not be found on Vercel.", http.StatusNotFound)
		return
	case status != "running":
		http.Error(w, "the sandbox is "+status, http.StatusBadGateway)
		return
	}
	vm, ok := s.VM(rt.sess.id)
	if !ok {
		w.Write([]byte("ok"))
		return
	}
	emuapi.Proxy(w, r, vm, rt.port, func(w http.ResponseWriter, msg string) { http.Error(w, msg, http.StatusBadGateway) })
}
