// Package smolvmemu is an in-process emulator of the subset of smolvm's local HTTP API
// (`smolvm serve`) that provider/smolvm uses: a fake of a server that cannot run here (smolvm
// cannot be built on this machine and no binary of it is available), written from smolvm's
// docs (docs/local-api, its references/api-fields.md and traps.md) and its server's request
// and answer types (src/api/types.rs, src/api/handlers):
//
//   - POST /api/v1/machines (CreateMachineRequest; an unknown field is 422 naming it, as from
//     v1.22.2; cmd or entrypoint without an image 400; a name smolvm refuses 400; a name in use
//     409), answering MachineInfo with state "created": a create does not boot the machine;
//   - GET /api/v1/machines ({machines: [MachineInfo]}), GET and DELETE /api/v1/machines/{name}
//     (404 {"error": "machine 'x' not found", "code": "NOT_FOUND"} for a name it does not list;
//     DELETE stops the machine first and answers {deleted}); POST .../start (binds each
//     published host port, 409 PORT_IN_USE when one is taken) and .../stop;
//   - POST .../exec (ExecRequest, unknown fields refused; ExecResponse with exitCode, stdout,
//     stderr and their base64 forms) and PUT and GET .../files/{path} (FileUploadResponse
//     {path, size}; a missing file is 500 "... No such file or directory"). Exec and files start
//     a machine that is not running, as smolvm's ensure_running does.
//
// It plays both traps smolvm's docs document. A started machine's workload (or, with no image,
// its guest agent) comes up WorkloadDelay after the start; until then an exec answers HTTP 200
// with exitCode 1 and no output, and until UploadLag later an upload answers 200 with the path
// and size and is lost, and a download answers 500 "failed to canonicalize target". And a
// command that fails in the guest answers 200 with its exitCode.
//
// A machine from an image runs in memory: its workload is not run, its published ports answer
// HTTP 200 "ok" while the workload runs and refuse connections once it has ended, its files are
// kept in memory, and an exec of `true`, `docker info` or anything else exits 0, of `false` 1,
// and of `sh -c "exit N"` N. A workload whose command (the machine's cmd) is `/bin/sh -c "exit N"`
// ends ExitAfter after it came up; Expire ends one as if it finished. smolvm keeps the machine
// running then and says nothing of the workload; what the workload itself leaves behind is
// emulated for one shape, an emulation convenience: when the entrypoint is a `/bin/sh -c`
// script that records "$@"'s status with `echo $code >FILE.new && mv FILE.new FILE`, FILE gets
// the status, as provider/smolvm's wrapper would write it.
//
// With a VM backend (SetVMBackend; emuvm.DinD is the real one) a machine with no image is
// backed by a real VM started by its first start (500 if that fails): exec runs in it for real
// (background execs detached), files are written and read in it, its published ports are
// forwarded over TCP to the VM's guest ports while it runs, and its delete removes the VM.
//
// The HTTP plumbing (routes and counts, faults, the VMs by machine name) is internal/emuapi's, as
// every cloud emulator's; smolvm's API has no authentication, so every request is let through.
//
// It misbehaves on demand: SetCreateFault (a create answered after the client gave up while the
// machine exists, one that hangs, one refused with a status such as 429 or 503, one whose answer
// is lost), SetKillFault (deletes failing N times) and SetPortTaken (starts finding a published
// port taken).
package smolvmemu

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"path"
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

// CreateFault makes POST /api/v1/machines misbehave (see emufault.Create).
type CreateFault = emufault.Create

// VMBackend starts the VMs behind machines with no image (see emuvm.Backend).
type VMBackend = emuvm.Backend

// Command is an exec run in a machine.
type Command struct {
	Machine    string
	Argv       []string
	Background bool
}

// Machine is what the emulator holds of one machine.
type Machine struct {
	Name       string
	State      string // created, running, stopped
	Image      string
	Entrypoint []string
	Cmd        []string
	Env        map[string]string
	Ports      [][2]int // host, guest
	Starts     int      // how many times it was started
	Exited     bool     // its workload ended (a machine from an image)
	ExitCode   int
}

