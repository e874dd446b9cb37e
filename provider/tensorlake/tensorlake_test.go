package tensorlake_test

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/provider/providertest"
	"github.com/agentenv/agentenv/provider/tensorlake"
	"github.com/agentenv/agentenv/provider/tensorlake/tensorlakeemu"
)

const apiKey = "tl_apiKey_0123456789abcdef"

// emulator starts the Tensorlake emulator, failing the test if it still runs a sandbox at the end.
func emulator(t *testing.T) *tensorlakeemu.Server {
	t.Helper()
	return providertest.CloseAtEnd(t, tensorlakeemu.Start(apiKey))
}

// newProvider returns a provider pointed at emu; cfg's zero fields get test values.
func newProvider(t *testing.T, emu *tensorlakeemu.Server, cfg tensorlake.Config, logger *slog.Logger) *tensorlake.Provider {
	t.Helper()
	if cfg.APIKey == "" {
		cfg.APIKey = apiKey
	}
	cfg.APIURL, cfg.ProxyURL, cfg.PortURL = emu.URL(), emu.ProxyURL, emu.PortURL
	if cfg.Rate == 0 {
		cfg.Rate = 1000
	}
	p, err := tensorlake.New(cfg, logger)
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
	providertest.Run(t, func(t *testing.T) agentenv.Provider { return newProvider(t, emu, tensorlake.Config{}, nil) }, providertest.Options{
		Image: "ubuntu-minimal", Command: serve, Port: 8080, ExitCommand: exitCode, ExitCode: 3,
		FinishedUnlisted: true, Wait: 5 * time.Second,
	})
}

func spec(id string) agentenv.SandboxSpec {
	return agentenv.SandboxSpec{Name: id, Command: serve, Ports: []int{8080},
		Labels: map[string]string{agentenv.LabelRecord: id, agentenv.LabelRun: "r1"}}
}

