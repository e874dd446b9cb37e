package vercel_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/provider/providertest"
	"github.com/agentenv/agentenv/provider/vercel"
	"github.com/agentenv/agentenv/provider/vercel/vercelemu"
)

const (
	token   = "vercel_test_token_0123456789"
	team    = "team_agentenv"
	project = "prj_agentenv"
)

// emulator starts the Vercel emulator, failing the test if it still runs a sandbox at the end.
func emulator(t *testing.T) *vercelemu.Server {
	t.Helper()
	return providertest.CloseAtEnd(t, vercelemu.Start(token, team, project))
}

// newProvider returns a provider pointed at emu; cfg's zero fields get test values.
func newProvider(t *testing.T, emu *vercelemu.Server, cfg vercel.Config, logger *slog.Logger) *vercel.Provider {
	t.Helper()
	if cfg.Token == "" {
		cfg.Token, cfg.TeamID, cfg.ProjectID = token, team, project
	}
	cfg.APIURL = emu.URL()
	if cfg.Rate == 0 {
		cfg.Rate = 1000
	}
	p, err := vercel.New(cfg, logger)
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
	providertest.Run(t, func(t *testing.T) agentenv.Provider { return newProvider(t, emu, vercel.Config{}, nil) }, providertest.Options{
		Image: "universal", Command: serve, Port: 8080, ExitCommand: exitCode, ExitCode: 3, Wait: 5 * time.Second,
	})
}

func spec(id string) agentenv.SandboxSpec {
	return agentenv.SandboxSpec{Name: id, Command: serve, Ports: []int{8080},
		Labels: map[string]string{agentenv.LabelRecord: id, agentenv.LabelRun: "r1"}}
}

// fullLabels are the labels a deployment's component carries, and a user's.
func fullLabels(id string) map[string]string {
	return map[string]string{
		agentenv.LabelRecord: id, agentenv.LabelRun: "run-7f3a", agentenv.LabelDeployment: "dep-91c2",
		agentenv.LabelOwner: "host-1/4242/1733120000", agentenv.LabelExpires: "2026-12-02T10:00:00Z",
		agentenv.LabelRole: string(agentenv.RoleGateway), "example.com/team": "infra", "empty": "",
	}
}

func TestCreateSendsNameTagsTimeoutPortsAndTheCommand(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, vercel.Config{}, nil)
	s := spec("sb-wire")
	s.Labels = fullLabels("sb-wire")
	s.Env = map[string]string{"GREETING": "hello world", "TOKEN": "s3cret-value"}
	s.WorkDir = "/srv"
	s.Timeout = 90 * time.Minute
	s.CPUs, s.Memory = 1, 3<<30
	s.Files = map[string][]byte{"/srv/conf/app.json": []byte(`{"a":1}`), "/srv/run.sh": []byte("#!/bin/sh\necho hi\n")}
	sb, err := p.Create(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(t.Context(), sb.ID)
	got, ok := emu.Sandbox("sb-wire")
	if !ok {
		t.Fatalf("the emulator has no sandbox sb-wire")
	}
	if got.Timeout != 90*time.Minute+time.Second || len(got.Ports) != 1 || got.Ports[0] != 8080 || got.Persistent || got.VCPUs != 2 {
		t.Errorf("timeout %s, ports %v, persistent %v, vcpus %d; want 1h30m1s, 8080, not persistent, 2 vCPUs for 3 GiB", got.Timeout, got.Ports, got.Persistent, got.VCPUs)
	}
	if len(got.Tags) != 5 || got.Tags["agentenv.deployment"] != "dep-91c2" || got.Tags["agentenv.run"] != "run-7f3a" ||
		got.Tags["agentenv.owner"] != "host-1/4242/1733120000" || got.Tags["agentenv.expires"] != "2026-12-02T10:00:00Z" {
		t.Errorf("tags %v, want five: deployment, run, owner, expires and the packed rest", got.Tags)
	}
	if packed := got.Tags["agentenv.labels"]; !strings.Contains(packed, "agentenv.role=gateway") || !strings.Contains(packed, "example.com%2Fteam=infra") ||
		!strings.Contains(packed, "empty=") || !strings.Contains(packed, "agentenv.vercel.cmd=cmd_") || strings.Contains(packed, "agentenv.record") {
		t.Errorf("agentenv.labels = %q, want the role, the user's labels, the empty one and the command, not the record", packed)
	}
	if len(got.Env) != 0 {
		t.Errorf("the create request carried an environment %v; it belongs to the command only", got.Env)
	}
	cmds := emu.Commands()
	if len(cmds) != 1 || strings.Join(cmds[0].Argv, " ") != strings.Join(serve, " ") || cmds[0].Cwd != "/srv" ||
		cmds[0].Env["TOKEN"] != "s3cret-value" || cmds[0].Env["GREETING"] != "hello world" || cmds[0].Sudo {
		t.Errorf("commands %+v, want the spec's command in /srv with its environment, not as root", cmds)
	}
	for name, want := range s.Files {
		if b, err := p.ReadFile(t.Context(), sb.ID, name); err != nil || !bytes.Equal(b, want) {
			t.Errorf("ReadFile(%s) = %q, %v; want %q written before the command", name, b, err, want)
		}
	}
	if sb.ID != "sb-wire" || sb.Name != "sb-wire" || sb.Endpoints["8080"] == "" || sb.Endpoints["8080"] != got.Routes[8080] {
		t.Errorf("sandbox %+v, want the name as id and the port's route", sb)
	}
	for k, v := range s.Labels {
		if sb.Labels[k] != v {
			t.Errorf("label %s = %q, want %q", k, sb.Labels[k], v)
		}
	}
	if _, ok := sb.Labels["agentenv.vercel.cmd"]; ok {
		t.Errorf("the provider's own command label leaked into the labels: %v", sb.Labels)
	}
	resp, err := http.Get(sb.Endpoints["8080"] + "/")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Errorf("GET the route = %v, %v", resp, err)
	} else {
		resp.Body.Close()
	}
}

