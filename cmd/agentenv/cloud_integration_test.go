//go:build integration

package main_test

import (
	"context"
	"encoding/json"
	"net/http"
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
	c.deployCallTeardown(t, "modal", "container", func() []string { return emu.Running() })
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
	c.deployCallTeardown(t, "e2b", "vm", func() []string { return emu.Running() })
}

// deployCallTeardown deploys the kv env on provider with `env deploy`, lists the tools through
// its gateway with a real MCP client, tears it down with `env teardown`, and checks that the
// backend runs nothing and the ledger holds nothing short of gone.
func (c *cli) deployCallTeardown(t *testing.T, provider, mode string, running func() []string) {
	t.Helper()
	r := c.run(t.Context(), nil, "env", "deploy", c.kvEnvFile(), "--provider", provider, "--json")
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
		if err != nil || len(tools.Tools) == 0 {
			t.Errorf("tools/list through the gateway = %v, %v; want the kv tools", tools, err)
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
