// Package tensorlakeemu is an in-process emulator of the subset of Tensorlake's sandbox API that
// provider/tensorlake uses, with the wire format of Tensorlake's public SDKs (the Python SDK's
// tensorlake/sandbox/models.py, the Go SDK github.com/Sixt/tensorlake-go):
//
//   - POST /sandboxes (CreateSandboxRequest: name, image, entrypoint, timeout_secs, resources
//     {cpus, memory_mb} required, exposed_ports, allow_unauthenticated_access), answering
//     CreateSandboxResponse {sandbox_id, status: "pending", name}; 409 for a name a sandbox not
//     yet terminated holds, 404 for an unknown image, 400 for missing resources;
//   - GET /sandboxes ({sandboxes: [SandboxInfo], next_cursor}, pages by limit and cursor, the
//     terminated ones included), GET /sandboxes/{id} (SandboxInfo; 404 for an id never made),
//     PATCH /sandboxes/{id} (exposed_ports, allow_unauthenticated_access), DELETE
//     /sandboxes/{id} (200, idempotent for a terminated sandbox, 404 for an unknown id, which
//     the SDKs raise as SandboxNotFoundError); management errors as plain text, as the Go SDK
//     reads them; the API key as a bearer token (401 without it);
//   - the sandbox's own API (https://ID.sandbox.tensorlake.ai/api/v1, here ProxyURL(ID)/api/v1):
//     POST /processes (StartProcessRequest; ProcessInfo with status "running"), GET
//     /processes/{pid}, GET /processes/{pid}/stdout and /stderr ({pid, lines, line_count}), PUT
//     and GET /files?path=P (raw bytes; parent directories made; 404 for a missing file); errors
//     as {"error", "code"}; 502 once the sandbox has ended, as a proxy would;
//   - port P of a sandbox (https://P-ID.sandbox.tensorlake.ai, here PortURL(ID, P)): answered only
//     for an exposed port of a running sandbox (404 otherwise, 502 once it has ended), without
//     the API key only with allow_unauthenticated_access.
//
// A sandbox is "pending" for StartDelay after its create, then "running"; it becomes
// "terminated" when deleted, when Expire is called, or when its idle timeout (timeout_secs with
// no request to its own API or ports) passes. Its entrypoint is not run: one that ends in
// `/bin/sh -c "exit N"` terminates the sandbox ExitAfter after it started running (outcome
// "failure"), as an entrypoint that exits would; any other entrypoint runs until the sandbox
// ends. A process whose command is `/bin/sh -c "exit N"` exits N; any other exits 0 with no
// output (they are recorded, Commands); files are kept in memory.
//
// With a VM backend (SetVMBackend; DinD(emuvm host) is the real one) a sandbox of one of the
// backend's images is backed by a real VM: its create starts the VM (500 and nothing created if
// that fails), its end removes it, processes run in it for real (their output is kept as lines),
// files are written and read in it, and its exposed ports are reverse-proxied, streaming, to the
// VM's ports while it runs.
//
// It misbehaves on demand: SetCreateFault (a create answered after the client gave up while the
// sandbox exists, a create that hangs, a create refused with a status such as 429 or 503, a
// create whose answer is lost), SetKillFault (deletes failing N times).
package tensorlakeemu

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/emuapi"
	"github.com/agentenv/agentenv/internal/emufault"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/internal/shellquote"
)

// CreateFault makes POST /sandboxes misbehave (see emufault.Create).
type CreateFault = emufault.Create

// Command is a process started in a sandbox through its API.
type Command struct {
	Sandbox string
	Argv    []string
}

// Sandbox is what the emulator holds of one sandbox.
type Sandbox struct {
	ID           string
	Name         string
	Image        string
	Entrypoint   []string
	Labels       map[string]string // decoded from the entrypoint's agentenv.labels= argument
	Status       string            // pending, running, terminated
	Timeout      time.Duration
	ExposedPorts []int
	Public       bool // allow_unauthenticated_access
}

// VM is the real machine behind a sandbox (see emuvm.Machine).
type VM = emuvm.Machine

// VMBackend starts the VMs behind sandboxes (see emuvm.Backend); labels are the sandbox's.
type VMBackend = emuvm.Backend

// DinD returns a VMBackend whose VMs are h's Docker-in-Docker containers.
func DinD(h *emuvm.Host) VMBackend { return emuvm.DinD(h) }