func TestLabelsTooLongForATagCreateNothing(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, vercel.Config{}, nil)
	s := spec("sb-long")
	s.Labels["note"] = strings.Repeat("x", vercel.MaxTagValue)
	if _, err := p.Create(t.Context(), s); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "agentenv.labels") {
		t.Errorf("Create with labels too long for a tag = %v, want ErrInvalid naming the tag", err)
	}
	if emu.Calls("create") != 0 {
		t.Errorf("a create reached the API")
	}
}

func TestListByDeploymentFiltersOnTheTagAndReadsEveryPage(t *testing.T) {
	emu := emulator(t)
	emu.StartDelay = 0
	p := newProvider(t, emu, vercel.Config{}, nil)
	var ids []string
	t.Cleanup(func() {
		for _, id := range ids {
			p.Terminate(context.Background(), id)
		}
	})
	for i := range 105 {
		s := spec(fmt.Sprintf("sb-page-%03d", i))
		s.Command = nil
		if i%2 == 0 {
			s.Labels[agentenv.LabelDeployment] = "dep-even"
		}
		sb, err := p.Create(t.Context(), s)
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, sb.ID)
	}
	before := emu.Calls("list")
	all, err := p.List(t.Context(), nil)
	if err != nil || len(all) != 105 {
		t.Errorf("List(nil) = %d sandboxes, %v; want 105 over two pages", len(all), err)
	}
	if n := emu.Calls("list") - before; n != 2 {
		t.Errorf("List(nil) made %d list requests, want 2 pages", n)
	}
	even, err := p.List(t.Context(), map[string]string{agentenv.LabelDeployment: "dep-even"})
	if err != nil || len(even) != 53 {
		t.Errorf("List(deployment) = %d, %v; want 53", len(even), err)
	}
	two, err := p.List(t.Context(), map[string]string{agentenv.LabelDeployment: "dep-even", agentenv.LabelRun: "r1"})
	if err != nil || len(two) != 53 {
		t.Errorf("List(deployment, run) = %d, %v; want 53", len(two), err)
	}
	one, err := p.List(t.Context(), map[string]string{agentenv.LabelRecord: "sb-page-004", agentenv.LabelDeployment: "dep-even"})
	if err != nil || len(one) != 1 || one[0].ID != "sb-page-004" {
		t.Errorf("List(record, deployment) = %v, %v; want sb-page-004", one, err)
	}
}

func TestListIgnoresSandboxesAgentenvDidNotMake(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, vercel.Config{}, nil)
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, emu.URL()+"/v3/sandboxes?teamId="+team,
		strings.NewReader(`{"projectId":"`+project+`","name":"someone-elses","timeout":60000,"tags":{"env":"prod"}}`))
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("create a sandbox by hand = %v, %v", resp, err)
	}
	resp.Body.Close()
	defer p.Terminate(context.Background(), "someone-elses")
	for _, labels := range []map[string]string{nil, {agentenv.LabelRecord: "someone-elses"}} {
		if sbs, err := p.List(t.Context(), labels); err != nil || len(sbs) != 0 {
			t.Errorf("List(%v) = %v, %v; want nothing: it is not agentenv's", labels, sbs, err)
		}
	}
}

