package tenki_test

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/providertest"
	"github.com/agentenv/agentenv/provider/tenki"
	"github.com/agentenv/agentenv/provider/tenki/tenkiemu"
)

const apiKey = "tk_test_0123456789abcdef"

// emulator starts the Tenki emulator, failing the test if it still runs a session at the end.
func emulator(t *testing.T) *tenkiemu.Server {
	t.Helper()
	return providertest.CloseAtEnd(t, tenkiemu.Start(apiKey))
}

// newProvider returns a provider pointed at emu; cfg's zero fields get test values.
func newProvider(t *testing.T, emu *tenkiemu.Server, cfg tenki.Config, logger *slog.Logger) *tenki.Provider {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token = apiKey
	}
	cfg.APIURL = emu.URL()
	if cfg.Rate == 0 {
		cfg.Rate = 1000
	}
	p, err := tenki.New(cfg, logger)
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
	providertest.Run(t, func(t *testing.T) agentenv.Provider { return newProvider(t, emu, tenki.Config{}, nil) }, providertest.Options{
		Image: "sandbox", Command: serve, Port: 8080, ExitCommand: exitCode, ExitCode: 3,
		FinishedUnlisted: true, Wait: 5 * time.Second,
	})
}

func spec(id string) agentenv.SandboxSpec {
	return agentenv.SandboxSpec{Name: id, Command: serve, Ports: []int{8080},
		Labels: map[string]string{agentenv.LabelRecord: id, agentenv.LabelRun: "r1"}}
}

