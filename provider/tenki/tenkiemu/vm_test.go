package tenkiemu_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/internal/emuvm/emuvmtest"
	"github.com/agentenv/agentenv/provider/tenki"
	"github.com/agentenv/agentenv/provider/tenki/tenkiemu"
)

const key = "tk_emu_test"

// TestVMModeThroughRun drives VM mode through the emulator's Run stream into a recording VM:
// CreateVM waits for the VM's engine as root, RunInVM uploads the container's files through
// Run's stdin and exposes the published VM port as a preview URL that reaches the VM's port,
// ExecInVM streams stdin into `docker exec -i`, and Terminate removes the VM.
func TestVMModeThroughRun(t *testing.T) {
	port := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("from the vm " + r.URL.Path)) }))
	defer port.Close()
	emu := tenkiemu.Start(key)
	defer emu.Close()
	fv := &emuvmtest.Recorder{Ports: port}
	emu.SetVMBackend(fv, "ws/docker:1")
	p, err := tenki.New(tenki.Config{Token: key, APIURL: emu.URL(), VMImage: "ws/docker:1", Config: cloudapi.Config{Rate: 1000}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	vm, err := p.CreateVM(t.Context(), agentenv.SandboxSpec{Name: "vm-a", Labels: map[string]string{agentenv.LabelRecord: "vm-a"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := fv.Ran("docker info"); !ok {
		t.Error("CreateVM did not check the VM's Docker engine")
	}
	sb, err := p.RunInVM(t.Context(), vm.ID, agentenv.SandboxSpec{Name: "gateway", Image: "img", Ports: []int{8080},
		Files: map[string][]byte{"/etc/x": []byte("x")}})
	if err != nil {
		t.Fatal(err)
	}
	if r, ok := fv.Ran("agentenv-files-"); !ok || r.Stdin == "" || !strings.Contains(r.Script, "cat >") {
		t.Errorf("files upload %+v (%v), want the archive written through Run's stdin", r, ok)
	}
	got, _ := emu.Session(vm.ID)
	if len(got.Ports) != 1 || got.Ports[0] != 32768 || !got.Inbound || got.Metadata["agentenv.tenki.mode"] != "vm" {
		t.Errorf("session %+v, want VM port 32768 exposed, inbound, mode vm", got)
	}
	resp, err := http.Get(sb.Endpoints["8080"] + "/card")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "from the vm /card" {
		t.Errorf("GET through the preview URL = %s %q, want the VM's answer", resp.Status, body)
	}
	if _, err := p.ExecInVM(t.Context(), vm.ID, "gateway", []string{"cat"}, nil, []byte("stdin data")); err != nil {
		t.Errorf("ExecInVM with stdin = %v", err)
	}
	if r, ok := fv.Ran("/dev/stdin"); !ok || r.Stdin != "stdin data" || !strings.Contains(r.Script, "exec") {
		t.Errorf("exec %+v (%v), want stdin streamed to docker exec -i", r, ok)
	}
	for _, c := range emu.Commands() {
		if !c.Privileged {
			t.Errorf("command %v ran as the sandbox user, want root (the VM's shell)", c.Argv)
		}
	}
	if err := p.Terminate(t.Context(), vm.ID); err != nil {
		t.Fatal(err)
	}
	if !fv.Removed() {
		t.Error("the VM was not removed with its session")
	}
	resp, err = http.Get(sb.Endpoints["8080"] + "/card")
	if err == nil {
		resp.Body.Close()
	}
	if err != nil || resp.StatusCode != http.StatusBadGateway {
		t.Errorf("GET the preview URL of an ended session = %v, %v; want 502", resp, err)
	}
}