func TestBadInputCreatesNothing(t *testing.T) {
	emu := emulator(t)
	var logs bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))

	noToken, err := vercel.New(vercel.Config{APIURL: emu.URL()}, logger)
	if err != nil {
		t.Fatal(err)
	}
	_, err = noToken.Create(t.Context(), spec("sb-notoken"))
	for _, want := range []string{"provider.vercel.token", "VERCEL_TOKEN", "VERCEL_TEAM_ID", "VERCEL_PROJECT_ID", "VERCEL_OIDC_TOKEN"} {
		if !errors.Is(err, agentenv.ErrUnavailable) || !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), want) {
			t.Errorf("Create without credentials = %v, want ErrInvalid and ErrUnavailable naming %s", err, want)
		}
	}
	noTeam, _ := vercel.New(vercel.Config{APIURL: emu.URL(), Token: token, ProjectID: project}, logger)
	if _, err := noTeam.Create(t.Context(), spec("sb-noteam")); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "no team id") {
		t.Errorf("Create without a team = %v, want ErrInvalid saying the team id is missing", err)
	}
	for name, err := range map[string]error{
		"Terminate": noToken.Terminate(t.Context(), "ix"),
		"List":      func() error { _, err := noToken.List(t.Context(), nil); return err }(),
		"Get":       func() error { _, err := noToken.Get(t.Context(), "ix"); return err }(),
		"CreateVM":  func() error { _, err := noToken.CreateVM(t.Context(), spec("vm-notoken")); return err }(),
		"Exec":      func() error { _, err := noToken.Exec(t.Context(), "ix", []string{"true"}); return err }(),
	} {
		if !errors.Is(err, agentenv.ErrUnavailable) && !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("%s without credentials = %v, want ErrUnavailable or ErrInvalid", name, err)
		}
	}
	if n := emu.Calls("create") + emu.Calls("list") + emu.Calls("get"); n != 0 {
		t.Errorf("%d calls without credentials reached the API", n)
	}

	wrongToken := newProvider(t, emu, vercel.Config{Token: "wrong", TeamID: team, ProjectID: project}, logger)
	if _, err := wrongToken.Create(t.Context(), spec("sb-wrongtoken")); !errors.Is(err, agentenv.ErrUnavailable) || !strings.Contains(err.Error(), "401") {
		t.Errorf("Create with a wrong token = %v, want ErrUnavailable (401)", err)
	}
	wrongTeam := newProvider(t, emu, vercel.Config{Token: token, TeamID: "team_other", ProjectID: project}, logger)
	if _, err := wrongTeam.Create(t.Context(), spec("sb-wrongteam")); !errors.Is(err, agentenv.ErrUnavailable) || !strings.Contains(err.Error(), "403") {
		t.Errorf("Create in another team = %v, want ErrUnavailable (403)", err)
	}

	p := newProvider(t, emu, vercel.Config{}, logger)
	unknown := spec("sb-unknown")
	unknown.Image = "no-such-image"
	if _, err := p.Create(t.Context(), unknown); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "no-such-image") {
		t.Errorf("Create from an unknown image = %v, want ErrInvalid naming it", err)
	}
	if _, err := p.CreateVM(t.Context(), spec("vm-noimage")); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "provider.vercel.vm_image") {
		t.Errorf("CreateVM with no VM image = %v, want ErrInvalid naming provider.vercel.vm_image", err)
	}
	lowPort := spec("sb-port")
	lowPort.Ports = []int{80}
	manyPorts := spec("sb-ports")
	for i := range 16 {
		manyPorts.Ports = append(manyPorts.Ports, 3000+i)
	}
	relFile := spec("sb-file")
	relFile.Files = map[string][]byte{"etc/x": []byte("x")}
	network := spec("sb-net")
	network.Network = "net-1"
	huge := spec("sb-huge")
	huge.CPUs = 64
	badName := spec("Bad Name!")
	badName.Labels[agentenv.LabelRecord] = "Bad Name!"
	for name, s := range map[string]agentenv.SandboxSpec{"a privileged port": lowPort, "16 ports": manyPorts, "a relative file": relFile,
		"a network": network, "64 CPUs": huge, "a bad name": badName} {
		if _, err := p.Create(t.Context(), s); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("Create with %s = %v, want ErrInvalid", name, err)
		}
	}
	if _, err := vercel.New(vercel.Config{Config: cloudapi.Config{Rate: -1}}, nil); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("New with a negative rate = %v, want ErrInvalid", err)
	}
	if n := len(emu.Made()); n != 0 {
		t.Errorf("%d sandboxes made by refused creates, want 0", n)
	}
	if strings.Contains(logs.String(), token) {
		t.Errorf("the token was logged")
	}
}

