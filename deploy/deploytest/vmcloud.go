package deploytest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/envproto/envtest"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/provider/providertest"
	"github.com/agentenv/agentenv/spec"
)

// VMCloud is a cloud provider in VM mode with its emulator, each Docker-capable sandbox of the
// emulator a real DinD VM (package emuvm), as VMModeOfNotes drives them.
type VMCloud struct {
	// Provider is the provider pointed at the emulator; it runs containers in its VMs.
	Provider interface {
		agentenv.Provider
		agentenv.VMExecer
	}
	// Emulator is the emulator: the sandboxes it still runs, and Close.
	Emulator providertest.Emulator
	// Labels returns the labels the emulator holds of sandbox id (metadata, tags, ...).
	Labels func(id string) map[string]string
	// VMErrors returns the emulator's failed VM removals.
	VMErrors func() []error
	// PortURL is how every URL of a sandbox's port through the emulator's proxy begins.
	PortURL string
}

// VMKit is what a cloud provider gives VMModeOfNotes and DinDCloud.
type VMKit struct {
	Name  string // the provider's name ("e2b"), in the manager and in the note the test writes
	Short string // a few letters for deployment ids ("e2b", "tl")
	// EveryEvent cancels the deploy at each of its progress events, not only at VMEvents: one
	// cloud's test does, for the stack inside the VM that every cloud shares.
	EveryEvent bool
	TestLabel  string // the label key marking what the test makes on the engine ("agentenv.test.e2bvm")
	// Start starts the emulator with vms behind its Docker-capable sandboxes (an E2B template,
	// a Tensorlake image) and a provider on it. DinDCloud closes the emulator at the test's end.
	Start func(t *testing.T, vms emuvm.Backend) VMCloud
}

// ReadyWait bounds the start of a test VM's inner engine. The integration tier starts several
// nested engines at once on a two-core machine, where one takes a minute, emuvm's default
// bound; the tests check deploys, not how fast an engine starts.
const ReadyWait = 4 * time.Minute

// SlowReady gives env's service DB and servers ReadyWait to answer instead of their minute (the
// gateway's wait follows the slowest server's). Inside a nested VM, on a two-core machine
// running the whole integration tier, PostgreSQL alone has taken more than a minute to accept a
// query; these tests check deploys and cancels, not how fast a database starts.
func SlowReady(env *spec.Env) {
	env.ServiceDB.ReadyTimeout = ReadyWait
	for i := range env.Servers {
		env.Servers[i].ReadyTimeout = ReadyWait
	}
}

// VMHost starts an emuvm host whose VMs carry labels and whose template engine holds preload,
// and removes it when the test ends.
func VMHost(t *testing.T, labels map[string]string, logger *slog.Logger, preload ...string) *emuvm.Host {
	t.Helper()
	host, err := emuvm.New(emuvm.Config{Labels: labels, InMemory: true, Preload: preload, ReadyWait: ReadyWait}, logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := host.Close(context.Background()); err != nil {
			t.Errorf("close the vm host: %v", err)
		}
	})
	// The template is the rig's, not the deploy's: built here, its minutes on a loaded machine
	// are not taken from the first deploy's budget or its provider's create timeout.
	start := time.Now()
	if err := host.Prepare(t.Context()); err != nil {
		t.Fatal(err)
	}
	t.Logf("vm template ready in %s", time.Since(start).Round(time.Millisecond))
	return host
}

// DinDCloud starts kit's emulator with a DinD VM behind each Docker-capable sandbox, the
// template's engine holding preload, and a provider on it. When the test ends it fails if the
// emulator still runs a sandbox, a VM removal failed, or anything is left on the engine.
func DinDCloud(t *testing.T, kit VMKit, preload ...string) VMCloud {
	t.Helper()
	cli := dockertest.Require(t)
	labels := map[string]string{kit.TestLabel: providertest.NewID()}
	dockertest.CheckNoLeftovers(t, cli, labels)
	host := VMHost(t, labels, slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug})), preload...)
	c := kit.Start(t, emuvm.DinD(host))
	t.Cleanup(func() {
		if errs := c.VMErrors(); len(errs) != 0 {
			t.Errorf("vm removals failed: %v", errs)
		}
	})
	providertest.CloseAtEnd(t, c.Emulator)
	return c
}

// vmBudget bounds each deploy of VMModeOfNotes. The first also loads the DinD template's
// preloaded images, which takes minutes on a loaded machine.
const vmBudget = 6 * time.Minute

