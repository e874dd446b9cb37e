//go:build integration

package tensorlake_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/deploy/deploytest"
	"github.com/agentenv/agentenv/internal/dockertest"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/internal/envtest"
	"github.com/agentenv/agentenv/ledger/sqlite"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/providertest"
	"github.com/agentenv/agentenv/provider/tensorlake"
	"github.com/agentenv/agentenv/provider/tensorlake/tensorlakeemu"
	envspec "github.com/agentenv/agentenv/spec"
)

// vmImage is the Docker-capable sandbox image the emulator backs with DinD VMs.
const vmImage = "agentenv-docker"

// vmTestLabel marks everything these tests make on the engine (the template volume included).
const vmTestLabel = "agentenv.test.tlvm"

// vmRig is the emulator with its DinD backend, a tensorlake provider on it, a lifecycle manager
// and a deployer, and the notes env with this checkout's runtime image.
type vmRig struct {
	p   *tensorlake.Provider
	emu *tensorlakeemu.Server
	led agentenv.Ledger
	d   *deploy.Deployer
	env *envspec.Env
}

func newVMRig(t *testing.T) *vmRig {
	t.Helper()
	runtime, _ := dockertest.RuntimeImage(t)
	env := deploytest.Example(t, "notes", runtime)
	// The Tensorlake VM image for this env is built with its images.
	emu, p := dindEmulator(t, runtime, env.ServiceDB.Image, env.ServiceDB.WebUI.Image)
	led, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"tensorlake": p}})
	if err != nil {
		t.Fatal(err)
	}
	return &vmRig{emu: emu, p: p, led: led, d: deploy.New(mgr, nil), env: env}
}

// dindEmulator starts the emulator with a DinD VM behind each sandbox of the VM image,
// the template's engine holding preload, and a tensorlake provider on it. When the test ends it fails
// if the emulator still runs a sandbox, a VM removal failed, or anything is left on the engine.
func dindEmulator(t *testing.T, preload ...string) (*tensorlakeemu.Server, *tensorlake.Provider) {
	t.Helper()
	cli := dockertest.Require(t)
	labels := map[string]string{vmTestLabel: providertest.NewID()}
	dockertest.CheckNoLeftovers(t, cli, labels)
	host, err := emuvm.New(emuvm.Config{Labels: labels, InMemory: true, Preload: preload},
		slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := host.Close(context.Background()); err != nil {
			t.Errorf("close the vm host: %v", err)
		}
	})
	emu := tensorlakeemu.Start(apiKey)
	emu.StartDelay = 0
	emu.SetVMBackend(tensorlakeemu.DinD(host), vmImage)
	t.Cleanup(func() {
		if left := emu.Running(); len(left) != 0 {
			t.Errorf("the emulator still runs %v", left)
		}
		emu.Close()
		if errs := emu.VMErrors(); len(errs) != 0 {
			t.Errorf("vm removals failed: %v", errs)
		}
	})
	p, err := tensorlake.New(tensorlake.Config{APIKey: apiKey, APIURL: emu.URL(), ProxyURL: emu.ProxyURL, PortURL: emu.PortURL, VMImage: vmImage, Rate: 1000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return emu, p
}

// deployment checks that nothing of deployment id is left: no sandbox of it runs on the
// emulator, no ledger record is short of gone, and nothing labelled with it is on the engine.
func (r *vmRig) checkGone(t *testing.T, id string) {
	t.Helper()
	for _, sid := range r.emu.Running() {
		if sb, ok := r.emu.Sandbox(sid); ok && sb.Labels[agentenv.LabelDeployment] == id {
			t.Errorf("sandbox %s of %s still runs on the emulator", sid, id)
		}
	}
	recs, err := r.led.List(context.Background(), agentenv.Filter{Deployment: id})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.State != agentenv.StateGone {
			t.Errorf("record %s (%s) is %s, want gone", rec.ID, rec.Kind, rec.State)
		}
	}
	cli := dockertest.Require(t)
	if left, err := dockertest.Leftovers(context.Background(), cli, map[string]string{agentenv.LabelDeployment: id}); err != nil || len(left) != 0 {
		t.Errorf("left on the engine: %v %v", left, err)
	}
}