func TestOIDCTokenNamesTheTeamAndProject(t *testing.T) {
	claims := base64.RawURLEncoding.EncodeToString([]byte(`{"owner_id":"` + team + `","project_id":"` + project + `","exp":9999999999}`))
	jwt := "eyJhbGciOiJSUzI1NiJ9." + claims + ".c2lnbmF0dXJl"
	emu := vercelemu.Start(jwt, team, project)
	defer emu.Close()
	p, err := vercel.New(vercel.Config{APIURL: emu.URL(), Token: jwt, Config: cloudapi.Config{Rate: 1000}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := p.Create(t.Context(), spec("sb-oidc"))
	if err != nil {
		t.Fatalf("Create with an OIDC token = %v", err)
	}
	if err := p.Terminate(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if loc := p.Location(); !strings.Contains(loc, team) || !strings.Contains(loc, project) {
		t.Errorf("Location() = %q, want the team and project from the token", loc)
	}
}

func TestTerminateCountsGoneAsTerminated(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, vercel.Config{}, nil)
	sb, err := p.Create(t.Context(), spec("sb-term"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Terminate(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	// Deleted, and never made (404 both): terminated.
	for _, id := range []string{sb.ID, "sb-never-made"} {
		if err := p.Terminate(t.Context(), id); err != nil {
			t.Errorf("Terminate(%s) again = %v, want nil", id, err)
		}
		if _, err := p.Get(t.Context(), id); !errors.Is(err, agentenv.ErrNotFound) {
			t.Errorf("Get(%s) = %v, want ErrNotFound", id, err)
		}
	}
	if _, ok := emu.Sandbox(sb.ID); ok {
		t.Errorf("the sandbox is still held after Terminate: it must be deleted, not only stopped")
	}

	// A sandbox stopped on its own (its timeout) is deleted by Terminate too.
	expired, err := p.Create(t.Context(), spec("sb-expired"))
	if err != nil {
		t.Fatal(err)
	}
	emu.Expire(expired.ID)
	if _, err := p.Get(t.Context(), expired.ID); !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("Get of a stopped sandbox = %v, want ErrGone", err)
	}
	if err := p.Terminate(t.Context(), expired.ID); err != nil {
		t.Errorf("Terminate of a stopped sandbox = %v", err)
	}
	if _, ok := emu.Sandbox(expired.ID); ok {
		t.Errorf("a stopped sandbox is still held after Terminate")
	}

	emu.SetKillFault(http.StatusInternalServerError, 1)
	sb2, err := p.Create(t.Context(), spec("sb-term2"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Terminate(t.Context(), sb2.ID); err == nil {
		t.Errorf("Terminate with a failing stop = nil, want the error")
	}
	if got := emu.Running(); len(got) != 1 {
		t.Errorf("running %v after a failed terminate, want the sandbox", got)
	}
	if err := p.Terminate(t.Context(), sb2.ID); err != nil {
		t.Errorf("Terminate once the fault is over = %v", err)
	}
}

func TestTerminateWaitsOutAStoppingSession(t *testing.T) {
	emu := emulator(t)
	emu.StopDelay = 300 * time.Millisecond
	p := newProvider(t, emu, vercel.Config{}, nil)
	sb, err := p.Create(t.Context(), spec("sb-slowstop"))
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Terminate(t.Context(), sb.ID); err != nil {
		t.Fatalf("Terminate while the session stops = %v", err)
	}
	if emu.Calls("delete") < 2 {
		t.Errorf("%d deletes, want the one refused while stopping (422) and the one after", emu.Calls("delete"))
	}
	if _, ok := emu.Sandbox(sb.ID); ok {
		t.Errorf("the sandbox is still held")
	}
}

func TestTimeoutStopsTheSandbox(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, vercel.Config{}, nil)
	s := spec("sb-timeout")
	s.Timeout = time.Second // sent as 2 s: the backstop is never shorter than asked
	sb, err := p.Create(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := emu.Sandbox(sb.ID); got.Timeout != 2*time.Second {
		t.Errorf("timeout sent %s, want 2s", got.Timeout)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(emu.Running()) != 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if _, err := p.Get(t.Context(), sb.ID); !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("Get past the timeout = %v, want ErrGone", err)
	}
	sbs, err := p.List(t.Context(), map[string]string{agentenv.LabelRecord: "sb-timeout"})
	if err != nil || len(sbs) != 1 || sbs[0].State != agentenv.SandboxExited || len(sbs[0].Endpoints) != 0 {
		t.Errorf("List past the timeout = %+v, %v; want it exited, with no endpoints", sbs, err)
	}
	if err := p.Terminate(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
}

func TestTimeoutIsCappedAtTheMaximum(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, vercel.Config{Config: cloudapi.Config{MaxTimeout: 45 * time.Minute}}, nil)
	s := spec("sb-cap")
	s.Expires = time.Now().Add(10 * time.Hour)
	sb, err := p.Create(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(t.Context(), sb.ID)
	if got, _ := emu.Sandbox(sb.ID); got.Timeout != 45*time.Minute {
		t.Errorf("timeout sent %s, want the 45m cap", got.Timeout)
	}
}

func TestExecAndFiles(t *testing.T) {
	emu := emulator(t)
	p := newProvider(t, emu, vercel.Config{}, nil)
	s := spec("sb-exec")
	s.Command = nil // a sandbox with no command of its own runs until terminated
	sb, err := p.Create(t.Context(), s)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(t.Context(), sb.ID)
	if got, err := p.Get(t.Context(), sb.ID); err != nil || got.State != agentenv.SandboxRunning {
		t.Errorf("Get of a sandbox with no command = %+v, %v; want it running", got, err)
	}
	res, err := p.Exec(t.Context(), sb.ID, []string{"/bin/sh", "-c", "exit 7"})
	if err != nil || res.ExitCode != 7 {
		t.Errorf("Exec = %+v, %v; want exit 7", res, err)
	}
	if _, err := p.Exec(t.Context(), "sb-absent", []string{"true"}); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Exec in a sandbox that does not exist = %v, want ErrNotFound", err)
	}
	if err := p.WriteFile(t.Context(), sb.ID, "relative/path", []byte("x")); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("WriteFile to a relative path = %v, want ErrInvalid", err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16)
	if err := p.WriteFile(t.Context(), sb.ID, "/var/data/big.bin", big); err != nil {
		t.Fatal(err)
	}
	if got, err := p.ReadFile(t.Context(), sb.ID, "/var/data/big.bin"); err != nil || !bytes.Equal(got, big) {
		t.Errorf("ReadFile of 1 MiB = %d bytes, %v", len(got), err)
	}
	emu.Expire(sb.ID)
	if _, err := p.Exec(t.Context(), sb.ID, []string{"true"}); !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("Exec in a stopped sandbox = %v, want ErrGone", err)
	}
}

func TestCreateVMStartsDockerAndCarriesTheMode(t *testing.T) {
	emu := emulator(t)
	emu.AddImage("agentenv-docker")
	p := newProvider(t, emu, vercel.Config{VMImage: "agentenv-docker"}, nil)
	vm, err := p.CreateVM(t.Context(), spec("vm-one"))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := emu.Sandbox(vm.ID)
	if got.Image != "agentenv-docker" || !strings.Contains(got.Tags["agentenv.labels"], "agentenv.vercel.mode=vm") {
		t.Errorf("vm sandbox %+v, want the VM image and the vm mode in the tags", got)
	}
	var sawDocker bool
	for _, c := range emu.Commands() {
		if c.Sandbox == vm.ID && c.Sudo && strings.Contains(strings.Join(c.Argv, " "), "docker info") {
			sawDocker = true
		}
	}
	if !sawDocker {
		t.Errorf("CreateVM did not wait for the VM's docker engine as root: %+v", emu.Commands())
	}
	if _, ok := vm.Labels["agentenv.vercel.mode"]; ok {
		t.Errorf("the provider's own mode label leaked into the sandbox's labels: %v", vm.Labels)
	}
	if sbs, err := p.List(t.Context(), map[string]string{agentenv.LabelRecord: "vm-one"}); err != nil || len(sbs) != 1 || sbs[0].ID != vm.ID {
		t.Errorf("List(vm record) = %v, %v; want the VM", sbs, err)
	}
	plain, err := p.Create(t.Context(), spec("sb-plain"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.RunInVM(t.Context(), plain.ID, agentenv.SandboxSpec{Name: "x", Image: "img"}); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("RunInVM in a sandbox that is not a VM = %v, want ErrInvalid", err)
	}
	for _, id := range []string{vm.ID, plain.ID} {
		if err := p.Terminate(t.Context(), id); err != nil {
			t.Fatal(err)
		}
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