// Server is the emulator. Its methods are safe for concurrent use. The embedded Base gives it
// URL, Calls (create, list, get, update, delete, process, ...), SetCreateFault, SetKillFault
// (deletes fail and leave the sandbox running), Kills (the delete calls), VM, DirectAddr and
// VMErrors; it is a lifecycletest.Emulator.
type Server struct {
	*emuapi.Base
	apiKey string

	// StartDelay is how long a sandbox stays pending; ExitAfter how long one whose entrypoint
	// exits runs. Set them before the first create.
	StartDelay, ExitAfter time.Duration

	mu        sync.Mutex
	images    map[string]bool
	vmImages  map[string]bool
	backend   VMBackend
	sandboxes map[string]*sandbox
	order     []string
	commands  []Command
}

type sandbox struct {
	Sandbox
	created    time.Time
	runningAt  time.Time
	exitAt     time.Time // zero: the entrypoint does not exit
	lastActive time.Time
	outcome    string
	reason     string
	files      map[string][]byte
	procs      []*proc
}

type proc struct {
	mu     sync.Mutex
	done   bool
	code   int
	stdout []string
	stderr []string
	argv   []string
	start  time.Time
}

// Start runs an emulator on a loopback port until Close. Requests must carry apiKey as a bearer
// token. It knows the default image ("") and "ubuntu-minimal" (AddImage adds more).
func Start(apiKey string) *Server {
	s := &Server{
		Base: emuapi.New(emuapi.Bearer(apiKey), func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, "unauthorized: invalid or missing API key", http.StatusUnauthorized)
		}),
		apiKey:     apiKey,
		StartDelay: 20 * time.Millisecond, ExitAfter: 100 * time.Millisecond,
		images:    map[string]bool{"": true, "ubuntu-minimal": true},
		vmImages:  map[string]bool{},
		sandboxes: map[string]*sandbox{},
	}
	s.Handle("POST /sandboxes", "create", s.create)
	s.Handle("GET /sandboxes", "list", s.list)
	s.Handle("GET /sandboxes/{id}", "get", s.get)
	s.Handle("PATCH /sandboxes/{id}", "update", s.update)
	s.Handle("DELETE /sandboxes/{id}", "delete", s.kill)
	s.SetKillOps("delete")
	s.Handle("POST /proxy/{id}/api/v1/processes", "process", s.startProcess)
	s.Handle("GET /proxy/{id}/api/v1/processes/{pid}", "process_get", s.getProcess)
	s.Handle("GET /proxy/{id}/api/v1/processes/{pid}/{stream}", "process_output", s.output)
	s.Handle("PUT /proxy/{id}/api/v1/files", "write_file", s.writeFile)
	s.Handle("GET /proxy/{id}/api/v1/files", "read_file", s.readFile)
	s.Open("/port/{id}/{port}/{rest...}", s.traffic)
	s.Open("/port/{id}/{port}", s.traffic)
	s.Serve()
	return s
}

// ProxyURL is the base of sandbox id's own API (Tensorlake's https://ID.sandbox.tensorlake.ai).
func (s *Server) ProxyURL(id string) string { return s.URL() + "/proxy/" + url.PathEscape(id) }

// PortURL is the base URL of port of sandbox id (Tensorlake's https://PORT-ID.sandbox.tensorlake.ai).
func (s *Server) PortURL(id string, port int) string {
	return fmt.Sprintf("%s/port/%s/%d", s.URL(), url.PathEscape(id), port)
}

// Close releases requests held by faults, ends every sandbox, stops the server and, with a VM
// backend, removes every VM.
func (s *Server) Close() {
	s.Base.Close(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, sb := range s.sandboxes {
			s.end(sb, "terminated", "server closed")
		}
	})
}

// AddImage makes image known, so that sandboxes can be created from it.
func (s *Server) AddImage(image string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.images[image] = true
}

// SetVMBackend backs every sandbox created from now on from one of images with a VM of b.
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

// Running returns the ids of the sandboxes not terminated (pending or running), sorted.
func (s *Server) Running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return emuapi.Running(s.sandboxes, s.alive)
}

// Sandbox returns what the emulator holds of sandbox id.
func (s *Server) Sandbox(id string) (Sandbox, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[id]
	if !ok {
		return Sandbox{}, false
	}
	s.alive(sb)
	out := sb.Sandbox
	out.Labels, out.Entrypoint, out.ExposedPorts = maps.Clone(sb.Labels), slices.Clone(sb.Entrypoint), slices.Clone(sb.ExposedPorts)
	return out, true
}