// TestVMModeDeployOfNotes deploys examples/notes in VM mode on tensorlake against the emulator, each
// sandbox of the VM image a DinD VM: PostgreSQL, the notes server, adminer, db-mcp and
// the gateway run inside, the gateway is reached through the emulator's port proxy, a tool is
// called with a real MCP client, and the teardown leaves nothing. Then the same deploy is
// cancelled at each of its progress events in turn, and each leaves nothing.
func TestVMModeDeployOfNotes(t *testing.T) {
	start := time.Now()
	r := newVMRig(t)

	id := fmt.Sprintf("dep-ttl%x", time.Now().UnixNano()&0xffffff)
	res, events := deploytest.Deploy(t, r.d, r.env, deploy.Options{Provider: "tensorlake", Name: id, Budget: 3 * time.Minute})
	if res.Doc.Mode != deploy.ModeVM || len(res.Records) != 1 {
		t.Errorf("mode %s, records %v; want vm with one VM record", res.Doc.Mode, res.Records)
	}
	if !strings.HasPrefix(res.GatewayURL, r.emu.URL()+"/port/") {
		t.Errorf("gateway URL %s, want one through the emulator's port proxy", res.GatewayURL)
	}
	cs := envtest.Connect(t, res.GatewayURL, res.Token)
	got, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "add_note", Arguments: map[string]any{"title": "hello", "body": "from tensorlake"}})
	if err != nil || got.IsError {
		t.Errorf("call add_note through the gateway = %+v, %v", got, err)
	}
	listed, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "list_notes", Arguments: map[string]any{}})
	if err != nil || listed.IsError || len(listed.Content) == 0 || !strings.Contains(listed.Content[0].(*mcp.TextContent).Text, "from tensorlake") {
		t.Errorf("list_notes = %+v, %v; want the note", listed, err)
	}
	cs.Close()
	// A command in a container of the stack, with a stdin larger than one process request
	// carries (as a large seed file would be).
	vm, err := r.led.Get(t.Context(), res.Records[0])
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16)
	ex, err := r.p.ExecInVM(t.Context(), vm.SandboxID, "servicedb", []string{"wc", "-c"}, map[string]string{"X": "y"}, big)
	if err != nil || ex.ExitCode != 0 || strings.TrimSpace(string(ex.Stdout)) != strconv.Itoa(len(big)) {
		t.Errorf("ExecInVM(wc -c) of %d bytes = %q (exit %d, %q), %v", len(big), ex.Stdout, ex.ExitCode, ex.Stderr, err)
	}
	if _, err := r.p.ExecInVM(t.Context(), vm.SandboxID, "no-such-container", []string{"true"}, nil, nil); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("ExecInVM in a missing container = %v, want ErrNotFound", err)
	}
	rc, err := r.d.Teardown(t.Context(), id)
	if err != nil || !rc.Clean() || rc.Count(agentenv.OutcomeTerminated) != 1 {
		t.Errorf("Teardown = %+v, %v; want one terminated", rc, err)
	}
	r.checkGone(t, id)
	if left := r.emu.Running(); len(left) != 0 {
		t.Errorf("the emulator runs %v after the teardown", left)
	}
	t.Logf("deploy, call and teardown took %s", time.Since(start))

	// Cancelled at the k-th progress event, for every k: each leaves nothing.
	deploytest.CancelAtEachEvent(t, r.d, r.env, deploy.Options{Provider: "tensorlake", Budget: 3 * time.Minute}, events,
		func(t *testing.T, k int) string { return fmt.Sprintf("%sc%02d", id, k) }, r.checkGone)
	if left := r.emu.Running(); len(left) != 0 {
		t.Errorf("the emulator runs %v after the cancelled deploys", left)
	}
	t.Logf("whole test %s", time.Since(start))
}
