package task_test

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/agent/model/modeltest"
	"github.com/agentenv/agentenv/task"
)

// stepOf returns the record of step id in ep.
func stepOf(ep task.Episode, id string) agentenv.StepRecord {
	for _, s := range ep.Steps {
		if s.ID == id {
			return s
		}
	}
	return agentenv.StepRecord{}
}

// TestModelAgentInSandbox runs the built-in model agent (the scripted model server, on each
// API) in a deploy_sandbox step's sandbox on the process provider, with no env: it writes the
// answer file with run_command, reads it back, and a command stopped by its timeout comes back
// as such; the verifiers see the file, and the trajectory has each call.
func TestModelAgentInSandbox(t *testing.T) {
	for _, tc := range []struct{ kind, base string }{{task.AgentOpenAI, "/v1"}, {task.AgentAnthropic, "/"}} {
		t.Run(tc.kind, func(t *testing.T) {
			model := modeltest.New(t,
				addNoteCall("c1", "run_command", `{"command":"mkdir -p out && echo 42 > out/answer.txt && echo wrote"}`),
				addNoteCall("c2", "read_file", `{"path":"out/answer.txt"}`),
				addNoteCall("c3", "run_command", `{"command":"echo before; sleep 30","timeout_sec":1}`),
				modeltest.Reply{Text: "The answer is in out/answer.txt.", InputTokens: 10, OutputTokens: 5},
			)
			r := newRig(t, nil)
			r.runner.Model = modelSettings{"model.base_url": model.URL + tc.base, "model.name": "m"}
			tk := mustParse(t, "t.yaml", `name: term
steps:
- {id: sb, type: deploy_sandbox, provider: process}
- {id: agent, type: prompt_agent, sandbox: sb, agent: `+tc.kind+`, prompt: "write 42 to out/answer.txt", timeout_seconds: 60}
- {id: file, type: file_contains, sandbox: sb, path: out/answer.txt, contains: "42"}
- {id: cmd, type: command_succeeds, sandbox: sb, command: [grep, -qx, "42", out/answer.txt]}
`)
			start := time.Now()
			sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("the run took %s: the command's 1s timeout did not stop it", took)
			}
			ep := sum.Episodes[0]
			ag := stepOf(ep, "agent")
			if ep.Outcome != task.OutcomePassed || ep.Score == nil || *ep.Score != 1 {
				t.Fatalf("episode %s score %v error %q; agent step %+v", ep.Outcome, ep.Score, ep.Error, ag)
			}
			if ag.Outputs["tool_calls"] != "3" || ag.Outputs["stop"] != agent.StopAnswer {
				t.Errorf("agent outputs = %v, want 3 tool calls and an answer", ag.Outputs)
			}
			reqs := model.Requests()
			if len(reqs) != 4 {
				t.Fatalf("model saw %d requests, want 4", len(reqs))
			}
			last := string(must(t, reqs[3].Body))
			for _, want := range []string{`exit code: 0\nstdout:\nwrote\n`, `42\n`, `timed out after 1s`, `before`} {
				if !strings.Contains(last, want) {
					t.Errorf("the model was not told %q: %s", want, last)
				}
			}
			data, err := os.ReadFile(ag.Outputs["trajectory"])
			if err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{`"kind":"tool_call","turn":1,"tool":"run_command"`, `"kind":"tool_result","turn":2,"tool":"read_file"`} {
				if !strings.Contains(string(data), want) {
					t.Errorf("trajectory lacks %s:\n%s", want, data)
				}
			}
			r.assertClean(t)
		})
	}
}

