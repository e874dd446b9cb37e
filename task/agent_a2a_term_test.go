package task_test

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/mcpclient"
	"github.com/agentenv/agentenv/task"
)

// commandRunner is an A2A agent (served by a2a.Server) that speaks MCP only: it connects to
// the MCP server it is handed, runs the prompt's text with run_command, and answers with what
// the tool said. It keeps the server it was handed, for the test to check.
type commandRunner struct {
	mu     sync.Mutex
	handed agent.Gateway
	tools  []string
}

func (c *commandRunner) Prompt(ctx context.Context, p agent.Prompt, tr *agent.Trajectory) (agent.Answer, error) {
	c.mu.Lock()
	c.handed = p.Gateway
	c.mu.Unlock()
	cs, err := mcpclient.Client{Headers: p.Gateway.Headers, NoStandaloneSSE: true}.Connect(ctx, p.Gateway.URL, "")
	if err != nil {
		return agent.Answer{}, err
	}
	defer cs.Close()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		return agent.Answer{}, err
	}
	c.mu.Lock()
	for _, tl := range lt.Tools {
		c.tools = append(c.tools, tl.Name)
	}
	c.mu.Unlock()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "run_command", Arguments: map[string]any{"command": p.Text}})
	if err != nil {
		return agent.Answer{}, err
	}
	text, _ := mcpclient.Text(res)
	if res.IsError {
		return agent.Answer{}, fmt.Errorf("run_command: %s: %w", text, agent.ErrAgent)
	}
	return agent.Answer{Text: text}, nil
}

// TestA2AAgentInSandbox: an A2A agent named by URL with sandbox (no env) is handed the
// sandbox's terminal as an MCP server with a bearer token; its run_command writes the file
// the verifier finds, its call is in the step's trajectory, and the server is gone after the
// step.
func TestA2AAgentInSandbox(t *testing.T) {
	ag := &commandRunner{}
	url := a2aAgentURL(t, ag)
	r := newRig(t, nil)
	tk := mustParse(t, "t.yaml", `name: a2a-term
steps:
- {id: sb, type: deploy_sandbox, provider: process}
- {id: agent, type: prompt_agent, sandbox: sb, agent: {a2a: '`+url+`'}, prompt: "mkdir -p out && echo 42 > out/answer.txt && echo wrote", timeout_seconds: 60}
- {id: file, type: file_contains, sandbox: sb, path: out/answer.txt, contains: "42"}
- {id: said, type: response_matches, step: agent, contains: "stdout:\nwrote"}
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
	ag.mu.Lock()
	handed, tools := ag.handed, slices.Sorted(slices.Values(ag.tools))
	ag.mu.Unlock()
	if handed.Name != task.TerminalServerName || !strings.HasPrefix(handed.URL, "http://127.0.0.1:") || !strings.HasPrefix(handed.Headers["Authorization"], "Bearer ") {
		t.Errorf("the agent was handed %+v, want the container's MCP server with a bearer token", handed)
	}
	if want := []string{"read_file", "run_command", "write_file"}; !slices.Equal(tools, want) {
		t.Errorf("the agent saw tools %v, want %v", tools, want)
	}
	data, err := os.ReadFile(stepOf(ep, "agent").Outputs["trajectory"])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"kind":"tool_call","tool":"run_command"`, `"arguments":{"command":"mkdir -p out \u0026\u0026 echo 42 \u003e out/answer.txt \u0026\u0026 echo wrote"}`, `"kind":"tool_result","tool":"run_command"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("trajectory lacks %s:\n%s", want, data)
		}
	}
	// The server lived only as long as the prompt.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if cs, err := (mcpclient.Client{Headers: handed.Headers, NoStandaloneSSE: true}).Connect(ctx, handed.URL, ""); err == nil {
		cs.Close()
		t.Error("the terminal's MCP server still answers after the step")
	}
	r.assertClean(t)
}
