package e2bemu

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv/internal/emuapi"
)

// envdPort is the port of envd, the in-sandbox daemon.
const envdPort = 49983

// mainTag is the tag of a process whose "exit N" ends its sandbox.
const mainTag = "agentenv-main"

var exitScript = regexp.MustCompile(`^exit (-?\d+)$`)

// dockerPort finds the `docker port NAME P/tcp` reads of a recorded script.
var dockerPort = regexp.MustCompile(`docker port \S+ (\d+)/tcp`)

// traffic serves URL()/sandbox/ID/PORT/...: envd's process API on envdPort, 200 "ok" on any
// other port of a running sandbox, and 502 (E2B's proxy's answer) for one that is not running.
func (s *Server) traffic(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	port, _ := strconv.Atoi(r.PathValue("port"))
	s.mu.Lock()
	sb, ok := s.sandboxes[id]
	running := ok && s.alive(sb)
	token := ""
	vm, _ := s.VM(id)
	if ok {
		token = sb.token
	}
	s.mu.Unlock()
	if !running {
		writeJSON(w, http.StatusBadGateway, map[string]any{"sandboxId": id, "message": "The sandbox was not found", "code": http.StatusBadGateway})
		return
	}
	if port != envdPort && vm != nil {
		s.proxy(w, r, vm, port)
		return
	}
	if port != envdPort {
		w.Write([]byte("ok"))
		return
	}
	if token != "" && r.Header.Get("X-Access-Token") != token {
		writeJSON(w, http.StatusUnauthorized, map[string]any{"code": "unauthenticated", "message": "invalid access token"})
		return
	}
	switch {
	case r.Method == http.MethodPost && r.PathValue("rest") == "process.Process/Start":
		s.start(w, r, id, vm)
	case r.Method == http.MethodPost && r.PathValue("rest") == "files":
		s.upload(w, r, id, vm)
	default:
		http.Error(w, "not emulated", http.StatusNotImplemented)
	}
}

// upload serves envd's POST /files?path=P&username=U with the file in multipart field "file":
// written into the sandbox's VM (as root; the username is recorded, not applied), or kept in
// memory for a sandbox without one (Uploads). It answers E2B's [{"path","name","type"}].
func (s *Server) upload(w http.ResponseWriter, r *http.Request, id string, vm VM) {
	name := r.URL.Query().Get("path")
	f, _, err := r.FormFile("file")
	if err != nil || !path.IsAbs(name) {
		writeJSON(w, http.StatusBadRequest, map[string]any{"code": http.StatusBadRequest, "message": "want an absolute path and a multipart field file"})
		return
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]any{"code": http.StatusBadRequest, "message": err.Error()})
		return
	}
	if vm != nil {
		q := "'" + strings.ReplaceAll(name, "'", `'\''`) + "'"
		res, err := vm.Run(r.Context(), "mkdir -p \"$(dirname "+q+")\" && cat >"+q, bytes.NewReader(data))
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
		}
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]any{"code": http.StatusInternalServerError, "message": err.Error()})
			return
		}
	}
	s.Count("upload")
	s.mu.Lock()
	s.uploads = append(s.uploads, Upload{Sandbox: id, Path: name, User: r.URL.Query().Get("username"), Data: data})
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, []map[string]string{{"path": name, "name": path.Base(name), "type": "file"}})
}

// startRequest is envd's process.StartRequest in proto3 JSON.
type startRequest struct {
	Process struct {
		Cmd  string            `json:"cmd"`
		Args []string          `json:"args"`
		Envs map[string]string `json:"envs"`
		Cwd  string            `json:"cwd"`
	} `json:"process"`
	Tag string `json:"tag"`
}

