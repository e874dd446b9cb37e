//go:build integration

package modal_test

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/deploy/deploytest"
	"github.com/agentenv/agentenv/envproto/envtest"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/provider/modal"
)

// newVMRig is the emulator with real containers and real VMs (internal/emuvm), a modal_vm
// provider on it, a bbolt ledger and a deployer, and examples/notes with this checkout's
// runtime image. The VMs start with the service DB's and the web UI's images in their engine:
// they stand in for a VM image (provider.modal_vm.image) built with those large, rarely
// changing images baked in. The runtime image is not: every deploy uploads it into its VM.
func newVMRig(t *testing.T) *dockerRig {
	t.Helper()
	cli := dockertest.Require(t)
	runtime, _ := dockertest.RuntimeImage(t)
	env := deploytest.Example(t, "notes", runtime)
	deploytest.SlowReady(env)

	emu, _, _ := dockerEmulator(t, true, env.ServiceDB.Image, env.ServiceDB.WebUI.Image)
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	p, err := modal.NewVM(modal.Config{TokenID: "ak-test", TokenSecret: "as-test", VMImage: emuvm.DefaultImage}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"modal_vm": p}, ReclaimWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return &dockerRig{cli: cli, emu: emu, mgr: mgr, d: deploy.New(mgr, nil), env: env}
}

// TestVMDeployOfNotes deploys examples/notes in VM mode on modal_vm against the emulator, whose
// VM sandbox is a real VM: the runtime image is uploaded into it through exec stdin, PostgreSQL,
// the notes server, adminer, db-mcp and the gateway (with the stdio bridge's files copied in)
// run inside on slot ports, reached through the VM's tunnels. A tool is called through the
// gateway with an MCP client, and the teardown leaves nothing. Then the same deploy is
// cancelled at each of deploytest.VMEvents in turn (the upload of the runtime image among them),
// and each leaves nothing either; e2b's test sweeps every event of the shared stack.
func TestVMDeployOfNotes(t *testing.T) {
	start := time.Now()
	r := newVMRig(t)
	t.Logf("rig ready in %s", time.Since(start).Round(time.Millisecond))

	var events int
	t.Run("deploy", func(t *testing.T) {
		id := r.name(t, "vm")
		var res *deploy.Result
		res, events = deploytest.Deploy(t, r.d, r.env, deploy.Options{Provider: "modal_vm", Name: id, Budget: 3 * time.Minute})
		if res.Doc.Mode != deploy.ModeVM || len(res.Records) != 1 {
			t.Errorf("mode %s, records %v; want vm with one VM record", res.Doc.Mode, res.Records)
		}
		if got := len(r.emu.Running()); got != 1 {
			t.Errorf("the emulator runs %d sandboxes, want 1", got)
		}
		if n := r.emu.Calls("TaskExecStdinWrite"); n == 0 {
			t.Error("nothing was written to an exec's stdin: the runtime image was not uploaded")
		}

		cs := envtest.Connect(t, res.GatewayURL, res.Token)
		envtest.Call(t, cs, "add_note", map[string]any{"title": "vm", "body": "modal_vm never forgets"})
		if got := envtest.Call(t, cs, "search_notes", map[string]any{"query": "forgets"}); !strings.Contains(got, "vm") {
			t.Errorf("search_notes = %s, want the vm note", got)
		}
		cs.Close()

		rc, err := r.d.Teardown(t.Context(), id)
		if err != nil || !rc.Clean() || rc.Count(agentenv.OutcomeTerminated) != 1 {
			t.Errorf("Teardown = %+v, %v; want one terminated", rc, err)
		}
		r.settled(t, id)
		if left := r.emu.Running(); len(left) != 0 {
			t.Errorf("the emulator runs %v after the teardown", left)
		}
	})
	deploytest.CancelAtEvents(t, r.d, r.env, deploy.Options{Provider: "modal_vm", Budget: 3 * time.Minute}, events, deploytest.VMEvents(events),
		func(t *testing.T, k int) string { return r.name(t, fmt.Sprintf("vc%02d", k)) }, r.settled)
	if left := r.emu.Running(); len(left) != 0 {
		t.Errorf("the emulator runs %v after the cancelled deploys", left)
	}
	t.Logf("whole test %s", time.Since(start).Round(time.Millisecond))
}
