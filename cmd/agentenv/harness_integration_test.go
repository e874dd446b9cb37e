//go:build integration

package main_test

import (
	"strings"
	"testing"
)

// TestRunHarnessTask runs examples/notes-task/harness-task.yaml on the real engine: the Node
// harness agent (the official TypeScript MCP client) in a sandbox on the deployment's network
// lists the tools and adds a note through the gateway with the role's token, and the sql
// verifier finds it; nothing is left.
func TestRunHarnessTask(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.buildRuntimeImage()
	r := c.run(t.Context(), nil, "run", "../../examples/notes-task/harness-task.yaml")
	if r.code != 0 || !strings.Contains(r.stdout, "passed: 1 passed") || !strings.Contains(r.stdout, "mean score 1") {
		t.Fatalf("run harness-task: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "task:agent  terminated") {
		t.Errorf("the harness sandbox is not in the teardown receipt:\n%s", r.stdout)
	}
	if left := c.deployLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}
