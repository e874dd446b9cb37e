package task_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/agent/a2a"
	"github.com/agentenv/agentenv/mcpclient"
	"github.com/agentenv/agentenv/task"
)

// noteTaker adds one note through the gateway its prompt names: the agent behind a real A2A
// server, so the step reaches it over A2A and it reaches the env over MCP.
type noteTaker struct{ fail bool }

func (n noteTaker) Prompt(ctx context.Context, p agent.Prompt, tr *agent.Trajectory) (agent.Answer, error) {
	if n.fail {
		return agent.Answer{}, fmt.Errorf("I give up: %w", agent.ErrAgent)
	}
	cs, err := mcpclient.Client{}.Connect(ctx, p.Gateway.URL, strings.TrimPrefix(p.Gateway.Headers["Authorization"], "Bearer "))
	if err != nil {
		return agent.Answer{}, err
	}
	defer cs.Close()
	tr.Write(agent.Line{Kind: agent.KindToolCall, Tool: "add_note"})
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "add_note", Arguments: map[string]any{"title": "from-a2a", "body": p.Text}}); err != nil {
		return agent.Answer{}, err
	}
	return agent.Answer{Text: "added from-a2a"}, nil
}

func a2aAgentURL(t *testing.T, ag agent.Agent) string {
	t.Helper()
	srv, err := a2a.NewServer(ag, a2a.ServerOptions{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	t.Cleanup(ts.Close)
	return ts.URL
}

func TestPromptA2AAgent(t *testing.T) {
	g := newNotesGateway(t)
	r := newRig(t, nil)
	r.runner.Deployer = &fakeDeployer{g: g}
	url := a2aAgentURL(t, noteTaker{})
	tk := mustParse(t, "a2a.yaml", `
steps:
- {id: env, type: deploy_env, file: env.yaml}
- {id: act, type: prompt_agent, env: env, agent: {a2a: '`+url+`'}, prompt: "dentist Tuesday"}
- {id: said, type: response_matches, step: act, contains: from-a2a}
- id: wrote
  type: tool_result
  env: env
  tool: search_notes
  arguments: {query: from-a2a}
  expect: {json: {notes: [{title: from-a2a, body: dentist Tuesday}]}}
`)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	for _, s := range ep.Steps {
		if s.Status != agentenv.StepPassed {
			t.Errorf("step %s: %s %q", s.ID, s.Status, s.Error)
		}
	}
	if ep.Score == nil || *ep.Score != 1 {
		t.Errorf("score %v, want 1 (%s)", ep.Score, ep.Error)
	}
	if g.unauthorized != 0 {
		t.Errorf("the gateway refused %d requests: the agent did not get the token", g.unauthorized)
	}
}

func TestPromptA2AAgentFails(t *testing.T) {
	g := newNotesGateway(t)
	r := newRig(t, nil)
	r.runner.Deployer = &fakeDeployer{g: g}
	url := a2aAgentURL(t, noteTaker{fail: true})
	tk := mustParse(t, "a2a.yaml", `
steps:
- {id: env, type: deploy_env, file: env.yaml}
- {id: act, type: prompt_agent, env: env, agent: {a2a: '`+url+`'}, prompt: "x"}
`)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	var act agentenv.StepRecord
	for _, s := range sum.Episodes[0].Steps {
		if s.ID == "act" {
			act = s
		}
	}
	if act.Status != agentenv.StepFailed || !strings.Contains(act.Error, "I give up") {
		t.Errorf("act: %s %q, want failed with the agent's reason", act.Status, act.Error)
	}
}

func TestDeployAgentBadInput(t *testing.T) {
	tests := []struct{ name, src, want string }{
		{"no image", "steps:\n- {id: a, type: deploy_agent, port: 8080}", "steps[0].image: missing field"},
		{"no port", "steps:\n- {id: a, type: deploy_agent, image: x}", "steps[0].port: missing field"},
		{"bad port", "steps:\n- {id: a, type: deploy_agent, image: x, port: 70000}", "port: want 1-65535, got 70000"},
		{"bad card_wait", "steps:\n- {id: a, type: deploy_agent, image: x, port: 1, card_wait: soon}", `card_wait: want a positive duration such as "2m", got "soon"`},
		{"network of the wrong type", "steps:\n- {id: s, type: deploy_sandbox}\n- {id: a, type: deploy_agent, image: x, port: 1, network: s}", `step "s" is a deploy_sandbox; want deploy_env`},
		{"a2a not a URL", "steps:\n- {id: e, type: deploy_env, file: x}\n- {id: p, type: prompt_agent, env: e, prompt: hi, agent: {a2a: 'localhost:9'}}", `agent.a2a: want an http(s) URL, got "localhost:9"`},
		{"a2a without a prompt", "steps:\n- {id: e, type: deploy_env, file: x}\n- {id: p, type: prompt_agent, env: e, agent: {a2a: 'http://x'}}", "prompt: an A2A agent needs a prompt"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := task.Parse("t.yaml", []byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Parse = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
