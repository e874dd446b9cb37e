package smolvm_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/providertest"
	"github.com/agentenv/agentenv/provider/smolvm"
	"github.com/agentenv/agentenv/provider/smolvm/smolvmemu"
)

// emulator starts the smolvm emulator, failing the test if a machine is left at the end.
func emulator(t *testing.T) *smolvmemu.Server {
	t.Helper()
	return providertest.CloseAtEnd(t, smolvmemu.Start())
}

// newProvider returns a provider pointed at emu; cfg's zero fields get test values.
func newProvider(t *testing.T, emu *smolvmemu.Server, cfg smolvm.Config, logger *slog.Logger) *smolvm.Provider {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = emu.URL()
	}
	if cfg.AgentWait == 0 {
		cfg.AgentWait = 5 * time.Second
	}
	p, err := smolvm.New(cfg, logger)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

var (
	serve    = []string{"python3", "-m", "http.server", "8080"}
	exitCode = []string{"/bin/sh", "-c", "exit 3"}
)

func TestConformance(t *testing.T) {
	emu := emulator(t)
	providertest.Run(t, func(t *testing.T) agentenv.Provider { return newProvider(t, emu, smolvm.Config{}, nil) }, providertest.Options{
		Image: "python:3.12-alpine", Command: serve, Port: 8080, ExitCommand: exitCode, ExitCode: 3, Wait: 5 * time.Second,
	})
}

func spec(id string) agentenv.SandboxSpec {
	return agentenv.SandboxSpec{Name: id, Image: "python:3.12-alpine", Command: serve, Ports: []int{8080},
		Labels: map[string]string{agentenv.LabelRecord: id, agentenv.LabelRun: "r1"}}
}

// post sends body to the emulator as a raw client would and returns the status and answer.
func post(t *testing.T, method, url string, body any) (int, map[string]any) {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		r = bytes.NewReader(j)
	}
	req, _ := http.NewRequestWithContext(t.Context(), method, url, r)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	json.Unmarshal(raw, &out)
	if out == nil {
		out = map[string]any{"raw": string(raw)}
	}
	return resp.StatusCode, out
}

func TestCreateSendsNameImageWrappedCommandEnvAndPorts(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, smolvm.Config{}, nil)
	s := spec("sb-wire")
	s.Env = map[string]string{"GREETING": "hello world", "TOKEN": "s3cret-value"}
	s.WorkDir = "/srv"
	s.Expires = time.Now().Add(time.Hour)
	sb, err := p.Create(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(t.Context(), sb.ID)
	m, ok := emu.Machine("sb-wire")
	if !ok {
		t.Fatal("no machine named by the record id")
	}
	if m.Image != s.Image || !slices.Equal(m.Cmd, serve) || m.Env["TOKEN"] != "s3cret-value" || m.State != "running" || m.Starts != 1 {
		t.Errorf("machine = %+v, want the image, the command as cmd, the env, started once", m)
	}
	if len(m.Entrypoint) != 4 || m.Entrypoint[0] != "/bin/sh" || m.Entrypoint[1] != "-c" || !strings.Contains(m.Entrypoint[2], `"$@"`) {
		t.Errorf("entrypoint = %q, want the /bin/sh -c wrapper running \"$@\"", m.Entrypoint)
	}
	if len(m.Ports) != 1 || m.Ports[0][1] != 8080 || sb.Endpoints["8080"] != net.JoinHostPort("127.0.0.1", strconv.Itoa(m.Ports[0][0])) {
		t.Errorf("ports %v, endpoints %v: want 8080 published on the endpoint's host port", m.Ports, sb.Endpoints)
	}
	// The labels are in the machine, written once it ran a command, and read back by List.
	got, err := p.ReadFile(t.Context(), sb.ID, "/etc/agentenv/labels.json")
	var labels map[string]string
	if err != nil || json.Unmarshal(got, &labels) != nil || labels[agentenv.LabelRecord] != "sb-wire" || labels[agentenv.LabelRun] != "r1" || labels[agentenv.LabelExpires] == "" {
		t.Errorf("labels file = %s, %v; want the record, run and expiry labels", got, err)
	}
	cmds := emu.Commands()
	if len(cmds) == 0 || !slices.Equal(cmds[0].Argv, []string{"true"}) {
		t.Errorf("first exec = %+v, want `true`, the wait for the workload", cmds)
	}
	sbs, err := p.List(t.Context(), map[string]string{agentenv.LabelRun: "r1"})
	if err != nil || len(sbs) != 1 || sbs[0].ID != "sb-wire" {
		t.Errorf("List(run) = %+v, %v; want the machine", sbs, err)
	}
}