// Server is the emulator. Its methods are safe for concurrent use. The embedded emuapi.Base
// gives it URL, Calls, SetCreateFault, SetKillFault and Kills (the delete calls); it is a
// lifecycletest.Emulator.
type Server struct {
	*emuapi.Base // URL, Calls, SetCreateFault, SetKillFault, VMErrors; the VMs by machine name

	// WorkloadDelay is how long after a start a machine's workload comes up (the gap both traps
	// live in); ExitAfter how long a workload whose command exits runs. Set them before the
	// first create.
	WorkloadDelay, ExitAfter time.Duration
	// UploadLag is how much longer than execs uploads and downloads stay in the gap: smolvm's
	// docs measured the lost upload as timing dependent, and an exec (run in a container of its
	// own) can answer before the workload's container is up. Default 0.
	UploadLag time.Duration

	mu       sync.Mutex
	backend  VMBackend
	machines map[string]*machine
	made     []string
	taken    int // starts to come that find a published port taken
	commands []Command
}

type machine struct {
	Machine
	created time.Time
	upAt    time.Time // when the workload (or guest agent) comes up after the last start
	exitAt  time.Time // zero: the workload does not exit
	files   map[string][]byte
	ports   []net.Listener
}

// Start runs an emulator on a loopback TCP port until Close.
func Start() *Server {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(fmt.Sprintf("smolvmemu: listen: %v", err))
	}
	return StartOn(l)
}

// StartOn runs an emulator on l (a Unix socket's listener, say) until Close.
func StartOn(l net.Listener) *Server {
	s := &Server{
		// smolvm's local API has no authentication: every request is let through.
		Base:          emuapi.New(func(*http.Request) bool { return true }, nil),
		WorkloadDelay: 50 * time.Millisecond, ExitAfter: 50 * time.Millisecond,
		machines: map[string]*machine{},
	}
	s.Open("GET /health", func(w http.ResponseWriter, _ *http.Request) {
		emuapi.WriteJSON(w, http.StatusOK, map[string]any{"status": "ok", "version": "smolvmemu"})
	})
	s.Handle("POST /api/v1/machines", "create", s.create)
	s.Handle("GET /api/v1/machines", "list", s.list)
	s.Handle("GET /api/v1/machines/{name}", "get", s.get)
	s.Handle("DELETE /api/v1/machines/{name}", "delete", s.delete)
	s.SetKillOps("delete")
	s.Handle("POST /api/v1/machines/{name}/start", "start", s.start)
	s.Handle("POST /api/v1/machines/{name}/stop", "stop", s.stop)
	s.Handle("POST /api/v1/machines/{name}/exec", "exec", s.exec)
	s.Handle("PUT /api/v1/machines/{name}/files/{path...}", "upload", s.upload)
	s.Handle("GET /api/v1/machines/{name}/files/{path...}", "download", s.download)
	s.ServeOn(l)
	return s
}

// Close releases requests held by faults, deletes every machine (their VMs removed) and stops
// the server.
func (s *Server) Close() {
	s.Base.Close(func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, m := range s.machines {
			s.halt(m)
		}
		s.machines = map[string]*machine{}
	})
}

// SetVMBackend backs every machine with no image started from now on with a VM of b.
func (s *Server) SetVMBackend(b VMBackend) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.backend = b
}

// SetPortTaken makes the next times starts of a machine that publishes ports find one taken by
// another process (409 PORT_IN_USE), as a port picked free can be taken before the start binds it.
func (s *Server) SetPortTaken(times int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.taken = times
}

// Running returns the names of the machines that exist (made and not deleted: a machine
// persists, running or not, until deleted), sorted.
func (s *Server) Running() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Sorted(maps.Keys(s.machines))
}

// Made returns the names of every machine created so far, in order.
func (s *Server) Made() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.made)
}

