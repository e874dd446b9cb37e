package tensorlakeemu_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/provider/tensorlake"
	"github.com/agentenv/agentenv/provider/tensorlake/tensorlakeemu"
)

const key = "tl_test_key"

// fakeVM runs nothing: it records scripts and stdins, answers the scripts that start a container as
// RunScript's output would read, and serves every port with one HTTP server. It stands in for
// a DinD VM (internal/emuvm), which the integration tests use.
type fakeVM struct {
	srv *httptest.Server

	mu      sync.Mutex
	scripts []string
	stdins  map[string]string
	removed bool
}

func (v *fakeVM) Run(_ context.Context, script string, stdin io.Reader) (agentenv.ExecResult, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.scripts = append(v.scripts, script)
	if stdin != nil {
		b, _ := io.ReadAll(stdin)
		v.stdins[script] = string(b)
	}
	if strings.Contains(script, "docker start") {
		return agentenv.ExecResult{Stdout: []byte("cid\nport 8080 0.0.0.0:32768\nstate true 0\n")}, nil
	}
	return agentenv.ExecResult{}, nil
}

func (v *fakeVM) Addr(int) string { return v.srv.Listener.Addr().String() }

func (v *fakeVM) Remove(context.Context) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.removed = true
	return nil
}

type fakeBackend struct {
	srv *httptest.Server
	mu  sync.Mutex
	vms []*fakeVM
}

func (b *fakeBackend) StartVM(context.Context, string, map[string]string) (tensorlakeemu.VM, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	vm := &fakeVM{srv: b.srv, stdins: map[string]string{}}
	b.vms = append(b.vms, vm)
	return vm, nil
}

// TestRunInVMExposesThePublishedPort: RunInVM publishes the container's port on a VM port, adds
// that VM port to the sandbox's exposed ports, and the endpoint it returns reaches the VM's port
// through the emulator's proxy; Terminate removes the VM.
func TestRunInVMExposesThePublishedPort(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("from the vm " + r.URL.Path)) }))
	defer srv.Close()
	emu := tensorlakeemu.Start(key)
	defer emu.Close()
	b := &fakeBackend{srv: srv}
	emu.SetVMBackend(b, "agentenv-docker")
	p, err := tensorlake.New(tensorlake.Config{APIKey: key, APIURL: emu.URL(), ProxyURL: emu.ProxyURL, PortURL: emu.PortURL,
		VMImage: "agentenv-docker", Config: cloudapi.Config{Rate: 1000}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	spec := agentenv.SandboxSpec{Name: "vm-a", Labels: map[string]string{agentenv.LabelRecord: "vm-a"}}
	vm, err := p.CreateVM(t.Context(), spec)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.RunInVM(t.Context(), vm.ID, agentenv.SandboxSpec{Name: "gateway", Image: "img", Ports: []int{8080},
		Files: map[string][]byte{"/etc/x": []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	got, _ := emu.Sandbox(vm.ID)
	if len(got.ExposedPorts) != 1 || got.ExposedPorts[0] != 32768 || !got.Public {
		t.Errorf("exposed ports %v (public %v), want the VM port 32768, public", got.ExposedPorts, got.Public)
	}
	if want := emu.PortURL(vm.ID, 32768); sb.Endpoints["8080"] != want {
		t.Errorf("endpoint %q, want %q", sb.Endpoints["8080"], want)
	}
	resp, err := http.Get(sb.Endpoints["8080"] + "/card")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "from the vm /card" {
		t.Errorf("GET through the port = %s %q, want the VM's answer", resp.Status, body)
	}
	if resp, err := http.Get(emu.PortURL(vm.ID, 9999)); err == nil {
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("GET an unexposed port = %s, want 404", resp.Status)
		}
	}
	res, err := p.ExecInVM(t.Context(), vm.ID, "gateway", []string{"cat"}, nil, []byte("stdin data"))
	if err != nil || res.ExitCode != 0 {
		t.Errorf("ExecInVM with stdin = %+v, %v", res, err)
	}
	fv := b.vms[0]
	fv.mu.Lock()
	var sawFiles, sawStdin bool
	for script, in := range fv.stdins {
		sawFiles = sawFiles || (strings.Contains(script, "agentenv-files-") && in != "")
		sawStdin = sawStdin || (strings.Contains(script, "agentenv-stdin-") && in == "stdin data")
	}
	fv.mu.Unlock()
	if !sawFiles || !sawStdin {
		t.Errorf("uploads into the VM: files %v, stdin %v; want both through the files API", sawFiles, sawStdin)
	}
	if err := p.Terminate(t.Context(), vm.ID); err != nil {
		t.Fatal(err)
	}
	fv.mu.Lock()
	removed := fv.removed
	fv.mu.Unlock()
	if !removed {
		t.Errorf("the VM was not removed with its sandbox")
	}
}