func TestCreateSendsNameMetadataDurationAndPorts(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, tenki.Config{}, nil)
	s := spec("sb-wire")
	s.Env = map[string]string{"GREETING": "hello world", "TOKEN": "s3cret-value"}
	s.WorkDir = "/srv"
	s.Timeout = 90 * time.Minute
	s.CPUs, s.Memory = 1.5, 1000<<20
	s.Files = map[string][]byte{"/etc/agentenv/config.json": []byte(`{"a":1}`)}
	sb, err := p.Create(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(t.Context(), sb.ID)
	got, ok := emu.Session(sb.ID)
	if !ok {
		t.Fatalf("the emulator has no session %s", sb.ID)
	}
	if got.Name != "sb-wire" || got.Metadata[agentenv.LabelRecord] != "sb-wire" || got.Metadata[agentenv.LabelRun] != "r1" || !slices.Equal(got.Tags, []string{tenki.Tag}) {
		t.Errorf("session name %q, metadata %v, tags %v; want the record id as name, the labels as metadata, the agentenv tag", got.Name, got.Metadata, got.Tags)
	}
	if got.MaxDuration != 90*time.Minute+time.Second || !slices.Equal(got.Ports, []int{8080}) || !got.Inbound {
		t.Errorf("max duration %s, ports %v, inbound %v; want 1h30m1s and 8080 exposed", got.MaxDuration, got.Ports, got.Inbound)
	}
	if got.CPUCores != 2 || got.MemoryMB != 1000 {
		t.Errorf("cpu %d, memory %d MB; want 2 cores (1.5 rounded up), 1000 MB", got.CPUCores, got.MemoryMB)
	}
	for k, v := range got.Metadata {
		if strings.Contains(v, "s3cret") || strings.Contains(k, "TOKEN") {
			t.Errorf("metadata %s=%s carries the environment, which Tenki returns to whoever lists the workspace", k, v)
		}
	}
	cmds := emu.Commands()
	if len(cmds) != 1 {
		t.Fatalf("commands %+v, want the one start", cmds)
	}
	start := cmds[0]
	if !start.Privileged || start.Env["TOKEN"] != "s3cret-value" || !slices.Equal(start.Argv[4:], serve) ||
		!strings.Contains(start.Argv[2], "/srv") || !strings.Contains(start.Argv[2], "poweroff") {
		t.Errorf("start %+v; want the command after the wrapper's $0, in /srv, as root, with the environment, then a poweroff", start)
	}
	data, err := p.ReadFile(t.Context(), sb.ID, "/etc/agentenv/config.json")
	if err != nil || string(data) != `{"a":1}` {
		t.Errorf("file = %q, %v; want the spec's file", data, err)
	}
	if sb.Labels[agentenv.LabelRun] != "r1" || sb.Endpoints["8080"] == "" || sb.Labels["agentenv.tenki.ports"] != "" {
		t.Errorf("sandbox %+v, want the labels (without agentenv's own metadata) and the port's preview URL", sb)
	}
	resp, err := http.Get(sb.Endpoints["8080"] + "/")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET the preview URL = %v, %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

func TestBadInputCreatesNothing(t *testing.T) {
	emu := emulator(t)
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	noKey, err := tenki.New(tenki.Config{APIURL: emu.URL()}, logger)
	if err != nil {
		t.Fatal(err)
	}
	_, err = noKey.Create(t.Context(), spec("sb-nokey"))
	if !errors.Is(err, agentenv.ErrInvalid) || !errors.Is(err, agentenv.ErrUnavailable) || !strings.Contains(err.Error(), "provider.tenki.token") {
		t.Errorf("Create without a key = %v; want ErrInvalid and ErrUnavailable naming provider.tenki.token", err)
	}
	if _, err := noKey.List(t.Context(), nil); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("List without a key = %v, want ErrInvalid", err)
	}
	if n := emu.Calls("CreateSession") + emu.Calls("ListWorkspaceSandboxes"); n != 0 {
		t.Errorf("%d calls reached the API without a key, want none", n)
	}

	wrong := newProvider(t, emu, tenki.Config{Token: "tk_wrong"}, logger)
	if _, err := wrong.Create(t.Context(), spec("sb-wrongkey")); !errors.Is(err, agentenv.ErrUnavailable) {
		t.Errorf("Create with a wrong key = %v, want ErrUnavailable (Unauthenticated)", err)
	}

	p := newProvider(t, emu, tenki.Config{}, logger)
	bad := map[string]agentenv.SandboxSpec{}
	s := spec("sb-net")
	s.Network = "net-1"
	bad["network"] = s
	s = spec("sb-image")
	s.Image = "no/such:image"
	bad["unknown image"] = s
	s = spec("sb-image2")
	s.Image = "not an image!"
	bad["malformed image"] = s
	s = spec("sb-port")
	s.Ports = []int{70000}
	bad["port"] = s
	s = spec("sb-file")
	s.Files = map[string][]byte{"relative/path": nil}
	bad["relative file"] = s
	for name, s := range bad {
		if _, err := p.Create(t.Context(), s); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("Create with a bad %s = %v, want ErrInvalid", name, err)
		}
	}
	if made := emu.Made(); len(made) != 0 {
		t.Errorf("sessions made %v, want none", made)
	}
	if _, err := tenki.New(tenki.Config{APIURL: "ftp://example"}, nil); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("New with a non-http api url = %v, want ErrInvalid", err)
	}
	if strings.Contains(logs.String(), apiKey) || strings.Contains(logs.String(), "tk_wrong") {
		t.Errorf("the logs carry an API key:\n%s", logs.String())
	}
}

// TestTerminateCountsEndedAndUnknownAsTerminated checks seed 002's rule for Tenki: a session
// Tenki does not know, or one that has ended, counts as terminated; a terminate that fails on a
// live session is an error.
func TestTerminateCountsEndedAndUnknownAsTerminated(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, tenki.Config{}, nil)
	if err := p.Terminate(t.Context(), "ses_never_made"); err != nil {
		t.Errorf("Terminate(unknown) = %v, want nil", err)
	}
	sb, err := p.Create(t.Context(), spec("sb-ended"))
	if err != nil {
		t.Fatal(err)
	}
	emu.Expire(sb.ID)
	if _, err := p.Get(t.Context(), sb.ID); !errors.Is(err, agentenv.ErrGone) || !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Get of an ended session = %v, want ErrGone and ErrNotFound", err)
	}
	before := emu.Calls("TerminateSession")
	if err := p.Terminate(t.Context(), sb.ID); err != nil {
		t.Errorf("Terminate(ended) = %v, want nil", err)
	}
	if emu.Calls("TerminateSession") != before+1 {
		t.Errorf("Terminate of an ended session made %d TerminateSession calls, want 1 (the service answers FailedPrecondition)", emu.Calls("TerminateSession")-before)
	}

	live, err := p.Create(t.Context(), spec("sb-kill-fails"))
	if err != nil {
		t.Fatal(err)
	}
	emu.SetKillFault(http.StatusInternalServerError, 1)
	if err := p.Terminate(t.Context(), live.ID); err == nil {
		t.Error("Terminate with a failing kill = nil, want an error: the session still runs")
	}
	if err := p.Terminate(t.Context(), live.ID); err != nil {
		t.Errorf("Terminate once the fault is spent = %v", err)
	}
}