// Machine returns what the emulator holds of machine name.
func (s *Server) Machine(name string) (Machine, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.machines[name]
	if !ok {
		return Machine{}, false
	}
	s.settle(m)
	out := m.Machine
	out.Env, out.Ports = maps.Clone(m.Env), slices.Clone(m.Ports)
	return out, true
}

// Commands returns the execs run so far, in order.
func (s *Server) Commands() []Command {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.commands)
}

// Expire ends machine name's workload as if it finished on its own (killed, status 137); a
// machine with no image stops.
func (s *Server) Expire(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	m, ok := s.machines[name]
	if !ok {
		return
	}
	if m.Image == "" {
		s.halt(m)
		m.State = "stopped"
		return
	}
	s.exit(m, 137)
}

// apiError writes smolvm's ApiErrorResponse.
func apiError(w http.ResponseWriter, status int, code, msg string) {
	emuapi.WriteJSON(w, status, map[string]string{"error": msg, "code": code})
}

// decode reads a JSON body into v, refusing unknown fields with 422 as smolvm's axum server does.
func decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		http.Error(w, "Failed to deserialize the JSON body into the target type: "+err.Error(), http.StatusUnprocessableEntity)
		return false
	}
	return true
}

type portSpec struct {
	Host  int `json:"host"`
	Guest int `json:"guest"`
}

type envVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// createRequest is CreateMachineRequest, the fields agentenv may send and a few it does not.
type createRequest struct {
	Name         *string    `json:"name"`
	CPUs         *int       `json:"cpus"`
	MemoryMB     *int       `json:"memoryMb"`
	Mounts       []any      `json:"mounts"`
	Ports        []portSpec `json:"ports"`
	Network      bool       `json:"network"`
	GPU          bool       `json:"gpu"`
	Entrypoint   []string   `json:"entrypoint"`
	Cmd          []string   `json:"cmd"`
	DockerSocket bool       `json:"dockerSocket"`
	StorageGB    *int       `json:"storageGb"`
	OverlayGB    *int       `json:"overlayGb"`
	Restart      *struct {
		Policy     string `json:"policy"`
		MaxRetries *int   `json:"maxRetries"`
	} `json:"restart"`
	Image   *string  `json:"image"`
	Env     []envVar `json:"env"`
	Workdir *string  `json:"workdir"`
}

