package e2bemu

import (
	"maps"
	"net/http"

	"github.com/agentenv/agentenv/internal/emuapi"
	"github.com/agentenv/agentenv/internal/emuvm"
)

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

// vmName is the name of the VM behind sandbox id.
func vmName(id string) string { return "e2bemu-" + id }

// startVM starts the VM of sb, which create has recorded as running (E2B finishes a create
// whether or not its client waits). If sb was killed meanwhile the VM is removed at once.
func (s *Server) startVM(r *http.Request, sb *sandbox, b VMBackend) error {
	vm, err := s.StartVM(r, b, vmName(sb.ID), maps.Clone(sb.Metadata))
	s.mu.Lock()
	if err != nil {
		if sb.Running {
			sb.Running, sb.ExitCode = false, -1
		}
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

// ended is called, with s.mu held, when sb stops running: its VM is removed in the background
// (Close waits for it).
func (s *Server) ended(sb *sandbox) { s.RemoveVMLater(sb.ID) }

// proxy reverse-proxies a request for port of sandbox id to its VM, streaming (no buffering),
// with the /sandbox/ID/PORT prefix stripped; a closed port is E2B's 502.
func (s *Server) proxy(w http.ResponseWriter, r *http.Request, vm VM, port int) {
	emuapi.Proxy(w, r, vm, port, func(w http.ResponseWriter, msg string) {
		writeJSON(w, http.StatusBadGateway, map[string]any{"code": http.StatusBadGateway, "message": msg})
	})
}

// runInVM runs an envd process in vm and streams its result as envd would: the output, then
// its end. The output is sent when the process ends, not as it comes. A process outlives the
// request (closing the stream does not stop it on E2B either).
func (s *Server) runInVM(r *http.Request, id string, vm VM, script string, fail func(string), end func(int, string, string)) {
	ctx, cancel := emuapi.WhileAlive(r.Context(), nil, func() bool { // the process ends with the sandbox
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.alive(s.sandboxes[id])
	})
	defer cancel()
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