// Made returns the ids of every sandbox created so far, in order.
func (s *Server) Made() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.order)
}

// Commands returns the processes started through the sandbox API, in order.
func (s *Server) Commands() []Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.commands)
}

// Expire ends sandbox id as its idle timeout would.
func (s *Server) Expire(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb, ok := s.sandboxes[id]; ok {
		s.end(sb, "success", "idle timeout")
	}
}

// status brings sb's status up to now and returns it. Call with s.mu held.
func (s *Server) status(sb *sandbox) string {
	now := time.Now()
	if sb.Status == "pending" && !now.Before(sb.runningAt) {
		sb.Status = "running"
	}
	if sb.Status == "running" {
		switch {
		case !sb.exitAt.IsZero() && now.After(sb.exitAt):
			s.end(sb, "failure", "entrypoint exited")
		case sb.Timeout > 0 && now.After(sb.lastActive.Add(sb.Timeout)):
			s.end(sb, "success", "idle timeout")
		}
	}
	return sb.Status
}

// alive reports whether sb is pending or running. Call with s.mu held.
func (s *Server) alive(sb *sandbox) bool { return s.status(sb) != "terminated" }

// end terminates sb (if it is not already), its VM removed in the background. Call with s.mu held.
func (s *Server) end(sb *sandbox, outcome, reason string) {
	if sb.Status == "terminated" {
		return
	}
	sb.Status, sb.outcome, sb.reason = "terminated", outcome, reason
	s.RemoveVMLater(sb.ID)
}

func writeJSON(w http.ResponseWriter, code int, v any) { emuapi.WriteJSON(w, code, v) }

// sandboxError answers an error of the sandbox API, {"error", "code"}.
func sandboxError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]string{"error": msg, "code": code})
}

type createRequest struct {
	Name         string   `json:"name"`
	Image        string   `json:"image"`
	Entrypoint   []string `json:"entrypoint"`
	TimeoutSecs  int64    `json:"timeout_secs"`
	ExposedPorts []int    `json:"exposed_ports"`
	Public       bool     `json:"allow_unauthenticated_access"`
	Resources    *struct {
		CPUs     float64 `json:"cpus"`
		MemoryMB int64   `json:"memory_mb"`
	} `json:"resources"`
}

// exitScript is an entrypoint's or process's `/bin/sh -c "exit N"`.
var exitScript = regexp.MustCompile(`^exit ([0-9]+)$`)

// exitCode returns N if argv (or its tail) is /bin/sh -c "exit N".
func exitCode(argv []string) (int, bool) {
	for i := range argv {
		tail := argv[i:]
		if len(tail) == 3 && (tail[0] == "/bin/sh" || tail[0] == "sh") && tail[1] == "-c" {
			if m := exitScript.FindStringSubmatch(strings.TrimSpace(tail[2])); m != nil {
				n, _ := strconv.Atoi(m[1])
				return n, true
			}
		}
	}
	return 0, false
}

