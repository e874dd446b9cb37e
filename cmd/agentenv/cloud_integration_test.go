//go:build integration

package main_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/deploy/deploytest"
	"github.com/agentenv/agentenv/envproto/envtest"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/provider/e2b/e2bemu"
	"github.com/agentenv/agentenv/provider/modal/modalemu"
	"github.com/agentenv/agentenv/provider/providertest"
)

// The cloud providers through the CLI a user types, against the emulators in the repository
// (this machine reaches neither Modal nor E2B): the configuration keys and environment a user
// sets point the providers at them, and a deploy, a tool call and a teardown leave nothing.

func TestEnvDeployOnModalThroughTheCLI(t *testing.T) {
	t.Parallel()
	c, emu := modalCLI(t)
	c.deployCallTeardown(t, "modal", "container", c.kvEnvFile(), "get", emu.Running)
}

func TestEnvDeployOnE2BThroughTheCLI(t *testing.T) {
	t.Parallel()
	c, emu := e2bCLI(t)
	// With a stdio server too: the bridge's binary goes into the VM through envd's file upload.
	c.deployCallTeardown(t, "e2b", "vm", c.kvStdioEnvFile(), "kv-stdio__get", emu.Running)
}

// The seeds' killed process, on the clouds: env deploy is killed at random moments, and gc,
// from the ledger and the provider's listing by label, leaves nothing running.
func TestEnvDeployOnModalSIGKILLThenGC(t *testing.T) {
	t.Parallel()
	c, emu := modalCLI(t)
	c.killDeploysThenGC(t, "modal", 6, 1500*time.Millisecond, emu.Running)
}

func TestEnvDeployOnE2BSIGKILLThenGC(t *testing.T) {
	t.Parallel()
	c, emu := e2bCLI(t)
	c.killDeploysThenGC(t, "e2b", 6, 4*time.Second, emu.Running)
}

// modalCLI is a CLI pointed at a Modal emulator whose sandboxes are containers on this engine,
// with a region set for container mode. The test fails if the emulator runs a sandbox at its end.
func modalCLI(t *testing.T) (*cli, *modalemu.Server) {
	t.Helper()
	c := newCLI(t)
	emu, err := modalemu.StartWith(modalemu.Options{Docker: c.dc})
	if err != nil {
		t.Fatal(err)
	}
	dockertest.CheckNoLeftovers(t, c.dc, emu.Labels())
	providertest.CloseAtEnd(t, emu)
	c.env = append(c.env, "MODAL_SERVER_URL="+emu.URL(), "MODAL_TOKEN_ID=ak-cli", "MODAL_TOKEN_SECRET=as-cli",
		"AGENTENV_PROVIDER_MODAL_REGION=us-east-1")
	return c, emu
}

// e2bCLI is a CLI pointed at an E2B emulator whose Docker-template sandboxes are DinD VMs
// holding this checkout's runtime image. The test fails if the emulator runs a sandbox at its
// end.
func e2bCLI(t *testing.T) (*cli, *e2bemu.Server) {
	t.Helper()
	return dindCLI(t, func(vms emuvm.Backend) (*e2bemu.Server, []string) {
		emu := e2bemu.Start("e2b-cli-key")
		emu.SetVMBackend(vms)
		return emu, []string{"E2B_API_KEY=e2b-cli-key", "AGENTENV_PROVIDER_E2B_API_URL=" + emu.URL(),
			"AGENTENV_PROVIDER_E2B_SANDBOX_URL=" + emu.URL() + "/sandbox/{id}/{port}"}
	})
}

// dindCLI is a CLI pointed at a cloud's emulator whose Docker-capable sandboxes are DinD VMs
// holding this checkout's runtime image: start starts the emulator with vms behind them and
// returns it with the environment a user sets to point the provider at it. The test fails if
// the emulator runs a sandbox at its end. A cloud provider's CLI tests are then its dindCLI
// and the cases below: deployCallTeardown, killDeploysThenGC, withoutKeyFallsToDocker.
func dindCLI[E providertest.Emulator](t *testing.T, start func(vms emuvm.Backend) (E, []string)) (*cli, E) {
	t.Helper()
	c := newCLI(t)
	runtime, _ := dockertest.RuntimeImage(t)
	host := deploytest.VMHost(t, map[string]string{"agentenv-test": c.tag}, nil, runtime)
	emu, env := start(emuvm.DinD(host))
	providertest.CloseAtEnd(t, emu)
	c.env = append(c.env, env...)
	return c, emu
}

