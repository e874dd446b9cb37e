// Package e2bemu is an in-process emulator of the subset of E2B's REST API and of its
// in-sandbox process API (envd) that provider/e2b uses, with the real wire format, as documented
// in E2B's API reference (https://e2b.dev/docs/api-reference; the OpenAPI spec is
// github.com/e2b-dev/infra spec/openapi.yml) and envd's process.proto (same repository,
// packages/envd/spec/process/process.proto), and as E2B's SDKs call them:
//
//   - POST /sandboxes (NewSandbox: templateID, timeout, metadata, envVars; 201 Sandbox), with
//     404 for an unknown template;
//   - GET /sandboxes and GET /v2/sandboxes (ListedSandbox items; metadata filter as a URL-encoded
//     query "k=v&k2=v2"; v2 pages with limit, nextToken and the X-Next-Token header);
//   - GET /sandboxes/{id} (SandboxDetail), DELETE /sandboxes/{id} (204, 404 once it has ended),
//     POST /sandboxes/{id}/timeout (204);
//   - errors as {"code": N, "message": "..."}; the X-API-Key header (401 without the right key);
//   - envd's process.Process/Start as a Connect server stream with the JSON codec (enveloped
//     StartResponse events: start, data, end; then the end-of-stream message);
//   - envd's filesystem upload, POST /files?path=P&username=U with the file in the multipart
//     field "file" (E2B API reference, "upload a file"), answering [{"path","name","type"}].
//
// E2B serves port P of sandbox ID at https://P-ID.<domain>; here it is
// URL()/sandbox/ID/P, which SandboxURL returns, so a client whose port mapping is a function can
// be pointed at the emulator. Port 49983 is envd.
//
// Sandboxes "run" as in-memory records. A sandbox ends at its timeout (it is then not listed,
// GET and DELETE answer 404, and its ports answer 502 as E2B's proxy does), when it is killed,
// or when Expire is called. A process started with the tag "agentenv-main" whose script is
// "exit N" ends the sandbox with code N (an emulation convenience: on E2B the sandbox would run
// on until its timeout). Any other process runs until the sandbox ends; "docker create" (or run) and
// "docker rm" succeed and are recorded (Commands). Every port of a running sandbox other than
// envd's answers 200 "ok", so readiness-style checks pass.
//
// With a VM backend (SetVMBackend; DinD(emuvm host) is the real one) a sandbox of the
// Docker-capable template is backed by a real VM, as on E2B: its create starts the VM (500 and
// nothing created if that fails), its end (kill, timeout, Expire, Close) removes it, envd's
// process.Process/Start runs the command in it for real (its output is sent when it ends), and
// URL()/sandbox/ID/P is reverse-proxied, streaming, to the VM's port P while the sandbox runs
// (502 when it does not). Commands are recorded either way.
//
// It misbehaves on demand: SetCreateFault (a create answered after the client gave up while
// the sandbox exists, a create that hangs, a create refused with a status such as 429 or 503
// "no capacity", a create whose answer is lost), SetKillFault (kills failing N times).
package e2bemu

import (
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/agentenv/agentenv/internal/emuapi"
	"github.com/agentenv/agentenv/internal/emufault"
)

// CreateFault makes POST /sandboxes misbehave (see emufault.Create).
type CreateFault = emufault.Create

// Command is a process started in a sandbox through envd.
type Command struct {
	Sandbox string
	User    string // from the Basic authorization envd reads
	Tag     string
	Cmd     string
	Args    []string
	Script  string // the -c argument of a shell, else Cmd and Args joined
}

// Upload is a file written into a sandbox through envd's filesystem API.
type Upload struct {
	Sandbox string
	Path    string
	User    string // the username query parameter
	Data    []byte
}

// Sandbox is what the emulator holds of one sandbox.
type Sandbox struct {
	ID       string
	Template string
	Metadata map[string]string
	EnvVars  map[string]string
	Timeout  time.Duration // as last set by create or POST /timeout
	Running  bool
	ExitCode int // once ended: the main process's code, or -1 (killed or timed out)
}

// Server is the emulator. Its methods are safe for concurrent use. The embedded Base gives it
// URL, Calls (create, list, get, kill, timeout, process), SetCreateFault, SetKillFault (kills
// fail and leave the sandbox running), Kills (the kill calls), VM, DirectAddr and VMErrors; it
// is a lifecycletest.Emulator.
type Server struct {
	*emuapi.Base

	mu        sync.Mutex
	templates map[string]bool
	sandboxes map[string]*sandbox
	made      []string // every sandbox's id, in the order made
	pageSize  int
	commands  []Command
	uploads   []Upload

	backend     VMBackend
	vmTemplates map[string]bool
}