func must(t *testing.T, v map[string]any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestHarnessIn runs a harness inside a deploy_sandbox step's sandbox on the process provider:
// a bash one-liner writes the answer file from the prompt agentenv wrote there, a verifier
// finds it, and no sandbox of the harness's own is made; one that overruns its wall time is
// stopped and fails the step as the agent's.
func TestHarnessIn(t *testing.T) {
	for _, tc := range []struct {
		name, agent, want string
		pass              bool
	}{
		{"answers", `{harness: {in: sb, command: [bash, -c, 'cat agentenv/prompt.txt > answer.txt; echo "prompt at $AGENTENV_PROMPT_FILE"']}}`, "prompt at /agentenv/prompt.txt", true},
		{"the step's sandbox", `{harness: {command: [bash, -c, 'cat agentenv/prompt.txt > answer.txt; echo "prompt at $AGENTENV_PROMPT_FILE"']}}`, "prompt at /agentenv/prompt.txt", true},
		{"runs out of time", `{harness: {in: sb, command: [sleep, "30"], timeout_seconds: 1}}`, "harness ran out of its wall time of 1s", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := newRig(t, nil)
			tk := mustParse(t, "h.yaml", `name: h
steps:
- {id: sb, type: deploy_sandbox, provider: process}
- {id: agent, type: prompt_agent, sandbox: sb, prompt: "the answer is 42", agent: `+tc.agent+`}
- {id: file, type: file_contains, sandbox: sb, path: answer.txt, contains: "the answer is 42"}
`)
			start := time.Now()
			sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
			if took := time.Since(start); took > 20*time.Second {
				t.Errorf("the run took %s, past the harness's limit", took)
			}
			ep := sum.Episodes[0]
			ag := stepOf(ep, "agent")
			if tc.pass {
				if ep.Outcome != task.OutcomePassed || ag.Outputs["response"] != tc.want {
					t.Errorf("episode %s (error %q); agent step %+v, want response %q", ep.Outcome, ep.Error, ag, tc.want)
				}
			} else if ag.Status != agentenv.StepFailed || !strings.Contains(ag.Error, tc.want) || ep.Score == nil || *ep.Score != 0 {
				t.Errorf("episode %s score %v; agent step %+v, want failed naming %q", ep.Outcome, ep.Score, ag, tc.want)
			}
			recs, err := r.ledger.List(t.Context(), agentenv.Filter{})
			if err != nil {
				t.Fatal(err)
			}
			if len(recs) != 1 {
				t.Errorf("%d sandboxes recorded, want only the task's", len(recs))
			}
			r.assertClean(t)
		})
	}
}

// TestSandboxAgentChecks: a prompt_agent step needs an env or a sandbox, and the agents that
// cannot work in a sandbox say so, naming the field.
func TestSandboxAgentChecks(t *testing.T) {
	head := "steps:\n- {id: sb, type: deploy_sandbox, provider: process}\n- {id: env, type: deploy_env, file: env.yaml}\n"
	for _, tc := range []struct{ step, want string }{
		{`{id: a, type: prompt_agent, agent: openai, prompt: x}`, "env: set env (a deploy_env step), sandbox (a deploy_sandbox step), or both"},
		{`{id: a, type: prompt_agent, sandbox: sb, agent: scripted, calls: [{tool: t}]}`, "sandbox: the scripted agent"},
		{`{id: a, type: prompt_agent, env: env, sandbox: sb, agent: {a2a: "http://x:1"}, prompt: x}`, "sandbox: an A2A agent gets one MCP server: set env (a deploy_env step) or sandbox (a deploy_sandbox step), not both"},
		{"{id: ag, type: deploy_agent, image: x, port: 1}\n- {id: a, type: prompt_agent, sandbox: sb, agent: {deployed: ag}, prompt: x}", "sandbox: a deployed A2A agent cannot work in a sandbox yet"},
		{`{id: a, type: prompt_agent, agent: {a2a: "http://x:1"}, prompt: x}`, "env: an A2A agent works through an env or in a sandbox"},
		{`{id: a, type: prompt_agent, sandbox: sb, agent: {harness: {image: node, command: [x]}}, prompt: x}`, "agent.harness.image: a harness runs in a sandbox of its own (image) or"},
		{`{id: a, type: prompt_agent, env: env, agent: {harness: {command: [x]}}, prompt: x}`, "agent.harness: name an image"},
		{`{id: a, type: prompt_agent, agent: {harness: {image: node, command: [x]}}, prompt: x}`, "env: a harness in a sandbox of its own"},
		{`{id: a, type: prompt_agent, sandbox: env, agent: openai, prompt: x}`, `step "env" is a deploy_env; want deploy_sandbox`},
		{`{id: a, type: prompt_agent, env: env, agent: {harness: {in: env, command: [x]}}, prompt: x}`, `agent.harness.in: step "env" is a deploy_env; want deploy_sandbox`},
	} {
		_, err := task.Parse("t.yaml", []byte(head+"- "+tc.step+"\n"))
		if err == nil || !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%s) = %v, want an ErrInvalid naming %q", tc.step, err, tc.want)
		}
	}
	mustParse(t, "ok.yaml", head+"- {id: a, type: prompt_agent, env: env, sandbox: sb, agent: anthropic, prompt: x}\n")
	mustParse(t, "a2a.yaml", head+"- {id: a, type: prompt_agent, sandbox: sb, agent: {a2a: \"http://x:1\"}, prompt: x}\n")
}