func TestFinishedCommandShutsTheSandboxDown(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, tenki.Config{}, nil)
	s := spec("sb-exits")
	s.Command, s.Ports = exitCode, nil
	sb, err := p.Create(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, err = p.Get(t.Context(), sb.ID)
		if errors.Is(err, agentenv.ErrGone) || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !errors.Is(err, agentenv.ErrGone) {
		t.Fatalf("Get after the command exited = %v, want ErrGone", err)
	}
	if err := p.Terminate(t.Context(), sb.ID); err != nil {
		t.Errorf("Terminate of a finished sandbox = %v", err)
	}
}

func TestListReadsEveryPage(t *testing.T) {
	emu := emulator(t)
	emu.PageSize = 2
	p := newProvider(t, emu, tenki.Config{}, nil)
	var ids []string
	for i := range 5 {
		s := spec(fmt.Sprintf("sb-page-%d", i))
		s.Labels[agentenv.LabelDeployment] = "d1"
		s.Ports = nil
		sb, err := p.Create(t.Context(), s)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	got, err := p.List(t.Context(), map[string]string{agentenv.LabelDeployment: "d1"})
	if err != nil || len(got) != 5 {
		t.Errorf("List = %d sandboxes, %v; want all 5 across 3 pages", len(got), err)
	}
	if n := emu.Calls("ListWorkspaceSandboxes"); n != 3 {
		t.Errorf("%d list calls, want 3 pages", n)
	}
	for _, id := range ids {
		if err := p.Terminate(t.Context(), id); err != nil {
			t.Error(err)
		}
	}
}

func TestExecRenewsAnExpiredCredential(t *testing.T) {
	emu := emulator(t)
	emu.CredentialTTL = 30 * time.Second // within the minute before expiry: renewed on every use
	p := newProvider(t, emu, tenki.Config{}, nil)
	s := spec("sb-renew")
	s.Command, s.Ports = nil, nil
	sb, err := p.Create(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(t.Context(), sb.ID)
	for range 2 {
		res, err := p.Exec(t.Context(), sb.ID, exitCode)
		if err != nil || res.ExitCode != 3 {
			t.Errorf("Exec = %+v, %v; want exit 3", res, err)
		}
	}
	if n := emu.Calls("CreateSessionCredential"); n != 2 {
		t.Errorf("%d credentials asked for, want one per exec", n)
	}
	if _, err := p.Exec(t.Context(), "ses_missing", exitCode); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Exec in a session that does not exist = %v, want ErrNotFound", err)
	}
	emu.Expire(sb.ID)
	if _, err := p.Exec(t.Context(), sb.ID, exitCode); !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("Exec in an ended session = %v, want ErrGone", err)
	}
	if _, err := p.ReadFile(t.Context(), sb.ID, "/tmp/x"); !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("ReadFile in an ended session = %v, want ErrGone", err)
	}
}

func TestLocationAndAbilities(t *testing.T) {
	p, err := tenki.New(tenki.Config{Token: apiKey}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Location(); got != "Tenki at https://api.tenki.cloud" {
		t.Errorf("Location = %q", got)
	}
	want := []agentenv.Ability{agentenv.AbilityVMs, agentenv.AbilityVMExec, agentenv.AbilityExec, agentenv.AbilityFiles, agentenv.AbilityLocation}
	if got := agentenv.AbilitiesOf(p).List(); !slices.Equal(got, want) {
		t.Errorf("abilities %v, want %v (no private networks)", got, want)
	}
	if c := p.Capabilities(); !c.ListByLabel || !c.BackstopLifetime || c.OnThisMachine {
		t.Errorf("capabilities %+v", c)
	}
}