// VMModeOfNotes deploys examples/notes in VM mode on kit's provider against its emulator, each
// sandbox of the Docker-capable template a DinD VM whose engine holds the env's images:
// PostgreSQL, the notes server, adminer, db-mcp and the gateway run inside, the gateway is
// reached through the emulator's port proxy, a tool is called with a real MCP client, a command
// with a large stdin runs in a container of the stack, and the teardown leaves nothing. Then the
// same deploy is cancelled at each of VMEvents (kit.EveryEvent: each of its progress events) in
// turn, and each leaves nothing.
func VMModeOfNotes(t *testing.T, kit VMKit) {
	start := time.Now()
	runtime, _ := dockertest.RuntimeImage(t)
	env := Example(t, "notes", runtime)
	SlowReady(env)
	// The cloud's template for this env is built with its images.
	c := DinDCloud(t, kit, runtime, env.ServiceDB.Image, env.ServiceDB.WebUI.Image)
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{kit.Name: c.Provider}})
	if err != nil {
		t.Fatal(err)
	}
	d := deploy.New(mgr, nil)

	// checkGone checks that nothing of deployment id is left: no sandbox of it runs on the
	// emulator, no ledger record is short of gone, and nothing labelled with it is on the engine.
	checkGone := func(t *testing.T, id string) {
		t.Helper()
		for _, sid := range c.Emulator.Running() {
			if c.Labels(sid)[agentenv.LabelDeployment] == id {
				t.Errorf("sandbox %s of %s still runs on the emulator", sid, id)
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
		cli := dockertest.Require(t)
		if left, err := dockertest.Leftovers(context.Background(), cli, map[string]string{agentenv.LabelDeployment: id}); err != nil || len(left) != 0 {
			t.Errorf("left on the engine: %v %v", left, err)
		}
	}

	id := fmt.Sprintf("dep-t%s%x", kit.Short, time.Now().UnixNano()&0xffffff)
	// agentenv's own image pinned where no VM reaches, with a login: the VM's engine tries the
	// pull (the login written into the VM and removed), and each component of it runs the
	// image as named, which the template holds, as its progress says.
	pin := "127.0.0.1:9/agentenv/unreachable@sha256:" + strings.Repeat("0", 64)
	pinned := deploy.Options{Provider: kit.Name, Budget: vmBudget,
		Pinned: map[string]string{runtime: pin},
		Logins: func(context.Context, string) *agentenv.RegistryAuth {
			return &agentenv.RegistryAuth{Username: "u", Password: "p"}
		}}
	var mu sync.Mutex
	var imageNotes []string
	opts := pinned
	opts.Name = id
	opts.Progress = func(e deploy.Event) {
		if e.Phase == "image" {
			mu.Lock()
			defer mu.Unlock()
			imageNotes = append(imageNotes, e.Component+": "+e.Detail)
		}
	}
	res, events := Deploy(t, d, env, opts)
	mu.Lock()
	for _, n := range imageNotes {
		if !strings.Contains(n, "pull of "+pin+" failed (") || !strings.HasSuffix(n, "); uploading "+runtime+" from this host") {
			t.Errorf("image note %q: want the pull of %s failed and %s run instead", n, pin, runtime)
		}
	}
	if len(imageNotes) != 3 {
		t.Errorf("image notes %q: want one for each component of %s (notes, db-mcp, the gateway)", imageNotes, runtime)
	}
	mu.Unlock()
	if res.Doc.Mode != deploy.ModeVM || len(res.Records) != 1 {
		t.Errorf("mode %s, records %v; want vm with one VM record", res.Doc.Mode, res.Records)
	}
	if !strings.HasPrefix(res.GatewayURL, c.PortURL) {
		t.Errorf("gateway URL %s, want one through the emulator's port proxy", res.GatewayURL)
	}
	note := "from " + kit.Name
	cs := envtest.Connect(t, res.GatewayURL, res.Token)
	got, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "add_note", Arguments: map[string]any{"title": "hello", "body": note}})
	if err != nil || got.IsError {
		t.Errorf("call add_note through the gateway = %+v, %v", got, err)
	}
	listed, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "list_notes", Arguments: map[string]any{}})
	if err != nil || listed.IsError || len(listed.Content) == 0 || !strings.Contains(listed.Content[0].(*mcp.TextContent).Text, note) {
		t.Errorf("list_notes = %+v, %v; want the note", listed, err)
	}
	cs.Close()
	// A command in a container of the stack, with a stdin larger than one process request
	// carries (as a large seed file would be).
	vm, err := led.Get(t.Context(), res.Records[0])
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte("0123456789abcdef"), 300<<10/16)
	ex, err := c.Provider.ExecInVM(t.Context(), vm.SandboxID, "servicedb", []string{"wc", "-c"}, map[string]string{"X": "y"}, big)
	if err != nil || ex.ExitCode != 0 || strings.TrimSpace(string(ex.Stdout)) != strconv.Itoa(len(big)) {
		t.Errorf("ExecInVM(wc -c) of %d bytes = %q (exit %d, %q), %v", len(big), ex.Stdout, ex.ExitCode, ex.Stderr, err)
	}
	if _, err := c.Provider.ExecInVM(t.Context(), vm.SandboxID, "no-such-container", []string{"true"}, nil, nil); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("ExecInVM in a missing container = %v, want ErrNotFound", err)
	}
	rc, err := d.Teardown(t.Context(), id)
	if err != nil || !rc.Clean() || rc.Count(agentenv.OutcomeTerminated) != 1 {
		t.Errorf("Teardown = %+v, %v; want one terminated", rc, err)
	}
	checkGone(t, id)
	if left := c.Emulator.Running(); len(left) != 0 {
		t.Errorf("the emulator runs %v after the teardown", left)
	}
	t.Logf("deploy, call and teardown took %s", time.Since(start))

	// Cancelled at the k-th progress event, for every k of VMEvents (or every k at all): each
	// leaves nothing. They pin the image as the first did, so that they report the same events
	// (the failed pulls among them) and a cancel can land during a pull.
	at := VMEvents(events)
	if kit.EveryEvent {
		at = everyEvent(events)
	}
	CancelAtEvents(t, d, env, pinned, events, at,
		func(t *testing.T, k int) string { return fmt.Sprintf("%sc%02d", id, k) }, checkGone)
	if left := c.Emulator.Running(); len(left) != 0 {
		t.Errorf("the emulator runs %v after the cancelled deploys", left)
	}
	t.Logf("whole test %s", time.Since(start))
}
