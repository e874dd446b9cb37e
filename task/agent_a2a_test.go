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
