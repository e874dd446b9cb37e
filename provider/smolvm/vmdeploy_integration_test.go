//go:build integration

package smolvm_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
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
	"github.com/agentenv/agentenv/provider/smolvm"
	"github.com/agentenv/agentenv/provider/smolvm/smolvmemu"
	envspec "github.com/agentenv/agentenv/spec"
)

// vmTestLabel marks everything these tests make on the engine (the template volume included).
const vmTestLabel = "agentenv.test.smolvm"

// vmRig is the emulator with its DinD backend, a smol_vm provider on it, a lifecycle manager and
// a deployer, and the notes env with this checkout's runtime image.
type vmRig struct {
	p   *smolvm.Provider
	emu *smolvmemu.Server
	led agentenv.Ledger
	d   *deploy.Deployer
	env *envspec.Env
}

func newVMRig(t *testing.T) *vmRig {
	t.Helper()
	runtime, _ := dockertest.RuntimeImage(t)
	env := deploytest.Example(t, "notes", runtime)
	// A smolvm VM pulls nothing here: its engine starts with the env's images, as a machine
	// whose /storage holds them would.
	emu, p := dindEmulator(t, runtime, env.ServiceDB.Image, env.ServiceDB.WebUI.Image)
	led, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"smol_vm": p}})
	if err != nil {
		t.Fatal(err)
	}
	return &vmRig{emu: emu, p: p, led: led, d: deploy.New(mgr, nil), env: env}
}

// dindEmulator starts the emulator with a DinD VM behind each machine with no image, the
// template's engine holding preload, and a smol_vm provider on it. When the test ends it fails
// if a machine is left, a VM removal failed, or anything is left on the engine.
func dindEmulator(t *testing.T, preload ...string) (*smolvmemu.Server, *smolvm.Provider) {
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
	emu := smolvmemu.Start()
	emu.SetVMBackend(emuvm.DinD(host))
	t.Cleanup(func() {
		if left := emu.Running(); len(left) != 0 {
			t.Errorf("the emulator still holds machines %v", left)
		}
		emu.Close()
		if errs := emu.VMErrors(); len(errs) != 0 {
			t.Errorf("vm removals failed: %v", errs)
		}
	})
	p, err := smolvm.New(smolvm.Config{URL: emu.URL()}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return emu, p
}

// checkGone checks that nothing of deployment id is left: no ledger record short of gone, and
// no machine of its records on the emulator.
func (r *vmRig) checkGone(t *testing.T, id string) {
	t.Helper()
	recs, err := r.led.List(context.Background(), agentenv.Filter{Deployment: id})
	if err != nil {
		t.Fatal(err)
	}
	machines := r.emu.Running()
	for _, rec := range recs {
		if rec.State != agentenv.StateGone {
			t.Errorf("record %s (%s) is %s, want gone", rec.ID, rec.Kind, rec.State)
		}
		if slices.Contains(machines, rec.ID) {
			t.Errorf("machine %s of %s is still on the emulator", rec.ID, id)
		}
	}
}

// TestVMModeDeployOfNotes deploys examples/notes in VM mode on smol_vm against the emulator, the
// VM a DinD machine: PostgreSQL, the notes server, adminer, db-mcp and the gateway run inside,
// the service DB and the gateway are reached on host ports the emulator forwards to the VM's
// slots, a tool is called with a real MCP client, and the teardown leaves nothing. Then the
// same deploy is cancelled at each of its progress events in turn, and each leaves nothing.
func TestVMModeDeployOfNotes(t *testing.T) {
	start := time.Now()
	r := newVMRig(t)

	id := fmt.Sprintf("dep-smol%x", time.Now().UnixNano()&0xffffff)
	res, events := deploytest.Deploy(t, r.d, r.env, deploy.Options{Provider: "smol_vm", Name: id, Budget: 3 * time.Minute})
	if res.Doc.Mode != deploy.ModeVM || len(res.Records) != 1 {
		t.Errorf("mode %s, records %v; want vm with one VM record", res.Doc.Mode, res.Records)
	}
	if !strings.HasPrefix(res.GatewayURL, "http://127.0.0.1:") {
		t.Errorf("gateway URL %s, want a port of this host", res.GatewayURL)
	}
	cs := envtest.Connect(t, res.GatewayURL, res.Token)
	got, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "add_note", Arguments: map[string]any{"title": "hello", "body": "from smolvm"}})
	if err != nil || got.IsError {
		t.Errorf("call add_note through the gateway = %+v, %v", got, err)
	}
	listed, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "list_notes", Arguments: map[string]any{}})
	if err != nil || listed.IsError || len(listed.Content) == 0 || !strings.Contains(listed.Content[0].(*mcp.TextContent).Text, "from smolvm") {
		t.Errorf("list_notes = %+v, %v; want the note", listed, err)
	}
	cs.Close()
	vm, err := r.led.Get(t.Context(), res.Records[0])
	if err != nil {
		t.Fatal(err)
	}
	// A command in a container of the stack: stdin as text in the exec request, and as a file
	// when it is not UTF-8.
	for name, in := range map[string][]byte{"text": bytes.Repeat([]byte("0123456789abcdef"), 64<<10/16), "binary": {0xff, 0xfe, 0, 1, 2}} {
		ex, err := r.p.ExecInVM(t.Context(), vm.SandboxID, "servicedb", []string{"wc", "-c"}, map[string]string{"X": "y"}, in)
		if err != nil || ex.ExitCode != 0 || strings.TrimSpace(string(ex.Stdout)) != strconv.Itoa(len(in)) {
			t.Errorf("ExecInVM(wc -c) of %s stdin, %d bytes = %q (exit %d, %q), %v", name, len(in), ex.Stdout, ex.ExitCode, ex.Stderr, err)
		}
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
		t.Errorf("the emulator holds %v after the teardown", left)
	}
	t.Logf("deploy, call and teardown took %s", time.Since(start))

	// Cancelled at the k-th progress event, for every k: each leaves nothing.
	deploytest.CancelAtEachEvent(t, r.d, r.env, deploy.Options{Provider: "smol_vm", Budget: 3 * time.Minute}, events,
		func(t *testing.T, k int) string { return fmt.Sprintf("%sc%02d", id, k) }, r.checkGone)
	if left := r.emu.Running(); len(left) != 0 {
		t.Errorf("the emulator holds %v after the cancelled deploys", left)
	}
	t.Logf("whole test %s", time.Since(start))
}
