// Package emuvmtest is a recording emuvm.Machine for the unit tests of the cloud emulators'
// VM mode (provider/*/…emu): it runs nothing, keeps every script it is given with its stdin,
// answers a container start as internal/vmdocker's script prints it, and serves every port of
// the VM with one HTTP server of the test's. It stands in for a DinD VM (package emuvm), which
// the integration tests use.
package emuvmtest

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"sync"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/emuvm"
)

// StartedContainer is what vmdocker's start script prints for a container whose port 8080 is
// published on the VM's port 32768, running.
const StartedContainer = "cid\nport 8080 0.0.0.0:32768\nstate true 0\n"

// Run is one script a Recorder was given, with what its stdin held.
type Run struct {
	Script string
	Stdin  string
}

// Recorder is a VM that records. Its zero value is not usable: set Ports. It is also the
// emuvm.Backend that starts it for every sandbox. Its methods are safe for concurrent use.
type Recorder struct {
	// Ports serves every port of the VM.
	Ports *httptest.Server
	// Answer, if set, answers a script; by default a script containing "docker start" is
	// answered StartedContainer and any other exit 0 with no output.
	Answer func(script string) agentenv.ExecResult

	mu      sync.Mutex
	runs    []Run
	removed bool
}

var _ emuvm.Machine = (*Recorder)(nil)

// Run records script and all of stdin, and answers as Answer says.
func (r *Recorder) Run(_ context.Context, script string, stdin io.Reader) (agentenv.ExecResult, error) {
	in := ""
	if stdin != nil {
		b, _ := io.ReadAll(stdin)
		in = string(b)
	}
	r.mu.Lock()
	r.runs = append(r.runs, Run{Script: script, Stdin: in})
	answer := r.Answer
	r.mu.Unlock()
	if answer != nil {
		return answer(script), nil
	}
	if strings.Contains(script, "docker start") {
		return agentenv.ExecResult{Stdout: []byte(StartedContainer)}, nil
	}
	return agentenv.ExecResult{}, nil
}

// Addr is the address of Ports, whatever the port.
func (r *Recorder) Addr(int) string { return r.Ports.Listener.Addr().String() }

// Remove records the VM's removal.
func (r *Recorder) Remove(context.Context) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed = true
	return nil
}

// StartVM implements emuvm.Backend: every sandbox's VM is r.
func (r *Recorder) StartVM(context.Context, string, map[string]string) (emuvm.Machine, error) {
	return r, nil
}

// Ran returns the first script given that contains s, with its stdin.
func (r *Recorder) Ran(s string) (Run, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, run := range r.runs {
		if strings.Contains(run.Script, s) {
			return run, true
		}
	}
	return Run{}, false
}

// Removed reports whether the VM was removed.
func (r *Recorder) Removed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.removed
}