// labelsOf decodes the agentenv.labels= argument of an entrypoint.
func labelsOf(entrypoint []string) map[string]string {
	for _, a := range entrypoint {
		if v, ok := strings.CutPrefix(a, "agentenv.labels="); ok {
			var m map[string]string
			if json.Unmarshal([]byte(v), &m) == nil {
				return m
			}
		}
	}
	return nil
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Resources == nil || req.Resources.CPUs <= 0 || req.Resources.MemoryMB <= 0 {
		http.Error(w, "invalid request: resources with cpus and memory_mb are required", http.StatusBadRequest)
		return
	}
	for _, p := range req.ExposedPorts {
		if p < 1 || p > 65535 || p == 9501 {
			http.Error(w, fmt.Sprintf("invalid exposed port %d", p), http.StatusBadRequest)
			return
		}
	}
	s.mu.Lock()
	known := s.images[req.Image]
	taken := false
	for _, sb := range s.sandboxes {
		if req.Name != "" && sb.Name == req.Name && s.alive(sb) {
			taken = true
		}
	}
	f := s.TakeCreate()
	s.mu.Unlock()
	switch {
	case !known:
		http.Error(w, fmt.Sprintf("image %q not found", req.Image), http.StatusNotFound)
		return
	case taken:
		http.Error(w, fmt.Sprintf("a sandbox named %q already exists", req.Name), http.StatusConflict)
		return
	case f != nil && f.Status != 0:
		http.Error(w, f.Message, f.Status)
		return
	}
	if !f.Hold(s.Closed()) {
		return
	}
	now := time.Now()
	sb := &sandbox{
		Sandbox: Sandbox{ID: emuapi.RandHex(20), Name: req.Name, Image: req.Image, Entrypoint: req.Entrypoint,
			Labels: labelsOf(req.Entrypoint), Status: "pending", Timeout: time.Duration(req.TimeoutSecs) * time.Second,
			ExposedPorts: req.ExposedPorts, Public: req.Public},
		created: now, runningAt: now.Add(s.StartDelay), lastActive: now, files: map[string][]byte{},
	}
	if _, exits := exitCode(req.Entrypoint); exits {
		sb.exitAt = sb.runningAt.Add(s.ExitAfter)
	}
	s.mu.Lock()
	s.sandboxes[sb.ID] = sb
	s.order = append(s.order, sb.ID)
	backend := s.backend
	if !s.vmImages[sb.Image] {
		backend = nil
	}
	s.mu.Unlock()
	if backend != nil {
		if err := s.startVM(r, sb, backend); err != nil {
			http.Error(w, "failed to create sandbox: "+err.Error(), http.StatusInternalServerError)
			return
		}
	}
	if f != nil && f.Lost {
		emufault.DropAnswer(w)
		return
	}
	f.Linger(s.Closed())
	writeJSON(w, http.StatusOK, map[string]any{"sandbox_id": sb.ID, "status": "pending", "name": sb.Name})
}

// startVM starts the VM of sb (Tensorlake finishes a create whether or not its client waits);
// if sb ended meanwhile the VM is removed at once.
func (s *Server) startVM(r *http.Request, sb *sandbox, b VMBackend) error {
	labels := maps.Clone(sb.Labels)
	if labels[agentenv.LabelRecord] == "" {
		labels[agentenv.LabelRecord] = sb.Name
	}
	vm, err := s.StartVM(r, b, "tlemu-"+sb.ID, labels)
	s.mu.Lock()
	if err != nil {
		s.end(sb, "failure", "vm failed to start")
		s.mu.Unlock()
		return err
	}
	s.SetVM(sb.ID, vm)
	running := s.alive(sb)
	s.mu.Unlock()
	if !running {
		s.RemoveVM(sb.ID)
	}
	return nil
}

