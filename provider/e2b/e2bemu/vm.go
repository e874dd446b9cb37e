package e2bemu

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"time"

	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/emuvm"
)

// vmStartBound bounds the start of a VM the emulator makes on its own behalf.
const vmStartBound = 3 * time.Minute

// VM is the real machine behind a sandbox (see emuvm.Machine).
type VM = emuvm.Machine

// VMBackend starts the VMs behind sandboxes (see emuvm.Backend); labels are the sandbox's.
type VMBackend = emuvm.Backend

// DinD returns a VMBackend whose VMs are h's Docker-in-Docker containers.
func DinD(h *emuvm.Host) VMBackend { return emuvm.DinD(h) }

// SetVMBackend backs every sandbox created from now on from one of templates (default
// "docker", the Docker-capable template) with a VM of b: a create starts the VM and fails with
// 500, creating nothing, if it fails; a kill, a timeout or Close removes it; envd's
// process.Process/Start runs the command in it; and port P of the sandbox is reverse-proxied to
// the VM's port P while the sandbox runs. nil turns it off.
func (s *Server) SetVMBackend(b VMBackend, templates ...string) {
	if len(templates) == 0 {
		templates = []string{"docker"}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.backend = b
	s.vmTemplates = map[string]bool{}
	for _, t := range templates {
		s.vmTemplates[t] = true
		s.templates[t] = true
	}
}

// VM returns the VM behind sandbox id while it has one.
func (s *Server) VM(id string) (VM, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sb, ok := s.sandboxes[id]
	if !ok || sb.vm == nil {
		return nil, false
	}
	return sb.vm, true
}

// DirectAddr returns host:port at which this process reaches port of sandbox id's VM without
// the emulator's HTTP proxy (for protocols other than HTTP, which E2B's port URLs do not
// carry), or "" if id has no VM.
func (s *Server) DirectAddr(id string, port int) string {
	vm, ok := s.VM(id)
	if !ok {
		return ""
	}
	return vm.Addr(port)
}

// vmName is the name of the VM behind sandbox id.
func vmName(id string) string { return "e2bemu-" + id }

// startVM starts the VM of sb, which create has recorded as running, on a detached bounded
// context (E2B finishes a create whether or not its client waits). If sb was killed meanwhile
// the VM is removed at once. It reports whether sb runs on a VM.
func (s *Server) startVM(r *http.Request, sb *sandbox, b VMBackend) error {
	ctx, cancel := cleanup.Detached(r.Context(), vmStartBound)
	defer cancel()
	vm, err := b.StartVM(ctx, vmName(sb.ID), maps.Clone(sb.Metadata))
	s.mu.Lock()
	if err != nil {
		if sb.Running {
			sb.Running, sb.ExitCode = false, -1
		}
		s.mu.Unlock()
		return err
	}
	sb.vm = vm
	running := s.alive(sb)
	s.mu.Unlock()
	if !running {
		s.removeVM(sb)
	}
	return nil
}

// removeVM removes sb's VM, if it has one, and waits for it. Call without s.mu.
func (s *Server) removeVM(sb *sandbox) {
	s.mu.Lock()
	vm := sb.vm
	sb.vm = nil
	s.mu.Unlock()
	if vm == nil {
		return
	}
	s.vms.Remove(sb.ID, vm)
}

// ended is called, with s.mu held, when sb stops running: its VM is removed in the background
// (Close waits for it).
func (s *Server) ended(sb *sandbox) {
	if sb.vm == nil {
		return
	}
	s.vms.Go(func() { s.removeVM(sb) })
}

// VMErrors returns the errors of VM removals so far (a test asserts there are none).
func (s *Server) VMErrors() []error {
	return s.vms.Errors()
}

// proxy reverse-proxies a request for port of sandbox id to its VM, streaming (no buffering),
// with the /sandbox/ID/PORT prefix stripped.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, vm VM, port int) {
	target := &url.URL{Scheme: "http", Host: vm.Addr(port)}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path = "/" + strings.TrimPrefix(pr.In.PathValue("rest"), "/")
			pr.Out.URL.RawPath = ""
			pr.Out.Host = target.Host
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			writeJSON(w, http.StatusBadGateway, map[string]any{"code": http.StatusBadGateway,
				"message": fmt.Sprintf("port %d of the sandbox is not open: %v", port, err)})
		},
	}
	rp.ServeHTTP(w, r)
}

// runInVM runs an envd process in vm and streams its result as envd would: the output, then
// its end. The output is sent when the process ends, not as it comes. A process outlives the
// request (closing the stream does not stop it on E2B either).
func (s *Server) runInVM(r *http.Request, id string, vm VM, script string, fail func(string), end func(int, string, string)) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	go func() { // the process ends with the sandbox
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			s.mu.Lock()
			running := s.alive(s.sandboxes[id])
			s.mu.Unlock()
			if !running {
				cancel()
				return
			}
		}
	}()
	res, err := vm.Run(ctx, script, nil)
	if err != nil {
		if r.Context().Err() != nil {
			return
		}
		fail(err.Error())
		return
	}
	end(res.ExitCode, string(res.Stdout), string(res.Stderr))
}
