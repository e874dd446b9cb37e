package e2b_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/provider/e2b"
	"github.com/agentenv/agentenv/provider/e2b/e2bemu"
	"github.com/agentenv/agentenv/provider/providertest"
)

const apiKey = "e2b_0123456789abcdef0123456789abcdef01234567"

// emulator starts the E2B emulator, failing the test if it still runs a sandbox at the end.
func emulator(t *testing.T) *e2bemu.Server {
	t.Helper()
	return providertest.CloseAtEnd(t, e2bemu.Start(apiKey))
}

// newProvider returns a provider pointed at emu; cfg's zero fields get test values.
func newProvider(t *testing.T, emu *e2bemu.Server, cfg e2b.Config, logger *slog.Logger) *e2b.Provider {
	t.Helper()
	if cfg.APIKey == "" {
		cfg.APIKey = apiKey
	}
	cfg.APIURL, cfg.SandboxURL = emu.URL(), emu.SandboxURL
	if cfg.Rate == 0 {
		cfg.Rate = 1000
	}
	p, err := e2b.New(cfg, logger)
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
	providertest.Run(t, func(t *testing.T) agentenv.Provider { return newProvider(t, emu, e2b.Config{}, nil) }, providertest.Options{
		Image: "base", Command: serve, Port: 8080, ExitCommand: exitCode, ExitCode: 3,
		FinishedUnlisted: true, Wait: 5 * time.Second,
	})
}

func spec(id string) agentenv.SandboxSpec {
	return agentenv.SandboxSpec{Name: id, Command: serve, Ports: []int{8080},
		Labels: map[string]string{agentenv.LabelRecord: id, agentenv.LabelRun: "r1"}}
}

func TestBadInputCreatesNothing(t *testing.T) {
	emu := emulator(t)
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	noKey, err := e2b.New(e2b.Config{APIURL: emu.URL(), SandboxURL: emu.SandboxURL}, logger)
	if err != nil {
		t.Fatal(err)
	}
	_, err = noKey.Create(t.Context(), spec("sb-nokey"))
	if !errors.Is(err, agentenv.ErrUnavailable) || !strings.Contains(err.Error(), "provider.e2b.api_key") || !strings.Contains(err.Error(), "env:E2B_API_KEY") {
		t.Errorf("Create without a key = %v, want ErrUnavailable naming provider.e2b.api_key and env:E2B_API_KEY", err)
	}
	for name, err := range map[string]error{
		"Terminate": noKey.Terminate(t.Context(), "ix"),
		"List":      func() error { _, err := noKey.List(t.Context(), nil); return err }(),
		"Get":       func() error { _, err := noKey.Get(t.Context(), "ix"); return err }(),
		"CreateVM":  func() error { _, err := noKey.CreateVM(t.Context(), spec("vm-nokey")); return err }(),
	} {
		if !errors.Is(err, agentenv.ErrUnavailable) {
			t.Errorf("%s without a key = %v, want ErrUnavailable", name, err)
		}
	}

	wrongKey := newProvider(t, emu, e2b.Config{APIKey: "e2b_wrong"}, logger)
	if _, err := wrongKey.Create(t.Context(), spec("sb-wrongkey")); !errors.Is(err, agentenv.ErrUnavailable) || !strings.Contains(err.Error(), "401") {
		t.Errorf("Create with a wrong key = %v, want ErrUnavailable (401)", err)
	}

	p := newProvider(t, emu, e2b.Config{}, logger)
	unknown := spec("sb-unknown")
	unknown.Image = "no-such-template"
	if _, err := p.Create(t.Context(), unknown); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "no-such-template") {
		t.Errorf("Create from an unknown template = %v, want ErrInvalid naming it", err)
	}
	files := spec("sb-files")
	files.Files = map[string][]byte{"/a": []byte("x")}
	badPort := spec("sb-port")
	badPort.Ports = []int{e2b.EnvdPort}
	badTemplate := spec("sb-tpl")
	badTemplate.Image = "bad template!"
	for name, s := range map[string]agentenv.SandboxSpec{"files": files, "envd port": badPort, "malformed template": badTemplate} {
		if _, err := p.Create(t.Context(), s); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("Create with %s = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := e2b.New(e2b.Config{Config: cloudapi.Config{Rate: -1}}, nil); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("New with a negative rate = %v, want ErrInvalid", err)
	}
	if n := len(emu.Running()); n != 0 {
		t.Errorf("%d sandboxes running after refused creates, want 0", n)
	}
	if strings.Contains(logs.String(), apiKey) || strings.Contains(logs.String(), "e2b_wrong") {
		t.Errorf("the API key was logged:\n%s", logs.String())
	}
}

func TestTimeoutIsAlwaysSet(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, e2b.Config{Config: cloudapi.Config{MaxTimeout: 2 * time.Hour}}, nil)
	for _, tt := range []struct {
		name     string
		timeout  time.Duration
		expires  time.Duration
		min, max time.Duration
	}{
		{"spec timeout", 20 * time.Minute, 0, 20 * time.Minute, 21 * time.Minute},
		{"expiry plus margin", 0, 30 * time.Minute, 39 * time.Minute, 41 * time.Minute},
		{"default, capped", 0, 0, 2 * time.Hour, 2 * time.Hour},
		{"capped", 5 * time.Hour, 0, 2 * time.Hour, 2 * time.Hour},
	} {
		t.Run(tt.name, func(t *testing.T) {
			s := spec(fmt.Sprintf("sb-to-%d", tt.min/time.Minute))
			s.Timeout = tt.timeout
			if tt.expires > 0 {
				s.Expires = time.Now().Add(tt.expires)
			}
			sb, err := p.Create(t.Context(), s)
			if err != nil {
				t.Fatal(err)
			}
			defer p.Terminate(t.Context(), sb.ID)
			got, _ := emu.Sandbox(sb.ID)
			if got.Timeout < tt.min || got.Timeout > tt.max {
				t.Errorf("timeout sent = %s, want within [%s, %s]", got.Timeout, tt.min, tt.max)
			}
		})
	}
}

