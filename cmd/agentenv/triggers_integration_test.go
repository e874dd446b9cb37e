//go:build integration

package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunTriggersTask runs examples/triggers-task on the real engine: the kv env behind its
// gateway, the virtual clock armed, a trigger on the scripted agent's write that holds the call,
// mirrors an email, disables delete for the agent's role and appends the email to the result;
// kv's config extension reached through /svc/kv/; graded on the gateway trajectory.
func TestRunTriggersTask(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.buildRuntimeImage()
	r := c.run(t.Context(), nil, "run", "../../examples/triggers-task")
	if r.code != 0 || !strings.Contains(r.stdout, "passed: 1 passed") || !strings.Contains(r.stdout, "mean score 1") {
		t.Fatalf("run triggers-task: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	noFalseWarnings(t, r.stdout)
	if left := c.deployLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
	// The gateway trajectory kept with the run holds what the verifier graded.
	files, _ := filepath.Glob(filepath.Join(c.state, "agentenv", "runs", "*", "env.gateway.ndjson"))
	if len(files) != 1 {
		t.Fatalf("want one kept gateway trajectory, found %v", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"via":"trigger","role":"mailer"`, `"tool":"tools/disable"`, `New email from Dana`, `"tool":"svc/kv/agentenv/ext/set_config"`, `"virtual_time":"2026-01-05T09:00:00Z"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("gateway trajectory lacks %s:\n%s", want, b)
		}
	}
}