// TestAFailingGuestCommandStillAnswers200 plays smolvm's first trap: the exit code is in the
// body of an HTTP 200, and the provider reads it from there.
func TestAFailingGuestCommandStillAnswers200(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, smolvm.Config{}, nil)
	sb, err := p.Create(t.Context(), spec("sb-exit"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(t.Context(), sb.ID)
	code, body := post(t, http.MethodPost, emu.URL()+"/api/v1/machines/sb-exit/exec", map[string]any{"command": exitCode})
	if code != http.StatusOK || body["exitCode"] != 3.0 {
		t.Fatalf("raw exec = %d %v, want 200 with exitCode 3 (the trap)", code, body)
	}
	res, err := p.Exec(t.Context(), sb.ID, exitCode)
	if err != nil || res.ExitCode != 3 {
		t.Errorf("Exec = exit %d, %v; want exit 3 and no error", res.ExitCode, err)
	}
}

// TestAnUploadBeforeTheWorkloadRunsIsLost plays smolvm's second trap: an upload right after
// the start answers 200 and cannot be read; Create waits for a command to run, then writes
// the labels and reads them back.
func TestAnUploadBeforeTheWorkloadRunsIsLost(t *testing.T) {
	emu := emulator(t)
	emu.WorkloadDelay = 400 * time.Millisecond
	base := emu.URL() + "/api/v1/machines"
	if code, body := post(t, http.MethodPost, base, map[string]any{"name": "raw", "image": "alpine", "cmd": []string{"sleep", "infinity"}, "network": true}); code != http.StatusOK || body["state"] != "created" {
		t.Fatalf("create = %d %v, want 200 created", code, body)
	}
	defer post(t, http.MethodDelete, base+"/raw", nil)
	post(t, http.MethodPost, base+"/raw/start", nil)
	code, body := post(t, http.MethodPut, base+"/raw/files/root/r1.txt", []byte("ROUND1"))
	if code != http.StatusOK || body["size"] != 6.0 || body["path"] != "/root/r1.txt" {
		t.Fatalf("upload = %d %v, want 200 with the path and the size (the trap)", code, body)
	}
	if code, body := post(t, http.MethodPost, base+"/raw/exec", map[string]any{"command": []string{"true"}}); code != http.StatusOK || body["exitCode"] != 1.0 {
		t.Errorf("exec in the gap = %d %v, want 200 with exitCode 1", code, body)
	}
	time.Sleep(500 * time.Millisecond)
	if code, body := post(t, http.MethodGet, base+"/raw/files/root/r1.txt", nil); code != http.StatusInternalServerError {
		t.Errorf("download of the lost upload = %d %v, want 500", code, body)
	}

	// Uploads stay lost a while after execs answer: the labels are written again until they
	// read back.
	emu.UploadLag = time.Second
	p := newProvider(t, emu, smolvm.Config{}, nil)
	sb, err := p.Create(t.Context(), spec("sb-late"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(t.Context(), sb.ID)
	if sbs, err := p.List(t.Context(), map[string]string{agentenv.LabelRun: "r1"}); err != nil || len(sbs) != 1 {
		t.Errorf("List(run) = %+v, %v; want the machine, whose labels read back", sbs, err)
	}
	var waited int
	for _, c := range emu.Commands() {
		if c.Machine == "sb-late" && slices.Equal(c.Argv, []string{"true"}) {
			waited++
		}
	}
	if waited < 2 {
		t.Errorf("Create ran `true` %d times, want it retried while the workload was not up", waited)
	}
	if n := emu.Calls("upload"); n < 3 {
		t.Errorf("%d uploads, want the raw one and the labels written more than once", n)
	}
	if err := p.WriteFile(t.Context(), sb.ID, "/root/data.txt", []byte("kept")); err != nil {
		t.Errorf("WriteFile once the workload runs = %v", err)
	}
}

func TestAnUnknownCreateFieldIsRefused(t *testing.T) {
	emu := emulator(t)
	code, body := post(t, http.MethodPost, emu.URL()+"/api/v1/machines", map[string]any{"name": "x", "image": "alpine", "memory": 1024})
	if code != http.StatusUnprocessableEntity || !strings.Contains(body["raw"].(string), "memory") {
		t.Errorf("create with memory = %d %v, want 422 naming the field", code, body)
	}
}

func TestTerminateCountsAnUnlistedMachineAsGone(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, smolvm.Config{}, nil)
	for _, id := range []string{"sb-never-made", "Bad Id!", "a--b"} {
		if err := p.Terminate(t.Context(), id); err != nil {
			t.Errorf("Terminate(%q) = %v, want nil", id, err)
		}
	}
	if err := p.Terminate(t.Context(), ""); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Terminate(\"\") = %v, want ErrInvalid", err)
	}
	if _, err := p.Get(t.Context(), "sb-never-made"); !errors.Is(err, agentenv.ErrNotFound) || !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("Get of an unlisted machine = %v, want ErrNotFound and ErrGone", err)
	}
	// A failing delete is lifecycletest's (KillFailingAfterCancelLeavesTerminateFailedForGC).
}

