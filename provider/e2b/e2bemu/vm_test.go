package e2bemu_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/provider/e2b"
	"github.com/agentenv/agentenv/provider/e2b/e2bemu"
)

const key = "e2b_test_key"

// fakeVM runs nothing: it records scripts, answers them with a canned result, and serves every
// port with one HTTP server.
type fakeVM struct {
	srv *httptest.Server

	mu      sync.Mutex
	scripts []string
	removed bool
}

func (v *fakeVM) Run(_ context.Context, script string, _ io.Reader) (agentenv.ExecResult, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.scripts = append(v.scripts, script)
	if strings.Contains(script, "no-such-image") {
		return agentenv.ExecResult{ExitCode: 97}, nil
	}
	return agentenv.ExecResult{Stdout: []byte("cid\nport 8080 0.0.0.0:32768\n")}, nil
}

func (v *fakeVM) Addr(int) string { return v.srv.Listener.Addr().String() }

func (v *fakeVM) Remove(context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.removed = true
	return nil
}

type fakeBackend struct {
	fail   error
	mu     sync.Mutex
	vms    []*fakeVM
	labels []map[string]string
	srv    *httptest.Server
}

func (b *fakeBackend) StartVM(_ context.Context, _ string, labels map[string]string) (e2bemu.VM, error) {
	if b.fail != nil {
		return nil, b.fail
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	vm := &fakeVM{srv: b.srv}
	b.vms = append(b.vms, vm)
	b.labels = append(b.labels, labels)
	return vm, nil
}

func TestVMBackend(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "vm says "+r.URL.Path)
	}))
	defer srv.Close()
	emu := e2bemu.Start(key)
	defer emu.Close()
	b := &fakeBackend{srv: srv}
	emu.SetVMBackend(b)
	p, err := e2b.New(e2b.Config{APIKey: key, APIURL: emu.URL(), SandboxURL: emu.SandboxURL, Config: cloudapi.Config{Rate: 1000}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	labels := map[string]string{agentenv.LabelRecord: "vm-1", agentenv.LabelDeployment: "dep-1"}
	vm, err := p.CreateVM(t.Context(), agentenv.SandboxSpec{Name: "vm-1", Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	if len(b.vms) != 1 || b.labels[0][agentenv.LabelDeployment] != "dep-1" {
		t.Fatalf("vms %d, labels %v; want one vm with the sandbox's metadata", len(b.vms), b.labels)
	}
	c, err := p.RunInVM(t.Context(), vm.ID, agentenv.SandboxSpec{Name: "srv", Image: "img", Ports: []int{8080}})
	if err != nil {
		t.Fatal(err)
	}
	if want := emu.SandboxURL(vm.ID, 32768); c.Endpoints["8080"] != want {
		t.Errorf("endpoint %q, want the engine-picked vm port %q", c.Endpoints["8080"], want)
	}
	cmds := emu.Commands()
	if len(b.vms[0].scripts) != 1 || len(cmds) != 1 || !strings.Contains(cmds[0].Script, "'docker' 'create'") || !strings.Contains(cmds[0].Script, "'-p' '8080'") {
		t.Errorf("ran %q, recorded %+v; want one docker create publishing 8080 on a port the engine picks", b.vms[0].scripts, cmds)
	}
	_, err = p.RunInVM(t.Context(), vm.ID, agentenv.SandboxSpec{Name: "x", Image: "no-such-image"})
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "image no-such-image is not in the vm") {
		t.Errorf("RunInVM of a missing image = %v, want ErrInvalid naming it", err)
	}

	resp, err := http.Get(emu.SandboxURL(vm.ID, 32768) + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(body) != "vm says /mcp" {
		t.Errorf("proxied GET = %d %q, want the vm's answer for /mcp", resp.StatusCode, body)
	}

	if err := p.Terminate(t.Context(), vm.ID); err != nil {
		t.Fatal(err)
	}
	if !b.vms[0].removed {
		t.Error("kill left the vm")
	}
	resp, err = http.Get(emu.SandboxURL(vm.ID, 32768) + "/mcp")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("GET of a killed sandbox's port = %d, want 502", resp.StatusCode)
	}

	// A create whose VM fails fails, and leaves no sandbox.
	b.fail = errors.New("no engine")
	if _, err := p.CreateVM(t.Context(), agentenv.SandboxSpec{Name: "vm-2", Labels: map[string]string{agentenv.LabelRecord: "vm-2"}}); err == nil {
		t.Error("CreateVM with a failing vm succeeded")
	}
	if left := emu.Running(); len(left) != 0 {
		t.Errorf("running after a failed create: %v", left)
	}
	// A base sandbox has no VM.
	if _, err := p.Create(t.Context(), agentenv.SandboxSpec{Name: "sb-1", Labels: map[string]string{agentenv.LabelRecord: "sb-1"}}); err != nil {
		t.Fatal(err)
	}
	if n := len(b.vms); n != 1 {
		t.Errorf("%d vms, want 1: the base template is not vm-backed", n)
	}
}
