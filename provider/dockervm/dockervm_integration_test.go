//go:build integration

package dockervm_test

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/envproto/envtest"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/provider/dockervm"
	"github.com/agentenv/agentenv/provider/providertest"
	"github.com/agentenv/agentenv/spec"
)

// testLabel marks everything these tests make, so leftovers are checked by it alone.
const testLabel = "agentenv.test.dockervm"

func newProvider(t *testing.T) *dockervm.Provider {
	t.Helper()
	p, err := dockervm.New(dockervm.Config{}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// TestConformance runs the provider suite; each sandbox is a VM whose one container is the
// suite's workload, loaded into the VM's engine from the host's.
func TestConformance(t *testing.T) {
	cli := dockertest.Require(t)
	image := dockertest.TestImage(t)
	labels := map[string]string{testLabel: providertest.NewID()}
	dockertest.CheckNoLeftovers(t, cli, labels)
	providertest.Run(t, func(t *testing.T) agentenv.Provider { return newProvider(t) }, providertest.Options{
		Image:       image,
		Command:     []string{"serve", ":8080"},
		Port:        8080,
		ExitCommand: []string{"exit", "3"},
		ExecCommand: []string{"/agentenv", "exit", "3"},
		ExitCode:    3,
		Labels:      labels,
		Wait:        60 * time.Second,
	})
}

func TestBadInputCreatesNothing(t *testing.T) {
	cli := dockertest.Require(t)
	id := providertest.NewID()
	labels := map[string]string{testLabel: id}
	dockertest.CheckNoLeftovers(t, cli, labels)
	p := newProvider(t)
	l := map[string]string{agentenv.LabelRecord: id, testLabel: id}
	_, err := p.Create(t.Context(), agentenv.SandboxSpec{Name: id, Image: "agentenv-no-such-image:x", Labels: l})
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "agentenv-no-such-image") {
		t.Errorf("Create with an unknown image = %v, want ErrInvalid naming it", err)
	}
	bad, err := dockervm.New(dockervm.Config{Image: "agentenv-no-such-dind:x"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := bad.CreateVM(t.Context(), agentenv.SandboxSpec{Name: id, Labels: l}); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("CreateVM with an unknown dind image = %v, want ErrInvalid", err)
	}
}

// TestVMModeDeployOfKV deploys the kv example in VM mode through package deploy: the VM is a
// DinD container, the images are saved from the host and loaded into it, the server and the
// gateway run inside on the stack network, and the gateway is reached from here through a slot.
func TestVMModeDeployOfKV(t *testing.T) {
	cli := dockertest.Require(t)
	runtime, _ := dockertest.RuntimeImage(t)
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"docker_vm": newProvider(t)}})
	if err != nil {
		t.Fatal(err)
	}
	d := deploy.New(mgr, nil)
	env, err := spec.Parse("kv.yaml", []byte(fmt.Sprintf(`name: kv
servers:
  - name: kv
    image: %[1]s
    command: [/agentenv, serve, kv, --listen, ":8080"]
    port: 8080
gateway:
  image: %[1]s
`, runtime)))
	if err != nil {
		t.Fatal(err)
	}

	id := fmt.Sprintf("dep-tvm%x", time.Now().UnixNano()&0xffffff)
	dockertest.CheckNoLeftovers(t, cli, map[string]string{agentenv.LabelDeployment: id})
	res, err := d.Deploy(t.Context(), env, deploy.Options{Provider: "docker_vm", Name: id, Budget: 3 * time.Minute})
	if err != nil {
		t.Fatalf("Deploy: %v", err)
	}
	if res.Doc.Mode != deploy.ModeVM || len(res.Records) != 1 {
		t.Errorf("mode %s, records %v; want vm with one VM record", res.Doc.Mode, res.Records)
	}
	cs := envtest.Connect(t, res.GatewayURL, res.Token)
	if _, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "set", Arguments: map[string]any{"key": "a", "value": "1"}}); err != nil {
		t.Errorf("call set through the gateway: %v", err)
	}
	got, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: "get", Arguments: map[string]any{"key": "a"}})
	if err != nil || got.IsError || !strings.Contains(fmt.Sprint(got.Content[0].(*mcp.TextContent).Text), "1") {
		t.Errorf("get a = %+v, %v; want 1", got, err)
	}
	cs.Close()
	rc, err := d.Teardown(t.Context(), id)
	if err != nil || !rc.Clean() || rc.Count(agentenv.OutcomeTerminated) != 1 {
		t.Errorf("Teardown = %+v, %v; want one terminated", rc, err)
	}
	left, err := dockertest.Leftovers(context.Background(), cli, map[string]string{agentenv.LabelDeployment: id})
	if err != nil || len(left) != 0 {
		t.Errorf("left after teardown: %v %v", left, err)
	}

	// A deploy cancelled once its VM exists (the first progress event) leaves nothing.
	cid := id + "c"
	dockertest.CheckNoLeftovers(t, cli, map[string]string{agentenv.LabelDeployment: cid})
	ctx, cancel := context.WithCancel(t.Context())
	_, err = d.Deploy(ctx, env, deploy.Options{Provider: "docker_vm", Name: cid, Budget: 3 * time.Minute,
		Progress: func(e deploy.Event) {
			if e.Phase == "created" && e.Component == "kv" {
				cancel()
			}
		}})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled Deploy = %v, want context.Canceled", err)
	}
	if left, _ := dockertest.Leftovers(context.Background(), cli, map[string]string{agentenv.LabelDeployment: cid}); len(left) != 0 {
		t.Errorf("left after a cancelled deploy: %v", left)
	}
}

