//go:build integration

package tenki_test

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
	"github.com/agentenv/agentenv/provider/tenki"
	"github.com/agentenv/agentenv/provider/tenki/tenkiemu"
)

// vmImage is the Tenki registry image the emulator backs with DinD VMs.
const vmImage = "agentenv/docker:1"

// TestVMModeDeployOfNotes deploys examples/notes in VM mode on tenki against the emulator, the
// VM's session a DinD VM: the stack runs inside, the gateway is reached at its preview URL, a
// tool is called with a real MCP client, a command reads a large stdin in a container of the
// stack, and the teardown leaves nothing. Then the deploy is cancelled at each of its progress
// events in turn, and each leaves nothing.
func TestVMModeDeployOfNotes(t *testing.T) {
	start := time.Now()
	cli := dockertest.Require(t)
	runtime, _ := dockertest.RuntimeImage(t)
	env := deploytest.Example(t, "notes", runtime)
	labels := map[string]string{"agentenv.test.tenkivm": providertest.NewID()}
	dockertest.CheckNoLeftovers(t, cli, labels)
	host, err := emuvm.New(emuvm.Config{Labels: labels, InMemory: true, Preload: []string{runtime, env.ServiceDB.Image, env.ServiceDB.WebUI.Image}},
		slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := host.Close(context.Background()); err != nil {
			t.Errorf("close the vm host: %v", err)
		}
	})
	emu := emulator(t)
	emu.StartDelay = 0
	emu.SetVMBackend(tenkiemu.DinD(host), vmImage)
	t.Cleanup(func() {
		if errs := emu.VMErrors(); len(errs) != 0 {
			t.Errorf("vm removals failed: %v", errs)
		}
	})
	p := newProvider(t, emu, tenki.Config{VMImage: vmImage}, nil)
	led, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"tenki": p}})
	if err != nil {
		t.Fatal(err)
	}
	d := deploy.New(mgr, nil)
	gone := func(t *testing.T, id string) {
		t.Helper()
		for _, sid := range emu.Running() {
			if s, ok := emu.Session(sid); ok && s.Metadata[agentenv.LabelDeployment] == id {
				t.Errorf("session %s of %s still runs on the emulator", sid, id)
			}
		}
		recs, err := led.List(context.Background(), agentenv.Filter{Deployment: id})
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			if rec.State != agentenv.StateGone {
				t.Errorf("record %s (%s) is %s, want gone", rec.ID, rec.Kind, rec.State)
			}
		}
		if left, err := dockertest.Leftovers(context.Background(), cli, map[string]string{agentenv.LabelDeployment: id}); err != nil || len(left) != 0 {
			t.Errorf("left on the engine: %v %v", left, err)
		}
	}

	// The budget covers the DinD template's first load of the preloaded images, minutes on a
	// loaded machine.
	id := fmt.Sprintf("dep-tk%x", time.Now().UnixNano()&0xffffff)
	res, events := deploytest.Deploy(t, d, env, deploy.Options{Provider: "tenki", Name: id, Budget: 6 * time.Minute})
	if res.Doc.Mode != deploy.ModeVM || len(res.Records) != 1 {
		t.Errorf("mode %s, records %v; want vm with one VM record", res.Doc.Mode, res.Records)
	}
	if vm, ok := emu.Session(sessionOf(t, led, res.Records[0])); !ok || !strings.HasPrefix(res.GatewayURL, "http://127.0.0.1:") || len(vm.Ports) == 0 {
		t.Errorf("gateway URL %s, VM's exposed ports %v; want a preview URL of a port the VM exposed", res.GatewayURL, vm.Ports)
	}
	cs := envtest.Connect(t, res.GatewayURL, res.Token)
	got, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "add_note", Arguments: map[string]any{"title": "hello", "body": "from tenki"}})
	if err != nil || got.IsError {
		t.Errorf("call add_note through the gateway = %+v, %v", got, err)
	}
	listed, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "list_notes", Arguments: map[string]any{}})
	if err != nil || listed.IsError || len(listed.Content) == 0 || !strings.Contains(listed.Content[0].(*mcp.TextContent).Text, "from tenki") {
		t.Errorf("list_notes = %+v, %v; want the note", listed, err)
	}
	cs.Close()
	vmID := sessionOf(t, led, res.Records[0])
	big := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16) // several stdin frames
	ex, err := p.ExecInVM(t.Context(), vmID, "servicedb", []string{"wc", "-c"}, map[string]string{"X": "y"}, big)
	if err != nil || ex.ExitCode != 0 || strings.TrimSpace(string(ex.Stdout)) != strconv.Itoa(len(big)) {
		t.Errorf("ExecInVM(wc -c) of %d bytes = %q (exit %d, %q), %v", len(big), ex.Stdout, ex.ExitCode, ex.Stderr, err)
	}
	if _, err := p.ExecInVM(t.Context(), vmID, "no-such-container", []string{"true"}, nil, nil); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("ExecInVM in a missing container = %v, want ErrNotFound", err)
	}
	rc, err := d.Teardown(t.Context(), id)
	if err != nil || !rc.Clean() || rc.Count(agentenv.OutcomeTerminated) != 1 {
		t.Errorf("Teardown = %+v, %v; want one terminated", rc, err)
	}
	gone(t, id)
	t.Logf("deploy, call and teardown took %s", time.Since(start))

	deploytest.CancelAtEachEvent(t, d, env, deploy.Options{Provider: "tenki", Budget: 6 * time.Minute}, events,
		func(t *testing.T, k int) string { return fmt.Sprintf("%sc%02d", id, k) }, gone)
	if left := emu.Running(); len(left) != 0 {
		t.Errorf("the emulator runs %v after the cancelled deploys", left)
	}
	t.Logf("whole test %s", time.Since(start))
}

// sessionOf is the session id the ledger holds for record.
func sessionOf(t *testing.T, led agentenv.Ledger, record string) string {
	t.Helper()
	rec, err := led.Get(t.Context(), record)
	if err != nil {
		t.Fatal(err)
	}
	return rec.SandboxID
}
