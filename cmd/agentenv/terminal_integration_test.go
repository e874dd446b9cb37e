//go:build integration

package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv/agent/model/modeltest"
)

// TestRunAgentInSandbox runs, on the real engine, a task whose agents work inside its own
// container (agentenv-debian:bookworm, no env): the built-in model agent, on the scripted
// model server, writes the answer with run_command, a command past its timeout is stopped
// inside the container too (no sleep is left there), and a harness (a bash one-liner) run in
// the same sandbox writes its own file from the prompt; the verifiers see both, and nothing
// is left.
func TestRunAgentInSandbox(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	srv := modeltest.New(t,
		modeltest.Reply{Calls: []modeltest.Call{{ID: "c1", Name: "run_command", Args: `{"command":"mkdir -p /tmp/work && echo 42 > /tmp/work/answer.txt && echo $0"}`}}},
		modeltest.Reply{Calls: []modeltest.Call{{ID: "c2", Name: "run_command", Args: `{"command":"echo started; sleep 61","timeout_sec":2}`}}},
		modeltest.Reply{Calls: []modeltest.Call{{ID: "c3", Name: "run_command", Args: `{"command":"for p in /proc/[0-9]*; do tr '\\0' ' ' < $p/cmdline; echo; done | grep -c '^sleep 61' || true"}`}}},
		modeltest.Reply{Text: "done"},
	)
	dir := t.TempDir()
	file := filepath.Join(dir, "term.yaml")
	os.WriteFile(file, []byte(`name: term
steps:
  - {id: sb, type: deploy_sandbox, image: "agentenv-debian:bookworm", command: [sleep, infinity]}
  - id: agent
    type: prompt_agent
    sandbox: sb
    agent: openai
    prompt: write 42 to /tmp/work/answer.txt
    timeout_seconds: 90
  - {id: answer, type: command_succeeds, sandbox: sb, command: [grep, -qx, "42", /tmp/work/answer.txt]}
  - id: harness
    type: prompt_agent
    sandbox: sb
    prompt: the harness was here
    agent: {harness: {command: [bash, -c, 'cat "$AGENTENV_PROMPT_FILE" > /tmp/work/harness.txt && echo ok']}}
  - {id: harnessed, type: file_contains, sandbox: sb, path: /tmp/work/harness.txt, contains: "the harness was here"}
`), 0o600)
	start := time.Now()
	r := c.run(t.Context(), []string{"AGENTENV_MODEL_BASE_URL=" + srv.OpenAIURL(), "AGENTENV_MODEL_NAME=m"}, "run", file, "--provider", "docker")
	if r.code != 0 || !strings.Contains(r.stdout, "passed: 1 passed") {
		t.Fatalf("run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if took := time.Since(start); took > 60*time.Second {
		t.Errorf("the run took %s: the 2s command was not stopped", took)
	}
	reqs := srv.Requests()
	if len(reqs) != 4 {
		t.Fatalf("the model saw %d requests, want 4", len(reqs))
	}
	results := map[string]string{}
	msgs, _ := reqs[3].Body["messages"].([]any)
	for _, m := range msgs {
		m, _ := m.(map[string]any)
		if id, ok := m["tool_call_id"].(string); ok {
			results[id], _ = m["content"].(string)
		}
	}
	for id, want := range map[string]string{
		"c1": "exit code: 0\nstdout:\nbash\n",
		"c2": "timed out after 2s: the command was stopped\nexit code: 124\nstdout:\nstarted\n",
		"c3": "exit code: 0\nstdout:\n0\n",
	} {
		if !strings.Contains(results[id], want) {
			t.Errorf("result of %s = %q, want it to hold %q", id, results[id], want)
		}
	}
	if left := c.sandboxLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}