// TestListReadsNoStoppedMachine checks that List does not start a machine to read its labels:
// smolvm's files route starts a stopped machine.
func TestListReadsNoStoppedMachine(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, smolvm.Config{}, nil)
	sb, err := p.Create(t.Context(), spec("sb-stop"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(t.Context(), sb.ID)
	post(t, http.MethodPost, emu.URL()+"/api/v1/machines/sb-stop/stop", nil)
	if sbs, err := p.List(t.Context(), map[string]string{agentenv.LabelRun: "r1"}); err != nil || len(sbs) != 0 {
		t.Errorf("List(run) = %+v, %v; want nothing (a stopped machine's labels cannot be read)", sbs, err)
	}
	all, err := p.List(t.Context(), nil)
	if err != nil || len(all) != 1 || len(all[0].Labels) != 1 || all[0].Labels[agentenv.LabelRecord] != "sb-stop" {
		t.Errorf("List() = %+v, %v; want the stopped machine with its record label only", all, err)
	}
	sbs, err := p.List(t.Context(), map[string]string{agentenv.LabelRecord: "sb-stop"})
	if err != nil || len(sbs) != 1 || sbs[0].State != agentenv.SandboxExited {
		t.Errorf("List(record) = %+v, %v; want the stopped machine, exited", sbs, err)
	}
	if _, err := p.Get(t.Context(), sb.ID); !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("Get of a stopped machine = %v, want ErrGone", err)
	}
	if m, _ := emu.Machine("sb-stop"); m.Starts != 1 || m.State != "stopped" {
		t.Errorf("machine = %+v, want still stopped, started once", m)
	}
}

func TestBadInputCreatesNothing(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, smolvm.Config{}, nil)
	for name, mutate := range map[string]func(*agentenv.SandboxSpec){
		"no image":        func(s *agentenv.SandboxSpec) { s.Image = "" },
		"no command":      func(s *agentenv.SandboxSpec) { s.Command = nil },
		"files":           func(s *agentenv.SandboxSpec) { s.Files = map[string][]byte{"/x": []byte("y")} },
		"network":         func(s *agentenv.SandboxSpec) { s.Network = "net-1" },
		"port 0":          func(s *agentenv.SandboxSpec) { s.Ports = []int{0} },
		"double hyphen":   func(s *agentenv.SandboxSpec) { s.Name, s.Labels[agentenv.LabelRecord] = "sb--x", "sb--x" },
		"record mismatch": func(s *agentenv.SandboxSpec) { s.Labels[agentenv.LabelRecord] = "other" },
	} {
		s := spec("sb-bad")
		mutate(&s)
		if _, err := p.Create(t.Context(), s); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("%s: Create = %v, want ErrInvalid", name, err)
		}
	}
	if n := emu.Calls("create"); n != 0 {
		t.Errorf("%d creates reached the server, want none", n)
	}
	if _, err := smolvm.New(smolvm.Config{URL: "ftp://host"}, nil); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("New with an ftp URL = %v, want ErrInvalid", err)
	}
	if _, err := smolvm.New(smolvm.Config{URL: "unix://relative.sock"}, nil); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("New with a relative socket = %v, want ErrInvalid", err)
	}
}