func TestListReadsEveryPage(t *testing.T) {
	emu := emulator(t)
	emu.SetPageSize(2)
	p := newProvider(t, emu, e2b.Config{}, nil)
	for i := range 5 {
		s := spec(fmt.Sprintf("sb-page-%d", i))
		s.Labels["example.com/batch"] = "b"
		sb, err := p.Create(t.Context(), s)
		if err != nil {
			t.Fatal(err)
		}
		defer p.Terminate(t.Context(), sb.ID)
	}
	sbs, err := p.List(t.Context(), map[string]string{"example.com/batch": "b", agentenv.LabelDeployment: ""})
	if err != nil || len(sbs) != 0 {
		t.Errorf("List(batch, deployment=\"\") = %d, %v; want none (the label is absent)", len(sbs), err)
	}
	sbs, err = p.List(t.Context(), map[string]string{"example.com/batch": "b"})
	if err != nil || len(sbs) != 5 {
		t.Errorf("List(batch) = %d sandboxes, %v; want all 5 across pages", len(sbs), err)
	}
}

func TestFinishedSandboxIsRefusedButTerminates(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, e2b.Config{}, nil)
	sb, err := p.Create(t.Context(), spec("sb-expired"))
	if err != nil {
		t.Fatal(err)
	}
	emu.Expire(sb.ID)
	if _, err := p.Get(t.Context(), sb.ID); !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("Get of a timed-out sandbox = %v, want ErrGone", err)
	}
	if err := p.Terminate(t.Context(), sb.ID); err != nil {
		t.Errorf("Terminate of a timed-out sandbox = %v, want nil (404 counts as gone)", err)
	}
}

func TestVMHost(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, e2b.Config{}, nil)
	vm, err := p.CreateVM(t.Context(), agentenv.SandboxSpec{Name: "vm-1", Labels: map[string]string{agentenv.LabelRecord: "vm-1"}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(t.Context(), vm.ID)
	if got, _ := emu.Sandbox(vm.ID); got.Template != e2b.DefaultVMTemplate {
		t.Errorf("vm template = %q, want %q", got.Template, e2b.DefaultVMTemplate)
	}
	c, err := p.RunInVM(t.Context(), vm.ID, agentenv.SandboxSpec{Name: "gateway", Image: "agentenv:dev", Command: []string{"agentenv", "gateway"},
		Ports: []int{8000}, Aliases: []string{"gw"}, Labels: map[string]string{agentenv.LabelRole: "gateway"}, Env: map[string]string{"TOKEN": "it's"},
		Files: map[string][]byte{"/agentenv": []byte("\x7fELF binary")}})
	if err != nil {
		t.Fatal(err)
	}
	if c.Endpoints["8000"] != emu.SandboxURL(vm.ID, 8000) || c.Labels[agentenv.LabelRecord] != "vm-1" {
		t.Errorf("RunInVM = %+v, want the vm's port URL and labels", c)
	}
	if err := p.RemoveFromVM(t.Context(), vm.ID, "gateway"); err != nil {
		t.Errorf("RemoveFromVM = %v", err)
	}
	cmds := emu.Commands()
	if len(cmds) != 2 || cmds[0].User != "root" || !strings.Contains(cmds[0].Script, "'docker' 'create' '--name' 'gateway'") ||
		!strings.Contains(cmds[0].Script, `'TOKEN=it'\''s'`) || !strings.Contains(cmds[1].Script, "'docker' 'rm' '-f' 'gateway'") {
		t.Errorf("commands = %+v, want docker create then docker rm, as root, quoted", cmds)
	}
	// The files went up as one tar through envd's filesystem API, and into the container before
	// it started.
	ups := emu.Uploads()
	if len(ups) != 1 || ups[0].Sandbox != vm.ID || ups[0].User != "root" || !strings.HasSuffix(ups[0].Path, ".tar") {
		t.Fatalf("uploads = %+v, want one tar into the vm as root", ups)
	}
	h, err := tar.NewReader(bytes.NewReader(ups[0].Data)).Next()
	if err != nil || h.Name != "agentenv" || h.Mode != 0o755 {
		t.Errorf("uploaded tar starts with %+v, %v; want agentenv, mode 0755", h, err)
	}
	if cp, start := strings.Index(cmds[0].Script, "docker cp - 'gateway:/' <"+ups[0].Path), strings.Index(cmds[0].Script, "docker start 'gateway'"); cp < 0 || start < cp {
		t.Errorf("script %q does not copy the uploaded tar in before docker start", cmds[0].Script)
	}
	if err := p.Terminate(t.Context(), vm.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.RemoveFromVM(t.Context(), vm.ID, "gateway"); err != nil {
		t.Errorf("RemoveFromVM of a gone vm = %v, want nil", err)
	}
	if _, err := p.RunInVM(t.Context(), vm.ID, agentenv.SandboxSpec{Name: "x", Image: "i"}); !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("RunInVM in a gone vm = %v, want ErrGone", err)
	}
}