// machineName is smolvm's validate_vm_name.
var machineName = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9_]|-[A-Za-z0-9_])*$`)

func (s *Server) create(w http.ResponseWriter, r *http.Request) {
	var req createRequest
	if !decode(w, r, &req) {
		return
	}
	image := ""
	if req.Image != nil {
		image = *req.Image
	}
	if image == "" && (len(req.Cmd) > 0 || len(req.Entrypoint) > 0) {
		apiError(w, http.StatusBadRequest, "BAD_REQUEST", "cmd/entrypoint require an image, from, or registryRef; an imageless machine has no workload to launch them in (use exec instead)")
		return
	}
	if req.Name == nil || len(*req.Name) > 128 || !machineName.MatchString(*req.Name) {
		apiError(w, http.StatusBadRequest, "BAD_REQUEST", "machine name is missing or invalid (this emulator does not generate names)")
		return
	}
	for _, p := range req.Ports {
		if p.Host < 1 || p.Host > 65535 || p.Guest < 1 || p.Guest > 65535 {
			apiError(w, http.StatusBadRequest, "BAD_REQUEST", fmt.Sprintf("invalid port mapping %d:%d", p.Host, p.Guest))
			return
		}
	}
	name := *req.Name
	s.mu.Lock()
	_, taken := s.machines[name]
	f := s.TakeCreate()
	s.mu.Unlock()
	switch {
	case taken:
		apiError(w, http.StatusConflict, "CONFLICT", fmt.Sprintf("machine '%s' already exists", name))
		return
	case f != nil && f.Status != 0:
		apiError(w, f.Status, strings.ToUpper(strings.ReplaceAll(http.StatusText(f.Status), " ", "_")), f.Message)
		return
	}
	if !f.Hold(s.Closed()) {
		return
	}
	m := &machine{Machine: Machine{Name: name, State: "created", Image: image, Entrypoint: req.Entrypoint, Cmd: req.Cmd, Env: map[string]string{}},
		created: time.Now(), files: map[string][]byte{}}
	for _, e := range req.Env {
		m.Env[e.Name] = e.Value
	}
	for _, p := range req.Ports {
		m.Ports = append(m.Ports, [2]int{p.Host, p.Guest})
	}
	s.mu.Lock()
	if _, ok := s.machines[name]; ok {
		s.mu.Unlock()
		apiError(w, http.StatusConflict, "CONFLICT", fmt.Sprintf("machine '%s' already exists", name))
		return
	}
	s.machines[name] = m
	s.made = append(s.made, name)
	info := s.info(m)
	s.mu.Unlock()
	if f != nil && f.Lost {
		emufault.DropAnswer(w)
		return
	}
	f.Linger(s.Closed())
	emuapi.WriteJSON(w, http.StatusOK, info)
}

// info is MachineInfo. Call with s.mu held.
func (s *Server) info(m *machine) map[string]any {
	s.settle(m)
	ports := []portSpec{}
	for _, p := range m.Ports {
		ports = append(ports, portSpec{Host: p[0], Guest: p[1]})
	}
	return map[string]any{
		"name": m.Name, "state": m.State, "cpus": 4, "memoryMb": 8192, "mounts": []any{}, "ports": ports,
		"network": true, "gpu": false, "cuda": false, "forkable": false, "forkpointHeld": false,
		"createdAt": m.created.Unix(),
	}
}

// settle brings m's workload up to now: it ends once its exit time passed. Call with s.mu held.
func (s *Server) settle(m *machine) {
	if m.State == "running" && !m.Exited && !m.exitAt.IsZero() && time.Now().After(m.exitAt) {
		code, _ := exitCode(m.Cmd)
		s.exit(m, code)
	}
}

// exit ends m's workload with code: its ports close and, for the one wrapper shape the package
// doc names, its status file is written. Call with s.mu held.
func (s *Server) exit(m *machine, code int) {
	if m.Exited || m.State != "running" {
		return
	}
	m.Exited, m.ExitCode = true, code
	s.closePorts(m)
	if file := statusFile(m.Entrypoint); file != "" {
		m.files[file] = []byte(strconv.Itoa(code) + "\n")
	}
}

// exitScript is a command `/bin/sh -c "exit N"`.
var exitScript = regexp.MustCompile(`^exit (-?\d+)$`)

// exitCode returns N for a command ending in `sh -c "exit N"`.
func exitCode(argv []string) (int, bool) {
	if len(argv) < 3 || !strings.HasSuffix(argv[len(argv)-3], "sh") || argv[len(argv)-2] != "-c" {
		return 0, false
	}
	m := exitScript.FindStringSubmatch(strings.TrimSpace(argv[len(argv)-1]))
	if m == nil {
		return 0, false
	}
	n, _ := strconv.Atoi(m[1])
	return n, true
}

// recordsStatus matches the wrapper shape whose status file the emulator writes.
var recordsStatus = regexp.MustCompile(`echo \$code >(/[^ ;&]+)\.new && mv (/[^ ;&]+)\.new (/[^ ;&]+)`)

// statusFile returns the file a `/bin/sh -c` entrypoint records its command's status in, "" if
// it is not of that shape.
func statusFile(entrypoint []string) string {
	if len(entrypoint) < 3 || entrypoint[0] != "/bin/sh" || entrypoint[1] != "-c" {
		return ""
	}
	m := recordsStatus.FindStringSubmatch(entrypoint[2])
	if m == nil || m[1] != m[2] || m[2] != m[3] {
		return ""
	}
	return m[3]
}

func (s *Server) list(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	out := []map[string]any{}
	for _, name := range slices.Sorted(maps.Keys(s.machines)) {
		out = append(out, s.info(s.machines[name]))
	}
	s.mu.Unlock()
	emuapi.WriteJSON(w, http.StatusOK, map[string]any{"machines": out})
}

// lookup returns machine name, or answers 404 as smolvm does. Call without s.mu.
func (s *Server) lookup(w http.ResponseWriter, name string) (*machine, bool) {
	s.mu.Lock()
	m, ok := s.machines[name]
	s.mu.Unlock()
	if !ok {
		apiError(w, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("machine '%s' not found", name))
	}
	return m, ok
}

func (s *Server) get(w http.ResponseWriter, r *http.Request) {
	m, ok := s.lookup(w, r.PathValue("name"))
	if !ok {
		return
	}
	s.mu.Lock()
	info := s.info(m)
	s.mu.Unlock()
	emuapi.WriteJSON(w, http.StatusOK, info)
}

func (s *Server) delete(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	if code := s.TakeKill(); code != 0 {
		apiError(w, code, "INTERNAL_ERROR", fmt.Sprintf("machine '%s' process is still alive after shutdown; not removing", name))
		return
	}
	s.mu.Lock()
	m, ok := s.machines[name]
	if ok {
		s.halt(m)
		delete(s.machines, name)
	}
	s.mu.Unlock()
	if !ok {
		apiError(w, http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("machine '%s' not found", name))
		return
	}
	s.RemoveVM(name)
	emuapi.WriteJSON(w, http.StatusOK, map[string]string{"deleted": name})
}

// halt stops m's workload and closes its ports. Call with s.mu held.
func (s *Server) halt(m *machine) {
	s.closePorts(m)
	if m.State == "running" {
		m.State = "stopped"
	}
}

// closePorts closes m's published ports. Call with s.mu held.
func (s *Server) closePorts(m *machine) {
	for _, l := range m.ports {
		l.Close()
	}
	m.ports = nil
}

func (s *Server) start(w http.ResponseWriter, r *http.Request) {
	m, ok := s.started(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	info := s.info(m)
	s.mu.Unlock()
	emuapi.WriteJSON(w, http.StatusOK, info)
}

func (s *Server) stop(w http.ResponseWriter, r *http.Request) {
	m, ok := s.lookup(w, r.PathValue("name"))
	if !ok {
		return
	}
	s.mu.Lock()
	s.halt(m)
	info := s.info(m)
	s.mu.Unlock()
	emuapi.WriteJSON(w, http.StatusOK, info)
}

// started returns the machine r names, started unless it ran (as smolvm's ensure_running does
// before an exec or a file), or answers the error as smolvm does.
func (s *Server) started(w http.ResponseWriter, r *http.Request) (*machine, bool) {
	m, ok := s.lookup(w, r.PathValue("name"))
	if !ok {
		return nil, false
	}
	if status, code, msg := s.ensureRunning(r, m); status != 0 {
		apiError(w, status, code, msg)
		return nil, false
	}
	return m, true
}

// ensureRunning starts m unless it runs, as smolvm's start (and its exec and files routes) do:
// its VM (with a backend and no image) on its first start, then its published ports. It
// returns the error answer's status, code and message, or 0.
func (s *Server) ensureRunning(r *http.Request, m *machine) (int, string, string) {
	s.mu.Lock()
	if m.State == "running" {
		s.mu.Unlock()
		return 0, "", ""
	}
	backend := s.backend
	s.mu.Unlock()
	if _, has := s.VM(m.Name); backend != nil && m.Image == "" && !has {
		v, err := s.StartVM(r, backend, "smolemu-"+m.Name, map[string]string{agentenv.LabelRecord: m.Name})
		if err != nil {
			return http.StatusInternalServerError, "INTERNAL_ERROR", "failed to start machine: " + err.Error()
		}
		s.SetVM(m.Name, v)
		s.mu.Lock()
		gone := s.machines[m.Name] != m
		s.mu.Unlock()
		if gone { // deleted while its VM started
			s.RemoveVM(m.Name)
			return http.StatusNotFound, "NOT_FOUND", fmt.Sprintf("machine '%s' not found", m.Name)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if m.State == "running" {
		return 0, "", ""
	}
	var ls []net.Listener
	for i, p := range m.Ports {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p[0])))
		if err == nil && i == 0 && s.taken > 0 {
			s.taken--
			l.Close()
			err = fmt.Errorf("taken")
		}
		if err != nil {
			for _, l := range ls {
				l.Close()
			}
			return http.StatusConflict, "PORT_IN_USE", fmt.Sprintf("virtio-net: bind 0.0.0.0:%d: address already in use", p[0])
		}
		ls = append(ls, l)
		go s.serve(m, l, p[1])
	}
	m.ports, m.State, m.Starts = ls, "running", m.Starts+1
	m.upAt = time.Now().Add(s.WorkloadDelay)
	m.Exited, m.exitAt = false, time.Time{}
	if _, exits := exitCode(m.Cmd); exits && m.Image != "" {
		m.exitAt = m.upAt.Add(s.ExitAfter)
	}
	return 0, "", ""
}

// serve answers connections to a published port of m: forwarded to guest on its VM, else (a
// machine in memory) HTTP 200 "ok".
func (s *Server) serve(m *machine, l net.Listener, guest int) {
	vm, ok := s.VM(m.Name)
	if !ok {
		srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("ok")) }),
			ReadHeaderTimeout: 10 * time.Second}
		srv.Serve(l)
		return
	}
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go forward(c, vm.Addr(guest))
	}
}

// forward copies between c and a connection to addr until either side closes.
func forward(c net.Conn, addr string) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// up reports whether m's workload (or guest agent) answers now. Call with s.mu held.
func (s *Server) up(m *machine) bool {
	s.settle(m)
	return m.State == "running" && !time.Now().Before(m.upAt)
}

// filesUp reports whether m's files route reaches its workload now. Call with s.mu held.
func (s *Server) filesUp(m *machine) bool {
	return s.up(m) && !time.Now().Before(m.upAt.Add(s.UploadLag))
}

// execRequest is ExecRequest (deny_unknown_fields).
type execRequest struct {
	Command     []string `json:"command"`
	Env         []envVar `json:"env"`
	Secrets     any      `json:"secrets"`
	Workdir     *string  `json:"workdir"`
	TimeoutSecs *int64   `json:"timeoutSecs"`
	Stdin       *string  `json:"stdin"`
	Background  bool     `json:"background"`
}

func (s *Server) exec(w http.ResponseWriter, r *http.Request) {
	var req execRequest
	if !decode(w, r, &req) {
		return
	}
	if len(req.Command) == 0 {
		apiError(w, http.StatusBadRequest, "BAD_REQUEST", "command cannot be empty")
		return
	}
	m, ok := s.started(w, r)
	if !ok {
		return
	}
	s.mu.Lock()
	s.commands = append(s.commands, Command{Machine: m.Name, Argv: slices.Clone(req.Command), Background: req.Background})
	up := s.up(m)
	s.mu.Unlock()
	vm, _ := s.VM(m.Name)
	answer := func(code int, stdout, stderr []byte) {
		emuapi.WriteJSON(w, http.StatusOK, map[string]any{"exitCode": code, "stdout": string(stdout), "stderr": string(stderr),
			"stdoutB64": stdout, "stderrB64": stderr})
	}
	if !up {
		answer(1, nil, nil) // an exec in the gap before the workload is up: exit 1, no output
		return
	}
	if vm == nil {
		code := 0
		switch n, isExit := exitCode(req.Command); {
		case isExit:
			code = n
		case req.Command[0] == "false":
			code = 1
		}
		if req.Background {
			answer(0, []byte("pid=4242\n"), nil)
			return
		}
		answer(code, nil, nil)
		return
	}
	script := commandScript(req)
	if req.Background {
		res, err := vm.Run(r.Context(), "("+script+") </dev/null >/dev/null 2>&1 & echo pid=$!", nil)
		if err != nil {
			apiError(w, http.StatusInternalServerError, "INTERNAL_ERROR", "exec failed: "+err.Error())
			return
		}
		answer(0, res.Stdout, nil)
		return
	}
	var stdin io.Reader
	if req.Stdin != nil {
		stdin = strings.NewReader(*req.Stdin)
	}
	ctx := r.Context()
	if req.TimeoutSecs != nil && *req.TimeoutSecs > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, time.Duration(*req.TimeoutSecs)*time.Second)
		defer cancel()
	}
	res, err := vm.Run(ctx, script, stdin)
	if err != nil {
		apiError(w, http.StatusInternalServerError, "INTERNAL_ERROR", "exec failed: "+err.Error())
		return
	}
	answer(res.ExitCode, res.Stdout, res.Stderr)
}

// commandScript is req's command as a shell script, with its environment and working directory.
func commandScript(req execRequest) string {
	var b strings.Builder
	for _, e := range req.Env {
		b.WriteString("export " + shellquote.Join([]string{e.Name + "=" + e.Value}) + "; ")
	}
	if req.Workdir != nil && *req.Workdir != "" {
		b.WriteString("cd " + shellquote.Join([]string{*req.Workdir}) + " && ")
	}
	b.WriteString("exec " + shellquote.Join(req.Command))
	return b.String()
}

// guestPath is the absolute path a files route names.
func guestPath(r *http.Request) string { return path.Clean("/" + r.PathValue("path")) }

func (s *Server) upload(w http.ResponseWriter, r *http.Request) {
	m, ok := s.started(w, r)
	if !ok {
		return
	}
	p := guestPath(r)
	s.mu.Lock()
	up := s.filesUp(m)
	s.mu.Unlock()
	vm, _ := s.VM(m.Name)
	var n int64
	var err error
	switch {
	case !up:
		// Before the workload is up the file lands in the agent's namespace and is lost to it.
		n, err = io.Copy(io.Discard, r.Body)
	case vm != nil:
		cr := &counter{r: r.Body}
		dir := path.Dir(p)
		var res agentenv.ExecResult
		res, err = vm.Run(r.Context(), "mkdir -p "+shellquote.Join([]string{dir})+" && cat >"+shellquote.Join([]string{p}), cr)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("%s", strings.TrimSpace(string(res.Stderr)))
		}
		n = cr.n
	default:
		var b []byte
		b, err = io.ReadAll(io.LimitReader(r.Body, 64<<20))
		n = int64(len(b))
		if err == nil {
			s.mu.Lock()
			m.files[p] = b
			s.mu.Unlock()
		}
	}
	if err != nil {
		apiError(w, http.StatusInternalServerError, "INTERNAL_ERROR", fmt.Sprintf("failed to write %s: %v", p, err))
		return
	}
	emuapi.WriteJSON(w, http.StatusOK, map[string]any{"path": p, "size": n})
}

// counter counts what it reads.
type counter struct {
	r io.Reader
	n int64
}

func (c *counter) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	c.n += int64(n)
	return n, err
}

func (s *Server) download(w http.ResponseWriter, r *http.Request) {
	m, ok := s.started(w, r)
	if !ok {
		return
	}
	p := guestPath(r)
	s.mu.Lock()
	up := s.filesUp(m)
	data, have := m.files[p]
	s.mu.Unlock()
	vm, _ := s.VM(m.Name)
	missing := func() {
		apiError(w, http.StatusInternalServerError, "INTERNAL_ERROR", fmt.Sprintf("failed to read %s in the workload container: No such file or directory (os error 2)", p))
	}
	switch {
	case !up:
		apiError(w, http.StatusInternalServerError, "INTERNAL_ERROR", fmt.Sprintf("failed to canonicalize target %s: No such file or directory (os error 2)", p))
	case vm != nil:
		res, err := vm.Run(r.Context(), "cat "+shellquote.Join([]string{p}), nil)
		switch {
		case err != nil:
			apiError(w, http.StatusInternalServerError, "INTERNAL_ERROR", fmt.Sprintf("failed to read %s: %v", p, err))
		case res.ExitCode != 0:
			missing()
		default:
			w.Header().Set("Content-Type", "application/octet-stream")
			io.Copy(w, bytes.NewReader(res.Stdout))
		}
	case !have:
		missing()
	default:
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(data)
	}
}
