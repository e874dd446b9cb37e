//go:build integration

package dockervm_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/internal/dockertest"
	"github.com/agentenv/agentenv/internal/envtest"
	"github.com/agentenv/agentenv/ledger/sqlite"
	"github.com/agentenv/agentenv/lifecycle"
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
	led, err := sqlite.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.db"), nil)
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
