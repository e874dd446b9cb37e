//go:build integration

package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/internal/dockertest"
	"github.com/agentenv/agentenv/internal/emuvm"
	"github.com/agentenv/agentenv/internal/gatewaytest"
	"github.com/agentenv/agentenv/provider/e2b/e2bemu"
	"github.com/agentenv/agentenv/provider/modal/modalemu"
)

// The cloud providers through the CLI a user types, against the emulators in the repository
// (this machine reaches neither Modal nor E2B): the configuration keys and environment a user
// sets point the providers at them, and a deploy, a tool call and a teardown leave nothing.

func TestEnvDeployOnModalThroughTheCLI(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	emu, err := modalemu.StartWith(modalemu.Options{Docker: c.dc})
	if err != nil {
		t.Fatal(err)
	}
	dockertest.CheckNoLeftovers(t, c.dc, emu.Labels())
	t.Cleanup(func() {
		if left := emu.Running(); len(left) != 0 {
			t.Errorf("the emulator still runs %v", left)
		}
		emu.Close()
	})
	c.env = append(c.env, "MODAL_SERVER_URL="+emu.URL(), "MODAL_TOKEN_ID=ak-cli", "MODAL_TOKEN_SECRET=as-cli",
		"AGENTENV_PROVIDER_MODAL_REGION=us-east-1")
	c.deployCallTeardown(t, "modal", "container", c.kvEnvFile(), "get", func() []string { return emu.Running() })
}

func TestEnvDeployOnE2BThroughTheCLI(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	runtime, _ := dockertest.RuntimeImage(t)
	labels := map[string]string{"agentenv-test": c.tag}
	host, err := emuvm.New(emuvm.Config{Labels: labels, InMemory: true, Preload: []string{runtime}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := host.Close(context.Background()); err != nil {
			t.Errorf("close the vm host: %v", err)
		}
	})
	emu := e2bemu.Start("e2b-cli-key")
	emu.SetVMBackend(e2bemu.DinD(host))
	t.Cleanup(func() {
		if left := emu.Running(); len(left) != 0 {
			t.Errorf("the emulator still runs %v", left)
		}
		emu.Close()
	})
	c.env = append(c.env, "E2B_API_KEY=e2b-cli-key", "AGENTENV_PROVIDER_E2B_API_URL="+emu.URL(),
		"AGENTENV_PROVIDER_E2B_SANDBOX_URL="+emu.URL()+"/sandbox/{id}/{port}")
	// With a stdio server too: the bridge's binary goes into the VM through envd's file upload.
	c.deployCallTeardown(t, "e2b", "vm", c.kvStdioEnvFile(), "kv-stdio__get", func() []string { return emu.Running() })
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
		Endpoint: out.GatewayURL, HTTPClient: &http.Client{Transport: gatewaytest.Bearer(out.Token)}, MaxRetries: -1,
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