type sandbox struct {
	Sandbox
	started time.Time
	endAt   time.Time
	token   string
}

// Start runs an emulator on a loopback port until Close. Requests must carry apiKey in X-API-Key.
// It knows the templates "base" and "docker" (AddTemplate adds more).
func Start(apiKey string) *Server {
	s := &Server{
		Base: emuapi.New(emuapi.Header("X-API-Key", apiKey), func(w http.ResponseWriter, _ *http.Request) {
			writeError(w, http.StatusUnauthorized, "Invalid API key, please visit https://e2b.dev/docs to get your API key")
		}),
		templates: map[string]bool{"base": true, "docker": true},
		sandboxes: map[string]*sandbox{}, pageSize: 100,
	}
	s.Handle("POST /sandboxes", "create", s.create)
	s.Handle("GET /sandboxes", "list", s.list)
	s.Handle("GET /v2/sandboxes", "list", s.list)
	s.Handle("GET /sandboxes/{id}", "get", s.get)
	s.Handle("DELETE /sandboxes/{id}", "kill", s.kill)
	s.Handle("POST /sandboxes/{id}/timeout", "timeout", s.setTimeout)
	s.SetKillOps("kill")
	s.Open("/sandbox/{id}/{port}/{rest...}", s.traffic)
	s.Open("/sandbox/{id}/{port}", s.traffic)
	s.Serve()
	return s
}

// SandboxURL is the base URL of port of sandbox id (E2B's https://PORT-ID.e2b.app).
func (s *Server) SandboxURL(id string, port int) string {
	return fmt.Sprintf("%s/sandbox/%s/%d", s.URL(), url.PathEscape(id), port)
}

// Close releases requests held by faults, ends every sandbox, stops the server and, with a VM
// backend, removes every VM (waiting for each removal, each bounded by a minute).
func (s *Server) Close() {
	s.Base.Close(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, sb := range s.sandboxes {
			if sb.Running {
				sb.Running, sb.ExitCode = false, -1
			}
		}
	})
}

// AddTemplate makes template known, so that sandboxes can be created from it.
func (s *Server) AddTemplate(template string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.templates[template] = true
}

// SetPageSize caps the page size of GET /v2/sandboxes (default 100, E2B's maximum).
func (s *Server) SetPageSize(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pageSize = n
}

// Running returns the ids of the sandboxes still running, sorted.
func (s *Server) Running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return emuapi.Running(s.sandboxes, s.alive)
}

// Made returns the ids of every sandbox created so far, in order.
func (s *Server) Made() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.made)
}

// Sandbox returns what the emulator holds of sandbox id, running or ended.
func (s *Server) Sandbox(id string) (Sandbox, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[id]
	if !ok {
		return Sandbox{}, false
	}
	s.alive(sb)
	out := sb.Sandbox
	out.Metadata = maps.Clone(sb.Metadata)
	return out, true
}

// Commands returns the processes started through envd, in order.
func (s *Server) Commands() []Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.commands)
}

// Uploads returns every file written through envd's filesystem API so far, in order.
func (s *Server) Uploads() []Upload {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.uploads)
}

// Expire ends sandbox id as its timeout would.
func (s *Server) Expire(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if sb, ok := s.sandboxes[id]; ok && sb.Running {
		sb.Running, sb.ExitCode = false, -1
		s.ended(sb)
	}
}

// alive ends sb if its timeout passed, and reports whether it runs. Call with s.mu held.
func (s *Server) alive(sb *sandbox) bool {
	if sb.Running && time.Now().After(sb.endAt) {
		sb.Running, sb.ExitCode = false, -1
		s.ended(sb)
	}
	return sb.Running
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]any{"code": code, "message": msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) { emuapi.WriteJSON(w, code, v) }