func TestCreateSendsNameLabelsTimeoutAndPorts(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, tensorlake.Config{}, nil)
	s := spec("sb-wire")
	s.Env = map[string]string{"GREETING": "hello world", "TOKEN": "s3cret-value"}
	s.WorkDir = "/srv"
	s.Timeout = 90 * time.Minute
	sb, err := p.Create(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(t.Context(), sb.ID)
	got, ok := emu.Sandbox(sb.ID)
	if !ok {
		t.Fatalf("the emulator has no sandbox %s", sb.ID)
	}
	if got.Name != "sb-wire" || got.Labels[agentenv.LabelRecord] != "sb-wire" || got.Labels[agentenv.LabelRun] != "r1" {
		t.Errorf("sandbox name %q, labels %v; want the record id as name and the labels in the entrypoint", got.Name, got.Labels)
	}
	if got.Timeout != 90*time.Minute+time.Second || len(got.ExposedPorts) != 1 || got.ExposedPorts[0] != 8080 || !got.Public {
		t.Errorf("timeout %s, exposed %v public %v; want 1h30m1s and 8080 exposed publicly", got.Timeout, got.ExposedPorts, got.Public)
	}
	ep := strings.Join(got.Entrypoint, " ")
	if !strings.Contains(ep, "cd '/srv' && exec \"$@\" agentenv.labels=") || !strings.HasSuffix(ep, strings.Join(serve, " ")) {
		t.Errorf("entrypoint %q, want the wrapper, the labels, then the command", ep)
	}
	if strings.Contains(ep, "s3cret-value") || strings.Contains(ep, "hello world") {
		t.Errorf("entrypoint %q carries the environment, which Tensorlake lists to the whole project", ep)
	}
	env, err := p.ReadFile(t.Context(), sb.ID, "/tmp/.agentenv-env")
	if err != nil || string(env) != "export 'GREETING=hello world'\nexport 'TOKEN=s3cret-value'\n" {
		t.Errorf("environment file = %q, %v; want an export of each variable", env, err)
	}
	if sb.Labels[agentenv.LabelRun] != "r1" || sb.Endpoints["8080"] != emu.PortURL(sb.ID, 8080) {
		t.Errorf("sandbox %+v, want the labels and the port's URL", sb)
	}
	resp, err := http.Get(sb.Endpoints["8080"] + "/")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET the exposed port = %v, %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

func TestBadInputCreatesNothing(t *testing.T) {
	emu := emulator(t)
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	noKey, err := tensorlake.New(tensorlake.Config{APIURL: emu.URL(), ProxyURL: emu.ProxyURL, PortURL: emu.PortURL}, logger)
	if err != nil {
		t.Fatal(err)
	}
	_, err = noKey.Create(t.Context(), spec("sb-nokey"))
	if !errors.Is(err, agentenv.ErrUnavailable) || !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "provider.tensorlake.api_key") || !strings.Contains(err.Error(), "env:TENSORLAKE_API_KEY") {
		t.Errorf("Create without a key = %v, want ErrInvalid and ErrUnavailable naming provider.tensorlake.api_key and env:TENSORLAKE_API_KEY", err)
	}
	for name, err := range map[string]error{
		"Terminate": noKey.Terminate(t.Context(), "ix"),
		"List":      func() error { _, err := noKey.List(t.Context(), nil); return err }(),
		"Get":       func() error { _, err := noKey.Get(t.Context(), "ix"); return err }(),
		"CreateVM":  func() error { _, err := noKey.CreateVM(t.Context(), spec("vm-nokey")); return err }(),
	} {
		if !errors.Is(err, agentenv.ErrUnavailable) && !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("%s without a key = %v, want ErrUnavailable or ErrInvalid", name, err)
		}
	}
	if emu.Calls("create") != 0 || emu.Calls("list") != 0 {
		t.Errorf("calls without a key reached the API: %d creates, %d lists", emu.Calls("create"), emu.Calls("list"))
	}

	wrongKey := newProvider(t, emu, tensorlake.Config{APIKey: "tl_wrong"}, logger)
	if _, err := wrongKey.Create(t.Context(), spec("sb-wrongkey")); !errors.Is(err, agentenv.ErrUnavailable) || !strings.Contains(err.Error(), "401") {
		t.Errorf("Create with a wrong key = %v, want ErrUnavailable (401)", err)
	}

	p := newProvider(t, emu, tensorlake.Config{}, logger)
	unknown := spec("sb-unknown")
	unknown.Image = "no-such-image"
	if _, err := p.Create(t.Context(), unknown); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "no-such-image") {
		t.Errorf("Create from an unknown image = %v, want ErrInvalid naming it", err)
	}
	if _, err := p.CreateVM(t.Context(), spec("vm-noimage")); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "provider.tensorlake.vm_image") {
		t.Errorf("CreateVM with no VM image = %v, want ErrInvalid naming provider.tensorlake.vm_image", err)
	}
	files := spec("sb-files")
	files.Files = map[string][]byte{"/a": []byte("x")}
	badPort := spec("sb-port")
	badPort.Ports = []int{tensorlake.APIPort}
	noCmd := spec("sb-nocmd")
	noCmd.Command = nil
	badEnv := spec("sb-env")
	badEnv.Env = map[string]string{"A-B": "x"}
	network := spec("sb-net")
	network.Network = "net-1"
	for name, s := range map[string]agentenv.SandboxSpec{"files": files, "the API port": badPort, "no command": noCmd, "a bad env name": badEnv, "a network": network} {
		if _, err := p.Create(t.Context(), s); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("Create with %s = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := tensorlake.New(tensorlake.Config{Config: cloudapi.Config{Rate: -1}}, nil); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("New with a negative rate = %v, want ErrInvalid", err)
	}
	if n := len(emu.Running()); n != 0 {
		t.Errorf("%d sandboxes running after refused creates, want 0", n)
	}
	if strings.Contains(logs.String(), apiKey) {
		t.Errorf("the API key was logged")
	}
}