// start serves process.Process/Start as a Connect server stream with the JSON codec.
func (s *Server) start(w http.ResponseWriter, r *http.Request, id string, vm VM) {
	var head [5]byte
	if _, err := io.ReadFull(r.Body, head[:]); err != nil || head[0] != 0 {
		http.Error(w, "want one enveloped message", http.StatusBadRequest)
		return
	}
	msg := make([]byte, min(binary.BigEndian.Uint32(head[1:]), 1<<20))
	var req startRequest
	if _, err := io.ReadFull(r.Body, msg); err != nil || json.Unmarshal(msg, &req) != nil {
		http.Error(w, "bad message", http.StatusBadRequest)
		return
	}
	cmd := Command{Sandbox: id, User: basicUser(r), Tag: req.Tag, Cmd: req.Process.Cmd, Args: req.Process.Args}
	cmd.Script = strings.TrimSpace(strings.Join(append([]string{cmd.Cmd}, cmd.Args...), " "))
	if n := len(cmd.Args); n >= 2 && cmd.Args[n-2] == "-c" {
		cmd.Script = strings.TrimSpace(cmd.Args[n-1])
	}
	s.Count("process")
	s.mu.Lock()
	s.commands = append(s.commands, cmd)
	s.mu.Unlock()

	w.Header().Set("Content-Type", "application/connect+json")
	w.WriteHeader(http.StatusOK)
	send := func(flags byte, v any) {
		b, _ := json.Marshal(v)
		var buf bytes.Buffer
		buf.WriteByte(flags)
		binary.Write(&buf, binary.BigEndian, uint32(len(b)))
		buf.Write(b)
		w.Write(buf.Bytes())
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
	}
	event := func(e map[string]any) { send(0, map[string]any{"event": e}) }
	end := func(code int, stdout, stderr string) {
		if stdout != "" {
			event(map[string]any{"data": map[string]any{"stdout": base64.StdEncoding.EncodeToString([]byte(stdout))}})
		}
		if stderr != "" {
			event(map[string]any{"data": map[string]any{"stderr": base64.StdEncoding.EncodeToString([]byte(stderr))}})
		}
		e := map[string]any{"exited": true, "status": fmt.Sprintf("exit status %d", code)}
		if code != 0 { // proto3 JSON leaves zero values out
			e["exitCode"] = code
		}
		event(map[string]any{"end": e})
		send(0x02, map[string]any{})
	}
	event(map[string]any{"start": map[string]any{"pid": 1000 + len(s.Commands())}})
	if vm != nil {
		fail := func(msg string) {
			event(map[string]any{"end": map[string]any{"exited": false, "status": "error", "error": msg}})
			send(0x02, map[string]any{})
		}
		s.runInVM(r, id, vm, script(req.Process.Cmd, req.Process.Args, req.Process.Envs, req.Process.Cwd), fail, end)
		return
	}

	plain := strings.ReplaceAll(cmd.Script, "'", "") // what the shell runs, near enough
	switch m := exitScript.FindStringSubmatch(plain); {
	case m != nil:
		code, _ := strconv.Atoi(m[1])
		if cmd.Tag == mainTag {
			s.mu.Lock()
			if sb := s.sandboxes[id]; sb.Running {
				sb.Running, sb.ExitCode = false, code
			}
			s.mu.Unlock()
		}
		end(code, "", "")
		return
	case strings.Contains(plain, "docker create"), strings.Contains(plain, "docker run"):
		// A published port is reported on the VM's same port, as if the engine had picked it.
		out := ""
		for _, m := range dockerPort.FindAllStringSubmatch(plain, -1) {
			out += fmt.Sprintf("port %s 0.0.0.0:%s\n", m[1], m[1])
		}
		if out == "" {
			out = emuapi.RandHex(12) + "\n"
		}
		end(0, out, "")
		return
	case strings.Contains(plain, "docker rm"):
		end(0, "", "")
		return
	}
	// A long-running process: the stream stays open until the client leaves or the sandbox ends.
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-r.Context().Done():
			return
		case <-s.Closed():
			return
		case <-t.C:
		}
		s.mu.Lock()
		running := s.alive(s.sandboxes[id])
		s.mu.Unlock()
		if !running {
			end(-1, "", "")
			return
		}
	}
}

// basicUser returns the user of the Basic authorization envd reads ("user" when there is none).
func basicUser(r *http.Request) string {
	auth, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Basic ")
	if !ok {
		return "user"
	}
	b, err := base64.StdEncoding.DecodeString(auth)
	if err != nil {
		return "user"
	}
	user, _, _ := strings.Cut(string(b), ":")
	return user
}

// script is the shell line that runs cmd with args in cwd with envs added, as envd would.
func script(cmd string, args []string, envs map[string]string, cwd string) string {
	var b strings.Builder
	if cwd != "" {
		b.WriteString("cd " + quote(cwd) + " && ")
	}
	b.WriteString("exec")
	if len(envs) > 0 {
		b.WriteString(" env")
		for _, k := range slices.Sorted(maps.Keys(envs)) {
			b.WriteString(" " + quote(k+"="+envs[k]))
		}
	}
	for _, a := range append([]string{cmd}, args...) {
		b.WriteString(" " + quote(a))
	}
	return b.String()
}

// quote quotes a for /bin/sh.
func quote(a string) string { return "'" + strings.ReplaceAll(a, "'", `'\''`) + "'" }