// newSandbox is the NewSandbox schema.
type newSandbox struct {
	TemplateID string            `json:"templateID"`
	Timeout    *int              `json:"timeout"`
	Secure     bool              `json:"secure"`
	Metadata   map[string]string `json:"metadata"`
	EnvVars    map[string]string `json:"envVars"`
}

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req newSandbox
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.TemplateID == "" {
		writeError(w, http.StatusBadRequest, "invalid request body: templateID is required")
		return
	}
	s.mu.Lock()
	known := s.templates[req.TemplateID]
	f := s.TakeCreate()
	s.mu.Unlock()
	if !known {
		writeError(w, http.StatusNotFound, fmt.Sprintf("template '%s' not found", req.TemplateID))
		return
	}
	if f != nil && f.Status != 0 {
		writeError(w, f.Status, f.Message)
		return
	}
	if !f.Hold(s.Closed()) {
		return
	}
	timeout := 15 // NewSandbox's default
	if req.Timeout != nil {
		timeout = *req.Timeout
	}
	sb := &sandbox{
		Sandbox: Sandbox{ID: "i" + emuapi.RandHex(10), Template: req.TemplateID, Metadata: req.Metadata, EnvVars: req.EnvVars,
			Timeout: time.Duration(timeout) * time.Second, Running: true},
		started: time.Now().UTC(),
	}
	sb.endAt = sb.started.Add(sb.Timeout)
	if req.Secure {
		sb.token = emuapi.RandHex(16)
	}
	s.mu.Lock()
	s.sandboxes[sb.ID] = sb
	s.made = append(s.made, sb.ID)
	backend := s.backend
	if !s.vmTemplates[sb.Template] {
		backend = nil
	}
	s.mu.Unlock()
	if backend != nil {
		if err := s.startVM(r, sb, backend); err != nil {
			writeError(w, http.StatusInternalServerError, "failed to create sandbox: "+err.Error())
			return
		}
	}
	if f != nil && f.Lost {
		emufault.DropAnswer(w)
		return
	}
	f.Linger(s.Closed())
	body := map[string]any{"templateID": sb.Template, "sandboxID": sb.ID, "clientID": "emu", "envdVersion": "0.2.0", "domain": nil}
	if sb.token != "" {
		body["envdAccessToken"] = sb.token
	}
	writeJSON(w, http.StatusCreated, body)
}

// listed is the ListedSandbox (and SandboxDetail) schema.
func (sb *sandbox) listed() map[string]any {
	m := map[string]any{
		"templateID": sb.Template, "sandboxID": sb.ID, "clientID": "emu", "startedAt": sb.started,
		"endAt": sb.endAt, "cpuCount": 2, "memoryMB": 512, "diskSizeMB": 1024, "state": "running",
		"envdVersion": "0.2.0", "metadata": sb.Metadata,
	}
	if sb.token != "" {
		m["envdAccessToken"] = sb.token
	}
	return m
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	filter, err := url.ParseQuery(q.Get("metadata"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid metadata query: "+err.Error())
		return
	}
	s.mu.Lock()
	var items []map[string]any
	ids := slices.Sorted(maps.Keys(s.sandboxes))
	for _, id := range ids {
		sb := s.sandboxes[id]
		if !s.alive(sb) {
			continue
		}
		ok := true
		for k := range filter {
			if v, has := sb.Metadata[k]; !has || v != filter.Get(k) {
				ok = false
			}
		}
		if ok {
			items = append(items, sb.listed())
		}
	}
	size := s.pageSize
	s.mu.Unlock()
	if items == nil {
		items = []map[string]any{}
	}
	if r.URL.Path == "/v2/sandboxes" {
		if n, err := strconv.Atoi(q.Get("limit")); err == nil && n > 0 && n < size {
			size = n
		}
		start, _ := strconv.Atoi(q.Get("nextToken"))
		start = min(max(start, 0), len(items))
		end := min(start+size, len(items))
		if end < len(items) {
			w.Header().Set("X-Next-Token", strconv.Itoa(end))
		}
		items = items[start:end]
	}
	writeJSON(w, http.StatusOK, items)
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	sb, ok := s.sandboxes[r.PathValue("id")]
	var body map[string]any
	if ok && s.alive(sb) {
		body = sb.listed()
	}
	s.mu.Unlock()
	if body == nil {
		writeError(w, http.StatusNotFound, fmt.Sprintf("sandbox \"%s\" doesn't exist or you don't have access to it", r.PathValue("id")))
		return
	}
	writeJSON(w, http.StatusOK, body)
}

func (s *Server) kill(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	sb, ok := s.sandboxes[id]
	running := ok && s.alive(sb)
	code := 0
	if running {
		code = s.TakeKill()
	}
	if running && code == 0 {
		sb.Running, sb.ExitCode = false, -1
	}
	s.mu.Unlock()
	if running && code == 0 {
		s.RemoveVM(sb.ID) // E2B answers once the sandbox is gone
	}
	switch {
	case code != 0:
		writeError(w, code, "failed to kill sandbox: internal error")
	case !running:
		writeError(w, http.StatusNotFound, fmt.Sprintf("sandbox \"%s\" not found", id))
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

func (s *Server) setTimeout(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Timeout *int `json:"timeout"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || req.Timeout == nil {
		writeError(w, http.StatusBadRequest, "timeout is required")
		return
	}
	s.mu.Lock()
	sb, ok := s.sandboxes[r.PathValue("id")]
	running := ok && s.alive(sb)
	if running {
		sb.Timeout = time.Duration(*req.Timeout) * time.Second
		sb.endAt = time.Now().Add(sb.Timeout)
	}
	s.mu.Unlock()
	if !running {
		writeError(w, http.StatusNotFound, "sandbox not found")
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