func TestTerminateCountsGoneAsTerminated(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, tensorlake.Config{}, nil)
	sb, err := p.Create(t.Context(), spec("sb-term"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Terminate(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	// Terminated (idempotent at Tensorlake) and never made (404, SandboxNotFoundError): both nil.
	for _, id := range []string{sb.ID, "0123456789abcdefffff"} {
		if err := p.Terminate(t.Context(), id); err != nil {
			t.Errorf("Terminate(%s) again = %v, want nil", id, err)
		}
	}
	if _, err := p.Get(t.Context(), sb.ID); !errors.Is(err, agentenv.ErrGone) || !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Get of a terminated sandbox = %v, want ErrGone and ErrNotFound (kept only as history)", err)
	}
	if _, err := p.Get(t.Context(), "0123456789abcdefffff"); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Get of an unknown sandbox = %v, want ErrNotFound", err)
	}
	emu.SetKillFault(http.StatusInternalServerError, 1)
	sb2, err := p.Create(t.Context(), spec("sb-term2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Terminate(t.Context(), sb2.ID); err == nil {
		t.Errorf("Terminate with a failing delete = nil, want the error")
	}
	if err := p.Terminate(t.Context(), sb2.ID); err != nil {
		t.Errorf("Terminate once the fault is over = %v", err)
	}
}

func TestIdleTimeoutEndsTheSandbox(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, tensorlake.Config{}, nil)
	s := spec("sb-idle")
	s.Timeout = time.Second // sent as 2 s: the backstop is never shorter than asked
	sb, err := p.Create(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(emu.Running()) != 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := p.Get(t.Context(), sb.ID); !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("Get past the idle timeout = %v, want ErrGone", err)
	}
	if sbs, err := p.List(t.Context(), map[string]string{agentenv.LabelRecord: "sb-idle"}); err != nil || len(sbs) != 0 {
		t.Errorf("List past the idle timeout = %v, %v; want none", sbs, err)
	}
}

func TestListReadsEveryPageAndFilters(t *testing.T) {
	emu := emulator(t)
	emu.StartDelay = 0
	p := newProvider(t, emu, tensorlake.Config{}, nil)
	var ids []string
	for i := range 105 {
		s := spec("sb-page-" + string(rune('a'+i%26)) + string(rune('a'+i/26)))
		if i%2 == 0 {
			s.Labels[agentenv.LabelDeployment] = "dep-even"
		}
		sb, err := p.Create(t.Context(), s)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	t.Cleanup(func() {
		for _, id := range ids {
			p.Terminate(context.Background(), id)
		}
	})
	all, err := p.List(t.Context(), nil)
	if err != nil || len(all) != 105 {
		t.Errorf("List(nil) = %d sandboxes, %v; want 105 over two pages", len(all), err)
	}
	even, err := p.List(t.Context(), map[string]string{agentenv.LabelDeployment: "dep-even"})
	if err != nil || len(even) != 53 {
		t.Errorf("List(deployment) = %d, %v; want 53", len(even), err)
	}
}

func TestCreateVMWaitsForDockerAndCarriesTheLabels(t *testing.T) {
	emu := emulator(t)
	emu.AddImage("agentenv-docker")
	p := newProvider(t, emu, tensorlake.Config{VMImage: "agentenv-docker"}, nil)
	vm, err := p.CreateVM(t.Context(), spec("vm-one"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := emu.Sandbox(vm.ID)
	if got.Image != "agentenv-docker" || got.Labels[agentenv.LabelRecord] != "vm-one" || got.Labels["agentenv.tensorlake.mode"] != "vm" {
		t.Errorf("vm sandbox %+v, want the VM image, the record label and the vm mode", got)
	}
	var sawDocker bool
	for _, c := range emu.Commands() {
		if c.Sandbox == vm.ID && strings.Contains(strings.Join(c.Argv, " "), "docker info") {
			sawDocker = true
		}
	}
	if !sawDocker {
		t.Errorf("CreateVM did not wait for the VM's docker engine: %v", emu.Commands())
	}
	if _, ok := vm.Labels["agentenv.tensorlake.mode"]; ok {
		t.Errorf("the provider's own mode label leaked into the sandbox's labels: %v", vm.Labels)
	}
	if sbs, err := p.List(t.Context(), map[string]string{agentenv.LabelRecord: "vm-one"}); err != nil || len(sbs) != 1 || sbs[0].ID != vm.ID {
		t.Errorf("List(vm record) = %v, %v; want the VM", sbs, err)
	}
	if err := p.Terminate(t.Context(), vm.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.RemoveFromVM(t.Context(), vm.ID, "gateway"); err != nil {
		t.Errorf("RemoveFromVM of a VM that is gone = %v, want nil", err)
	}
	if _, err := p.ExecInVM(t.Context(), vm.ID, "gateway", []string{"true"}, nil, nil); !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("ExecInVM in a VM that is gone = %v, want ErrGone", err)
	}
	if _, err := p.RunInVM(t.Context(), vm.ID, agentenv.SandboxSpec{Name: "x", Image: "img"}); !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("RunInVM in a VM that is gone = %v, want ErrGone", err)
	}
}
