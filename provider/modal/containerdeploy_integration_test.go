//go:build integration

package modal_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/deploy/deploytest"
	"github.com/agentenv/agentenv/envproto/envtest"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/provider/modal"
	"github.com/agentenv/agentenv/provider/modal/modalemu"
	envspec "github.com/agentenv/agentenv/spec"
)

// postgresImage is built by images/debian/build.sh postgres (.ci/run does it).
const postgresImage = "agentenv-postgres:local"

// dockerRig is the emulator backed by the local engine, the modal provider pointed at it, a
// bbolt ledger and a deployer over them.
type dockerRig struct {
	cli *client.Client
	emu *modalemu.Server
	mgr *lifecycle.Manager
	d   *deploy.Deployer
	env *envspec.Env
}

func newDockerRig(t *testing.T) *dockerRig {
	t.Helper()
	runtime, _ := dockertest.RuntimeImage(t)
	emu, cli, _ := dockerEmulator(t, false)
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	p := newProvider(t, modal.Config{Region: "us-east-1"})
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"modal": p}, ReclaimWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	env, err := envspec.Parse("notes.yaml", fmt.Appendf(nil, `name: notes
servers:
  - name: notes
    image: %[1]s
    command: [/agentenv, serve, notes, --listen, ":8080"]
    port: 8080
    database: true
    ready_timeout: 30s
service_db:
  image: %[2]s
  web_ui:
    enabled: true
  db_mcp:
    enabled: true
    image: %[1]s
gateway:
  image: %[1]s
  roles:
    reader: ["*create*", "*update*", "*delete*"]
`, runtime, postgresImage))
	if err != nil {
		t.Fatal(err)
	}
	return &dockerRig{cli: cli, emu: emu, mgr: mgr, d: deploy.New(mgr, nil), env: env}
}

// name draws a deployment id and checks, when the test ends, that nothing labelled with it is
// left on the engine.
func (r *dockerRig) name(t *testing.T, prefix string) string {
	id := fmt.Sprintf("dep-%s%x", prefix, rand.Uint32())
	dockertest.CheckNoLeftovers(t, r.cli, map[string]string{agentenv.LabelDeployment: id})
	return id
}

// settled fails t unless deployment id has every record gone, no sandbox of it running in
// the emulator and nothing labelled with it on the engine.
func (r *dockerRig) settled(t *testing.T, id string) {
	t.Helper()
	recs, err := r.mgr.Ledger().List(context.Background(), agentenv.Filter{Deployment: id})
	if err != nil {
		t.Fatal(err)
	}
	running := strings.Join(r.emu.Running(), " ")
	for _, rec := range recs {
		if rec.State != agentenv.StateGone {
			t.Errorf("record %s (%s) is %s, want gone", rec.ID, rec.Role, rec.State)
		}
		if strings.Contains(running, "("+rec.ID+")") {
			t.Errorf("record %s (%s) still runs in the emulator", rec.ID, rec.Role)
		}
	}
	left, err := dockertest.Leftovers(context.Background(), r.cli, map[string]string{agentenv.LabelDeployment: id})
	if err != nil || len(left) != 0 {
		t.Errorf("left on the engine: %v %v", left, err)
	}
}

// TestContainerDeployOfNotes deploys the notes example in container mode on modal, against the
// emulator with real containers: the service DB, the notes server, the DB web UI, db-mcp and
// the gateway each a sandbox on the emulator's i6pn, wired by their private hosts. It calls
// tools through the gateway with an MCP client and tears down. Then it deploys again, cancelled
// at each progress event in turn, and checks each time that nothing of it runs or is left.
func TestContainerDeployOfNotes(t *testing.T) {
	if string(agentenv.RoleServiceDB) != "service_db" {
		t.Fatalf("agentenv.RoleServiceDB = %q; the provider gives the role service_db an unencrypted tunnel", agentenv.RoleServiceDB)
	}
	r := newDockerRig(t)

	var events int
	t.Run("deploy", func(t *testing.T) {
		id := r.name(t, "mn")
		var res *deploy.Result
		res, events = deploytest.Deploy(t, r.d, r.env, deploy.Options{Provider: "modal", Name: id, Budget: 2 * time.Minute})
		if res.Doc.Mode != deploy.ModeContainer || len(res.Records) != 6 {
			t.Errorf("mode %s, records %v; want container with a network and five sandboxes", res.Doc.Mode, res.Records)
		}
		recs, err := r.mgr.Ledger().List(t.Context(), agentenv.Filter{Deployment: id})
		if err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, rec := range recs {
			kinds = append(kinds, string(rec.Kind)+"/"+string(rec.Role))
		}
		slices.Sort(kinds)
		t.Logf("records: %v", kinds)
		if got := len(r.emu.Running()); got != 5 {
			t.Errorf("the emulator runs %d sandboxes, want 5", got)
		}

		cs := envtest.Connect(t, res.GatewayURL, res.Token)
		envtest.Call(t, cs, "add_note", map[string]any{"title": "talk", "body": "agentenv never forgets"})
		if got := envtest.Call(t, cs, "search_notes", map[string]any{"query": "forgets"}); !strings.Contains(got, "talk") {
			t.Errorf("search_notes = %s, want the talk note", got)
		}
		cs.Close()

		rc, err := r.d.Teardown(t.Context(), id)
		if err != nil || !rc.Clean() || rc.Count(agentenv.OutcomeTerminated) != 6 {
			t.Errorf("Teardown = %+v, %v; want six terminated", rc, err)
		}
		r.settled(t, id)
	})
	// A deploy cancelled at each step boundary in turn leaves nothing running and nothing on
	// the engine, and every record gone.
	deploytest.CancelAtEachEvent(t, r.d, r.env, deploy.Options{Provider: "modal", Budget: 2 * time.Minute}, events,
		func(t *testing.T, k int) string { return r.name(t, fmt.Sprintf("mc%02d", k)) }, r.settled)
}