// inVM lists the containers of the VM whose engine container is vm, by name.
func inVM(t *testing.T, vm string) []string {
	t.Helper()
	out, err := exec.Command("docker", "exec", vm, "docker", "ps", "-a", "--format", "{{.Names}}").Output()
	if err != nil {
		t.Fatalf("list the vm's containers: %v", err)
	}
	names := strings.Fields(string(out))
	slices.Sort(names)
	return names
}

// TestTwoEnvsShareACallersVM: notes and kv deployed --into one docker_vm VM are both ready,
// each under names of its own on a network of its own; a third deploy whose process stops
// dead mid-deploy (its owner a pid that does not run, as after kill -9) leaves in_vm records
// that gc collects, removing exactly that deploy's containers; the teardown of notes leaves kv
// working, and the VM stays until its own teardown.
func TestTwoEnvsShareACallersVM(t *testing.T) {
	cli := dockertest.Require(t)
	runtime, _ := dockertest.RuntimeImage(t)
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	providers := map[string]agentenv.Provider{"docker_vm": newProvider(t)}
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: providers})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mgr.Close)
	d := deploy.New(mgr, nil)
	kvEnv, err := spec.Parse("kv.yaml", []byte(fmt.Sprintf("name: kv\nservers:\n  - name: kv\n    image: %[1]s\n    command: [/agentenv, serve, kv, --listen, \":8080\"]\n    port: 8080\ngateway:\n  image: %[1]s\n", runtime)))
	if err != nil {
		t.Fatal(err)
	}
	notesEnv, err := spec.Parse("notes.yaml", []byte(fmt.Sprintf(`name: notes
servers:
  - name: notes
    image: %[1]s
    command: [/agentenv, serve, notes, --listen, ":8080"]
    port: 8080
    database: true
    ready_timeout: 60s
service_db: {}
gateway:
  image: %[1]s
`, runtime)))
	if err != nil {
		t.Fatal(err)
	}

	run := fmt.Sprintf("run-tvm%x", time.Now().UnixNano()&0xffffff)
	dockertest.CheckNoLeftovers(t, cli, map[string]string{agentenv.LabelRun: run})
	vm, vsb, err := mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "docker_vm", Kind: agentenv.KindVM, Run: run})
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.TeardownIDs(context.Background(), vm.ID) //nolint:errcheck // checked at the end
	into := deploy.Options{Provider: "docker_vm", Mode: deploy.ModeVM, Into: vm.ID, Budget: 4 * time.Minute}

	kv, err := d.Deploy(t.Context(), kvEnv, into)
	if err != nil {
		t.Fatalf("deploy kv --into: %v", err)
	}
	notes, err := d.Deploy(t.Context(), notesEnv, into)
	if err != nil {
		t.Fatalf("deploy notes --into the same vm: %v", err)
	}
	kvc := envtest.Connect(t, kv.GatewayURL, kv.Token)
	envtest.Call(t, kvc, "set", map[string]any{"key": "a", "value": "1"})
	nc := envtest.Connect(t, notes.GatewayURL, notes.Token)
	envtest.Call(t, nc, "add_note", map[string]any{"title": "t", "body": "b"})
	nc.Close()
	both := inVM(t, vsb.ID)
	if want := len(kv.Doc.InVM) + len(notes.Doc.InVM); len(both) != want {
		t.Fatalf("the vm runs %v, want the %d components of both", both, want)
	}

	// A deploy that stops dead once its kv server is ready, with the identity of a process
	// that does not run.
	self, err := lifecycle.CurrentOwner()
	if err != nil {
		t.Fatal(err)
	}
	deadMgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: providers, Owner: agentenv.Owner{Host: self.Host, PID: 1 << 30, Start: 7}})
	if err != nil {
		t.Fatal(err)
	}
	crashed, release := make(chan struct{}), make(chan struct{})
	dctx, stop := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := deploy.New(deadMgr, nil).Deploy(dctx, kvEnv, deploy.Options{Provider: "docker_vm", Mode: deploy.ModeVM, Into: vm.ID, Budget: 4 * time.Minute,
			Progress: func(e deploy.Event) {
				if e.Component == "kv" && e.Phase == "ready" {
					close(crashed)
					<-release
				}
			}})
		done <- err
	}()
	select {
	case <-crashed:
	case err := <-done:
		t.Fatalf("the deploy to crash ended first: %v", err)
	case <-time.After(4 * time.Minute):
		t.Fatal("the deploy to crash never got its kv server ready")
	}
	withCrashed := inVM(t, vsb.ID)
	if len(withCrashed) != len(both)+1 {
		t.Fatalf("with the crashed deploy the vm runs %v, want %d", withCrashed, len(both)+1)
	}
	rep, err := mgr.GC(t.Context(), lifecycle.GCOptions{})
	if err != nil || !rep.Clean() || len(rep.Actions) != 1 {
		t.Errorf("gc = %+v, %v; want the crashed deploy's one container collected", rep, err)
	}
	if got := inVM(t, vsb.ID); !slices.Equal(got, both) {
		t.Errorf("after gc the vm runs %v, want %v (the two live deployments')", got, both)
	}
	stop()
	close(release)
	<-done
	deadMgr.Close()

	// The teardown of notes leaves kv working and the VM running.
	rc, err := d.Teardown(t.Context(), notes.Doc.ID)
	if err != nil || !rc.Clean() || rc.Count(agentenv.OutcomeTerminated) != len(notes.Doc.InVM) {
		t.Errorf("teardown notes = %+v, %v; want %d terminated", rc, err, len(notes.Doc.InVM))
	}
	if got, want := inVM(t, vsb.ID), slices.Sorted(slices.Values(kv.Doc.InVM)); !slices.Equal(got, want) {
		t.Errorf("after the notes teardown the vm runs %v, want kv's %v", got, want)
	}
	envtest.Call(t, kvc, "get", map[string]any{"key": "a"})
	kvc.Close()
	if _, err := d.Teardown(t.Context(), kv.Doc.ID); err != nil {
		t.Error(err)
	}
	if got := inVM(t, vsb.ID); len(got) != 0 {
		t.Errorf("after both teardowns the vm runs %v", got)
	}
	if rc, err := mgr.TeardownIDs(t.Context(), vm.ID); err != nil || !rc.Clean() {
		t.Errorf("teardown of the vm = %+v, %v", rc, err)
	}
}