// info is SandboxInfo. Call with s.mu held.
func (s *Server) info(sb *sandbox) map[string]any {
	m := map[string]any{
		"id": sb.ID, "namespace": "default", "status": s.status(sb), "name": sb.Name, "image": sb.Image,
		"entrypoint": sb.Entrypoint, "timeout_secs": int64(sb.Timeout / time.Second),
		"resources":  map[string]any{"cpus": 1.0, "memory_mb": 1024, "ephemeral_disk_mb": 1024},
		"created_at": sb.created.UnixMilli(), "exposed_ports": sb.ExposedPorts,
		"allow_unauthenticated_access": sb.Public,
	}
	if sb.ExposedPorts == nil {
		m["exposed_ports"] = []int{}
	}
	if sb.Status == "terminated" {
		m["outcome"], m["termination_reason"] = sb.outcome, sb.reason
	}
	return m
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	limit, _ := strconv.Atoi(q.Get("limit"))
	if limit <= 0 || limit > 100 {
		limit = 100
	}
	start, _ := strconv.Atoi(q.Get("cursor"))
	s.mu.Lock()
	var items []map[string]any
	for _, id := range s.order {
		items = append(items, s.info(s.sandboxes[id]))
	}
	s.mu.Unlock()
	start = min(max(start, 0), len(items))
	end := min(start+limit, len(items))
	body := map[string]any{"sandboxes": append([]map[string]any{}, items[start:end]...)}
	if end < len(items) {
		body["next_cursor"] = strconv.Itoa(end)
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	sb, ok := s.sandboxes[r.PathValue("id")]
	var body map[string]any
	if ok {
		body = s.info(sb)
	}
	s.mu.Unlock()
	if !ok {
		http.Error(w, fmt.Sprintf("sandbox %s not found", r.PathValue("id")), http.StatusNotFound)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) update(w http.ResponseWriter, r *http.Request) {
	var req struct {
		ExposedPorts []int `json:"exposed_ports"`
		Public       *bool `json:"allow_unauthenticated_access"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, "invalid request body", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	sb, ok := s.sandboxes[r.PathValue("id")]
	var body map[string]any
	alive := ok && s.alive(sb)
	if alive {
		if req.ExposedPorts != nil {
			sb.ExposedPorts = req.ExposedPorts
		}
		if req.Public != nil {
			sb.Public = *req.Public
		}
		body = s.info(sb)
	}
	s.mu.Unlock()
	switch {
	case !ok:
		http.Error(w, "sandbox not found", http.StatusNotFound)
	case !alive:
		http.Error(w, "sandbox is terminated", http.StatusConflict)
	default:
		writeJSON(w, http.StatusOK, body)
	}
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	sb, ok := s.sandboxes[id]
	alive := ok && s.alive(sb)
	code := 0
	if alive {
		code = s.TakeKill()
	}
	if alive && code == 0 {
		sb.Status, sb.outcome, sb.reason = "terminated", "success", "terminated by request"
	}
	s.mu.Unlock()
	if alive && code == 0 {
		s.RemoveVM(sb.ID) // answered once the sandbox is gone
	}
	switch {
	case code != 0:
		http.Error(w, "failed to terminate sandbox: internal error", code)
	case !ok:
		http.Error(w, fmt.Sprintf("sandbox %s not found", id), http.StatusNotFound)
	default:
		w.WriteHeader(http.StatusOK)
	}
}

// running returns sandbox id if it runs (and marks it active), else answers as the proxy would.
func (s *Server) running(w http.ResponseWriter, id string) (*sandbox, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[id]
	switch {
	case !ok:
		sandboxError(w, http.StatusNotFound, "not_found", "sandbox not found")
		return nil, false
	case s.status(sb) != "running":
		sandboxError(w, http.StatusBadGateway, "unavailable", "sandbox is "+sb.Status)
		return nil, false
	}
	sb.lastActive = time.Now()
	return sb, true
}

func (s *Server) startProcess(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Command string            `json:"command"`
		Args    []string          `json:"args"`
		Env     map[string]string `json:"env"`
		Dir     string            `json:"working_dir"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Command == "" {
		sandboxError(w, http.StatusBadRequest, "invalid_request", "command is required")
		return
	}
	sb, ok := s.running(w, r.PathValue("id"))
	if !ok {
		return
	}
	argv := append([]string{req.Command}, req.Args...)
	pr := &proc{argv: argv, start: time.Now()}
	s.mu.Lock()
	sb.procs = append(sb.procs, pr)
	pid := len(sb.procs)
	vm, _ := s.VM(sb.ID)
	s.commands = append(s.commands, Command{Sandbox: sb.ID, Argv: argv})
	s.mu.Unlock()
	if vm == nil {
		code, _ := exitCode(argv)
		pr.finish(code, "", "")
	} else {
		go s.runInVM(sb.ID, vm, pr)
	}
	writeJSON(w, http.StatusOK, pr.info(pid))
}

// runInVM runs pr in vm until it exits or the sandbox ends.
func (s *Server) runInVM(id string, vm VM, pr *proc) {
	ctx, cancel := emuapi.WhileAlive(context.Background(), s.Closed(), func() bool { // the process ends with the sandbox
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.alive(s.sandboxes[id])
	})
	defer cancel()
	res, err := vm.Run(ctx, shellquote.Join(pr.argv), nil)
	if err != nil {
		pr.finish(137, "", err.Error())
		return
	}
	pr.finish(res.ExitCode, string(res.Stdout), string(res.Stderr))
}

func (pr *proc) finish(code int, stdout, stderr string) {
	lines := func(s string) []string {
		s = strings.TrimSuffix(s, "\n")
		if s == "" {
			return []string{}
		}
		return strings.Split(s, "\n")
	}
	pr.mu.Lock()
	defer pr.mu.Unlock()
	pr.done, pr.code, pr.stdout, pr.stderr = true, code, lines(stdout), lines(stderr)
}

// info is ProcessInfo.
func (pr *proc) info(pid int) map[string]any {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	m := map[string]any{"pid": pid, "status": "running", "stdin_writable": false, "command": pr.argv[0],
		"args": pr.argv[1:], "started_at": pr.start.UnixMilli()}
	if pr.done {
		m["status"], m["exit_code"], m["ended_at"] = "exited", pr.code, time.Now().UnixMilli()
	}
	return m
}

// process returns the process of the request's pid, or answers 404.
func (s *Server) process(w http.ResponseWriter, r *http.Request) (*proc, int, bool) {
	sb, ok := s.running(w, r.PathValue("id"))
	if !ok {
		return nil, 0, false
	}
	pid, err := strconv.Atoi(r.PathValue("pid"))
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil || pid < 1 || pid > len(sb.procs) {
		sandboxError(w, http.StatusNotFound, "not_found", "process not found")
		return nil, 0, false
	}
	return sb.procs[pid-1], pid, true
}

func (s *Server) getProcess(w http.ResponseWriter, r *http.Request) {
	if pr, pid, ok := s.process(w, r); ok {
		writeJSON(w, http.StatusOK, pr.info(pid))
	}
}

func (s *Server) output(w http.ResponseWriter, r *http.Request) {
	pr, pid, ok := s.process(w, r)
	if !ok {
		return
	}
	pr.mu.Lock()
	var lines []string
	switch r.PathValue("stream") {
	case "stdout":
		lines = slices.Clone(pr.stdout)
	case "stderr":
		lines = slices.Clone(pr.stderr)
	default:
		pr.mu.Unlock()
		sandboxError(w, http.StatusNotFound, "not_found", "no such output stream")
		return
	}
	pr.mu.Unlock()
	if lines == nil {
		lines = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"pid": pid, "lines": lines, "line_count": len(lines)})
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Query().Get("path")
	if !strings.HasPrefix(path, "/") {
		sandboxError(w, http.StatusBadRequest, "invalid_path", "path must be absolute")
		return
	}
	sb, ok := s.running(w, r.PathValue("id"))
	if !ok {
		return
	}
	vm, _ := s.VM(sb.ID)
	if vm != nil {
		q := shellquote.Join([]string{path})
		res, err := vm.Run(r.Context(), "mkdir -p \"$(dirname "+q+")\" && cat >"+q, r.Body)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
		}
		if err != nil {
			sandboxError(w, http.StatusInternalServerError, "io_error", err.Error())
			return
		}
		w.WriteHeader(http.StatusOK)
		return
	}
	data, err := io.ReadAll(r.Body)
	if err != nil {
		sandboxError(w, http.StatusBadRequest, "invalid_body", err.Error())
		return
	}
	s.mu.Lock()
	sb.files[path] = data
	s.mu.Unlock()
	w.WriteHeader(http.StatusOK)
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Query().Get("path")
	sb, ok := s.running(w, r.PathValue("id"))
	if !ok {
		return
	}
	vm, _ := s.VM(sb.ID)
	s.mu.Lock()
	data, found := sb.files[path]
	s.mu.Unlock()
	if vm != nil {
		q := shellquote.Join([]string{path})
		res, err := vm.Run(r.Context(), "test -f "+q+" || exit 44; cat "+q, nil)
		switch {
		case err != nil:
			sandboxError(w, http.StatusInternalServerError, "io_error", err.Error())
			return
		case res.ExitCode == 44:
			found = false
		case res.ExitCode != 0:
			sandboxError(w, http.StatusInternalServerError, "io_error", string(res.Stderr))
			return
		default:
			data, found = res.Stdout, true
		}
	}
	if !found {
		sandboxError(w, http.StatusNotFound, "not_found", "file not found: "+path)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Write(data)
}

// traffic serves port P of a sandbox: the VM's port through a reverse proxy, else 200 "ok".
func (s *Server) traffic(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	port, err := strconv.Atoi(r.PathValue("port"))
	s.mu.Lock()
	sb, ok := s.sandboxes[id]
	var status string
	exposed, public := false, false
	var vm VM
	if ok {
		status = s.status(sb)
		exposed, public = slices.Contains(sb.ExposedPorts, port), sb.Public
		vm, _ = s.VM(id)
		sb.lastActive = time.Now()
	}
	s.mu.Unlock()
	switch {
	case !ok || err != nil:
		http.Error(w, "sandbox not found", http.StatusNotFound)
		return
	case status != "running":
		http.Error(w, "sandbox is "+status, http.StatusBadGateway)
		return
	case !exposed:
		http.Error(w, fmt.Sprintf("port %d is not exposed", port), http.StatusNotFound)
		return
	case !public && r.Header.Get("Authorization") != "Bearer "+s.apiKey:
		http.Error(w, "unauthorized", http.StatusUnauthorized)
		return
	}
	if vm == nil {
		w.Write([]byte("ok"))
		return
	}
	emuapi.Proxy(w, r, vm, port, func(w http.ResponseWriter, msg string) { http.Error(w, msg, http.StatusBadGateway) })
}