// TestContainerModeBadInputOnDocker: with real containers, an image the engine does not have,
// and a container-mode deploy without a region, fail with ErrInvalid before anything is made.
func TestContainerModeBadInputOnDocker(t *testing.T) {
	r := newDockerRig(t)
	bad := spec("sb-missingimage")
	bad.Image = "agentenv-missing:none"
	if _, err := newProvider(t, modal.Config{Region: "us-east-1"}).Create(t.Context(), bad); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), bad.Image) {
		t.Errorf("Create of an image the engine lacks = %v, want ErrInvalid naming it", err)
	}

	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"modal": newProvider(t, modal.Config{})}})
	if err != nil {
		t.Fatal(err)
	}
	id := r.name(t, "mr")
	_, err = deploy.New(mgr, nil).Deploy(t.Context(), r.env, deploy.Options{Provider: "modal", Name: id, Budget: time.Minute})
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "provider.modal.region") {
		t.Errorf("container-mode Deploy without a region = %v, want ErrInvalid naming provider.modal.region", err)
	}
	if n := r.emu.Calls("SandboxCreate"); n != 0 {
		t.Errorf("SandboxCreate called %d times, want 0", n)
	}
}

// TestEmulatorClosedDuringACreateLeavesNothing: the emulator closed while a sandbox's container
// is being made (a create goes on after its client is gone, as Modal's does) removes that
// container too: nothing of it is on the engine once Close returns, nor a moment later.
func TestEmulatorClosedDuringACreateLeavesNothing(t *testing.T) {
	runtime, _ := dockertest.RuntimeImage(t)
	cli := dockertest.Require(t)
	emu, err := modalemu.StartWith(modalemu.Options{Docker: cli})
	if err != nil {
		t.Fatal(err)
	}
	dockertest.CheckNoLeftovers(t, cli, emu.Labels())
	t.Cleanup(emu.Close)
	t.Setenv("MODAL_SERVER_URL", emu.URL())
	t.Setenv("HOME", t.TempDir())
	t.Setenv("MODAL_SANDBOX_V2", "0")

	id := fmt.Sprintf("close-race-%x", rand.Uint64())
	sp := agentenv.SandboxSpec{Image: runtime, Command: []string{"/agentenv", "serve", "kv", "--listen", ":8080"},
		Ports: []int{8080}, Name: id, Labels: map[string]string{agentenv.LabelRecord: id}}
	created := make(chan error, 1)
	go func() {
		_, err := newProvider(t, modal.Config{Region: "us-east-1"}).Create(context.Background(), sp)
		created <- err
	}()
	// The emulator lists the sandbox once it is reserved, before its container is made.
	for deadline := time.Now().Add(time.Minute); len(emu.Running()) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the emulator did not take the create within a minute")
		}
	}
	emu.Close()
	select {
	case <-created:
	case <-time.After(time.Minute):
		t.Fatal("Create did not return within a minute of the emulator's Close")
	}
	for _, wait := range []time.Duration{0, 2 * time.Second} {
		time.Sleep(wait)
		left, err := dockertest.Leftovers(context.Background(), cli, emu.Labels())
		if err != nil {
			t.Fatal(err)
		}
		if len(left) > 0 {
			t.Fatalf("%v after the emulator's Close returned, the engine has %v", wait, left)
		}
	}
}