// TestNoServerIsUnavailableNamingTheSetting: with no smolvm server, a create fails before
// anything is sent, invalid (nothing made) and unavailable (a chain moves on), naming the URL's
// setting.
func TestNoServerIsUnavailableNamingTheSetting(t *testing.T) {
	p, err := smolvm.New(smolvm.Config{URL: "unix://" + filepath.Join(t.TempDir(), "smolvm.sock")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Create(t.Context(), spec("sb-none"))
	if !errors.Is(err, agentenv.ErrUnavailable) || !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "provider.smol_vm.url") || !strings.Contains(err.Error(), "smolvm serve start") {
		t.Errorf("Create with no server = %v, want ErrInvalid and ErrUnavailable naming provider.smol_vm.url", err)
	}
	if _, err := p.CreateVM(t.Context(), agentenv.SandboxSpec{Name: "vm-none", Labels: map[string]string{agentenv.LabelRecord: "vm-none"}}); !errors.Is(err, agentenv.ErrUnavailable) {
		t.Errorf("CreateVM with no server = %v, want ErrUnavailable", err)
	}
}

func TestOverAUnixSocket(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "smolvm.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	emu := smolvmemu.StartOn(l)
	defer emu.Close()
	p := newProvider(t, emu, smolvm.Config{URL: "unix://" + sock}, nil)
	if !p.Capabilities().OnThisMachine || !strings.Contains(p.Location(), sock) {
		t.Errorf("capabilities %+v, location %q: want on this machine, at the socket", p.Capabilities(), p.Location())
	}
	sb, err := p.Create(t.Context(), spec("sb-unix"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Terminate(t.Context(), sb.ID); err != nil {
		t.Error(err)
	}
	if left := emu.Running(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}

func TestDefaultURLIsWhereSmolvmServeListens(t *testing.T) {
	t.Setenv("XDG_RUNTIME_DIR", "/run/user/1000")
	if got := smolvm.DefaultURL(); got != "unix:///run/user/1000/smolvm.sock" {
		t.Errorf("DefaultURL = %q", got)
	}
	t.Setenv("XDG_RUNTIME_DIR", "")
	if got := smolvm.DefaultURL(); got != "unix:///tmp/smolvm.sock" {
		t.Errorf("DefaultURL without XDG_RUNTIME_DIR = %q", got)
	}
}

// TestCreateVMPublishesSlotsAndStartsDocker drives CreateVM against machines in memory: an
// imageless networked machine with the slots published, Docker set up, dockerd started as a
// background exec, and the VM's labels marking it.
func TestCreateVMPublishesSlotsAndStartsDocker(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, smolvm.Config{Slots: 3, SlotBase: 30000}, nil)
	labels := map[string]string{agentenv.LabelRecord: "vm-1", agentenv.LabelDeployment: "dep-1"}
	sb, err := p.CreateVM(t.Context(), agentenv.SandboxSpec{Name: "vm-1", Labels: labels})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(t.Context(), sb.ID)
	m, _ := emu.Machine("vm-1")
	if m.Image != "" || len(m.Ports) != 3 || m.Ports[0][1] != 30000 || m.Ports[2][1] != 30002 {
		t.Errorf("machine = %+v, want no image and slots 30000-30002 published", m)
	}
	var background bool
	for _, c := range emu.Commands() {
		background = background || (c.Background && strings.Contains(strings.Join(c.Argv, " "), "dockerd"))
	}
	if !background {
		t.Errorf("commands %+v: want dockerd started as a background exec", emu.Commands())
	}
	if len(sb.Endpoints) != 0 {
		t.Errorf("VM endpoints = %v, want none (the slots are its stack's)", sb.Endpoints)
	}
	sbs, err := p.List(t.Context(), map[string]string{agentenv.LabelDeployment: "dep-1"})
	if err != nil || len(sbs) != 1 || sbs[0].ID != "vm-1" {
		t.Errorf("List(deployment) = %+v, %v; want the VM", sbs, err)
	}
	if _, err := p.RunInVM(t.Context(), "sb-not-a-vm", agentenv.SandboxSpec{Name: "c", Image: "x"}); !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("RunInVM in a machine that does not exist = %v, want ErrGone", err)
	}
	if err := p.RemoveFromVM(t.Context(), "sb-not-a-vm", "c"); err != nil {
		t.Errorf("RemoveFromVM from a VM that is gone = %v, want nil", err)
	}
}

// TestAPortTakenBeforeTheStartIsPickedAgain: smolvm answers a start whose published port is taken
// with 409 PORT_IN_USE; the machine is made again on fresh ports, a bounded number of times.
func TestAPortTakenBeforeTheStartIsPickedAgain(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, smolvm.Config{}, nil)
	emu.SetPortTaken(2)
	sb, err := p.Create(t.Context(), spec("sb-port"))
	if err != nil {
		t.Fatalf("Create with a port taken twice = %v, want it made on the third try", err)
	}
	if err := p.Terminate(t.Context(), sb.ID); err != nil {
		t.Error(err)
	}
	if n := emu.Calls("create"); n != 3 {
		t.Errorf("%d creates, want 3", n)
	}
	emu.SetPortTaken(3)
	if _, err := p.Create(t.Context(), spec("sb-port2")); !errors.Is(err, agentenv.ErrUnavailable) || !strings.Contains(err.Error(), "PORT_IN_USE") {
		t.Errorf("Create with a port taken every time = %v, want ErrUnavailable naming PORT_IN_USE", err)
	}
}