// withoutKeyFallsToDocker runs `env deploy --provider PROVIDER,docker` of the kv env with the
// key variable keyVar empty, and checks that the chain moved on to docker, said so, and made
// nothing on provider; then tears the deployment down.
func (c *cli) withoutKeyFallsToDocker(t *testing.T, provider, keyVar string) {
	t.Helper()
	c.env = append(c.env, keyVar+"=")
	chain := provider + ",docker"
	r := c.run(t.Context(), nil, "env", "deploy", c.kvEnvFile(), "--provider", chain, "--json")
	if r.code != 0 {
		t.Fatalf("env deploy --provider %s: exit %d\n%s%s", chain, r.code, r.stdout, r.stderr)
	}
	var out struct{ ID, Provider, Mode string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.ID == "" {
		t.Fatalf("env deploy --json = %s (%v)", r.stdout, err)
	}
	if out.Provider != "docker" {
		t.Errorf("deployed on %q, want docker after %s without a key", out.Provider, provider)
	}
	if !strings.Contains(r.stderr, "failed="+provider+" next=docker") {
		t.Errorf("stderr does not say the chain moved on from %s:\n%s", provider, r.stderr)
	}
	ls := c.run(t.Context(), nil, "ledger", "ls", "--json")
	var recs []struct{ ID, Provider, State string }
	if err := json.Unmarshal([]byte(ls.stdout), &recs); err != nil {
		t.Fatalf("ledger ls --json: %v\n%s", err, ls.stdout)
	}
	for _, rec := range recs {
		if rec.Provider == provider && rec.State != "gone" {
			t.Errorf("record %s on %s is %s, want nothing made there", rec.ID, provider, rec.State)
		}
	}
	if td := c.run(t.Context(), nil, "env", "teardown", out.ID); td.code != 0 {
		t.Errorf("env teardown: exit %d\n%s%s", td.code, td.stdout, td.stderr)
	}
}

// killDeploysThenGC runs `env deploy` of the kv env on provider n times, each killed (SIGKILL)
// at a random moment within max, tears down the deploys that finished first, runs gc (again
// while it reports creates in flight), and checks that the backend runs nothing and the ledger
// holds nothing short of gone. The create timeout is cut to 20 s: gc leaves a dead creator's
// create alone that long, since it may still be in flight at the provider.
func (c *cli) killDeploysThenGC(t *testing.T, provider string, n int, max time.Duration, running func() []string) {
	t.Helper()
	c.env = append(c.env, "AGENTENV_LIFECYCLE_CREATE_TIMEOUT=20s")
	finished, _ := c.signalledCmd(n, syscall.SIGKILL, 0, max, deploymentLine, "env", "deploy", c.kvEnvFile(), "--provider", provider)
	t.Logf("%d of %d deploys on %s finished before SIGKILL", len(finished), n, provider)
	for _, id := range finished {
		c.run(t.Context(), nil, "env", "teardown", id)
	}
	c.gcUntilSettled(t)
	// A deploy killed between its hand-over and its print is live by design: the user's (here
	// the test's) to tear down.
	var docs []struct{ ID, State string }
	ls := c.run(t.Context(), nil, "env", "ls", "--json")
	if err := json.Unmarshal([]byte(ls.stdout), &docs); err != nil {
		t.Fatalf("env ls --json: %v\n%s", err, ls.stdout)
	}
	for _, d := range docs {
		if d.State == "live" {
			c.run(t.Context(), nil, "env", "teardown", d.ID)
		}
	}
	if left := running(); len(left) != 0 {
		t.Errorf("after SIGKILLs and gc the %s emulator runs %v", provider, left)
	}
	var recs []struct{ ID, State, Error string }
	out := c.run(t.Context(), nil, "ledger", "ls", "--json")
	if err := json.Unmarshal([]byte(out.stdout), &recs); err != nil {
		t.Fatalf("ledger ls --json: %v\n%s", err, out.stdout)
	}
	for _, rec := range recs {
		if rec.State != "gone" {
			t.Errorf("after SIGKILLs and gc, record %s is %s (%s)", rec.ID, rec.State, rec.Error)
		}
	}
}

// deployCallTeardown deploys the env file on provider with `env deploy`, lists the tools through
// its gateway with a real MCP client (tool must be among them), tears it down with `env
// teardown`, and checks that the backend runs nothing and the ledger holds nothing short of gone.
func (c *cli) deployCallTeardown(t *testing.T, provider, mode, envFile, tool string, running func() []string) {
	t.Helper()
	r := c.run(t.Context(), nil, "env", "deploy", envFile, "--provider", provider, "--json")
	if r.code != 0 {
		t.Fatalf("env deploy --provider %s: exit %d\n%s%s", provider, r.code, r.stdout, r.stderr)
	}
	var out struct {
		ID         string `json:"id"`
		Mode       string `json:"mode"`
		GatewayURL string `json:"gateway_url"`
		Token      string `json:"token"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.ID == "" || out.GatewayURL == "" || out.Token == "" {
		t.Fatalf("env deploy --json = %s (%v), want id, gateway_url and token", r.stdout, err)
	}
	if out.Mode != "" && out.Mode != mode {
		t.Errorf("deployed in %s mode, want %s", out.Mode, mode)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: "cli-test", Version: "v1"}, nil)
	cs, err := client.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: out.GatewayURL, HTTPClient: &http.Client{Transport: envtest.Bearer(out.Token)}, MaxRetries: -1,
	}, nil)
	if err != nil {
		t.Errorf("connect to the gateway at %s: %v", out.GatewayURL, err)
	} else {
		tools, err := cs.ListTools(t.Context(), nil)
		var names []string
		if err == nil {
			for _, tl := range tools.Tools {
				names = append(names, tl.Name)
			}
		}
		if !slices.Contains(names, tool) {
			t.Errorf("tools/list through the gateway = %v, %v; want %s among them", names, err, tool)
		}
		cs.Close()
	}
	td := c.run(t.Context(), nil, "env", "teardown", out.ID)
	if td.code != 0 || !strings.Contains(td.stdout, "terminated") {
		t.Errorf("env teardown: exit %d\n%s%s", td.code, td.stdout, td.stderr)
	}
	noFalseWarnings(t, td.stdout+td.stderr)
	if left := running(); len(left) != 0 {
		t.Errorf("after the teardown the %s emulator runs %v", provider, left)
	}
	ls := c.run(t.Context(), nil, "ledger", "ls", "--json")
	var recs []struct{ ID, State string }
	if err := json.Unmarshal([]byte(ls.stdout), &recs); err != nil {
		t.Fatalf("ledger ls --json: %v\n%s", err, ls.stdout)
	}
	for _, rec := range recs {
		if rec.State != "gone" {
			t.Errorf("record %s is %s after the teardown", rec.ID, rec.State)
		}
	}
}

// kvStdioEnvFile writes an env of two kv servers, one over HTTP and one over stdio behind the
// bridge, with this checkout's runtime image, and returns its path.
func (c *cli) kvStdioEnvFile() string {
	c.t.Helper()
	runtime, _ := dockertest.RuntimeImage(c.t)
	p := filepath.Join(c.t.TempDir(), "env.yaml")
	y := fmt.Sprintf(`name: kv-stdio
servers:
  - name: kv
    image: %[1]s
    command: [/agentenv, serve, kv, --listen, ":8080"]
    port: 8080
  - name: kv-stdio
    image: %[1]s
    transport: stdio
    command: [/agentenv, serve, kv, --stdio]
gateway:
  image: %[1]s
  tool_names: prefix
`, runtime)
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		c.t.Fatal(err)
	}
	return p
}
