//go:build integration

package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv/agent"
)

// TestHarborTaskWithA2AAgent runs a Harbor task (testdata/harbor/a2a-terminal, built from
// ubuntu:24.04 mapped to the local Debian image) with the JS A2A agent on this host: the agent
// is handed the task's container as MCP tools through the episode's gateway (the tools step),
// runs the instruction with run_command, and the task's tests score 1 (they also need the
// agent's ATIF trajectory in the container, /logs/agent/trajectory.json); the step's trajectory
// has the call and its result, and the gateway's trajectory the call as it reached the tools. The build image is
// removed after, and nothing the run made is left.
func TestHarborTaskWithA2AAgent(t *testing.T) {
	c := newHarborCLI(t)
	port, out := hostJSAgent(t)

	dir, err := filepath.Abs("testdata/harbor/a2a-terminal")
	if err != nil {
		t.Fatal(err)
	}
	rctx, rcancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer rcancel()
	r := c.run(rctx, nil, "run", dir, "--agent", "a2a", "--agent-url", fmt.Sprintf("http://127.0.0.1:%d", port),
		"--provider", "docker")
	if r.code != 0 || !strings.Contains(r.stdout, "score 1") {
		t.Fatalf("run: exit %d\n%s%s\nagent:\n%s", r.code, r.stdout, r.stderr, out.String())
	}
	t.Logf("run:\n%s", r.stdout)
	run := regexp.MustCompile(`run-[0-9A-Za-z_-]+`).FindString(r.stdout)
	if run == "" {
		t.Fatalf("no run id in:\n%s", r.stdout)
	}
	g := c.run(t.Context(), nil, "runs", "get", run, "--json")
	if g.code != 0 {
		t.Fatalf("runs get %s: exit %d\n%s%s", run, g.code, g.stdout, g.stderr)
	}
	var got struct {
		Attrs map[string]string `json:"attrs"`
		Steps []struct {
			ID      string            `json:"id"`
			Outputs map[string]string `json:"outputs"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(g.stdout), &got); err != nil {
		t.Fatalf("runs get %s --json: %v\n%s", run, err, g.stdout)
	}
	path := ""
	for _, s := range got.Steps {
		if s.ID == "agent" {
			path = s.Outputs["trajectory"]
		}
	}
	if path == "" {
		t.Fatalf("runs get %s shows no trajectory of the agent step:\n%s", run, g.stdout)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var call, result bool
	for _, l := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var line agent.Line
		if err := json.Unmarshal([]byte(l), &line); err != nil {
			t.Fatalf("trajectory line %q: %v", l, err)
		}
		if line.Tool != "run_command" {
			continue
		}
		switch line.Kind {
		case agent.KindToolCall:
			call = call || strings.Contains(string(line.Arguments), "echo done \\u003e /app/out.txt")
		case agent.KindToolResult:
			result = result || strings.Contains(line.Text, "exit code: 0") && strings.Contains(line.Text, "wrote /app/out.txt")
		}
	}
	if !call || !result {
		t.Errorf("the trajectory lacks the run_command call (%v) or its result (%v):\n%s", call, result, data)
	}
	gw, err := os.ReadFile(got.Attrs["gateway_trajectory.tools"])
	if err != nil {
		t.Fatalf("the tools step's gateway trajectory (attrs %v): %v", got.Attrs, err)
	}
	if !strings.Contains(string(gw), `"tool":"run_command"`) || !strings.Contains(string(gw), "/app/out.txt") {
		t.Errorf("the gateway trajectory lacks the run_command call:\n%s", gw)
	}
	c.noRunLeftovers(r.stdout)
}
