package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/internal/suggest"
)

// Agent kinds of prompt_agent.
const (
	AgentScripted = "scripted" // replays a list of tool calls; for deterministic runs and soak tests
	AgentOpenAI   = "openai"   // a tool-calling loop against an OpenAI-compatible chat endpoint
)

// DefaultMaxTurns is the turn budget of the openai agent when the step sets none.
const DefaultMaxTurns = 20

// promptAgent lets an agent act in a deployed env through its gateway, and records the
// trajectory.
type promptAgent struct {
	Env      string         `yaml:"env" task:"required"`   // the deploy_env step
	Role     string         `yaml:"role"`                  // the gateway role the agent acts as; "default" if empty
	Agent    string         `yaml:"agent" task:"required"` // scripted or openai
	Prompt   string         `yaml:"prompt"`
	System   string         `yaml:"system"`    // openai: the system message
	Model    string         `yaml:"model"`     // openai: overrides model.name
	MaxTurns int            `yaml:"max_turns"` // openai: model turns allowed; DefaultMaxTurns if 0
	Calls    []scriptedCall `yaml:"calls"`     // scripted: the tool calls to replay
	Response string         `yaml:"response"`  // scripted: the final answer; the last call's text if empty
}

// scriptedCall is one tool call of a scripted agent.
type scriptedCall struct {
	Tool      string         `yaml:"tool" task:"required"`
	Arguments map[string]any `yaml:"arguments"`
}

func (s *promptAgent) Check() error {
	switch s.Agent {
	case AgentScripted:
		if len(s.Calls) == 0 {
			return errors.New("calls: a scripted agent needs at least one call")
		}
	case AgentOpenAI:
		if s.Prompt == "" {
			return errors.New("prompt: the openai agent needs a prompt")
		}
		if len(s.Calls) > 0 || s.Response != "" {
			return errors.New("calls and response are for the scripted agent")
		}
		if s.MaxTurns < 0 {
			return errors.New("max_turns: want a positive number")
		}
	default:
		return fmt.Errorf("agent: want scripted or openai, got %q%s", s.Agent, suggest.DidYouMean(s.Agent, []string{AgentScripted, AgentOpenAI}))
	}
	return nil
}

func (s *promptAgent) Refs() []Ref { return []Ref{{"env", s.Env, envTypes}} }

func (s *promptAgent) Run(ctx context.Context, sc *scope) (Result, error) {
	env, err := sc.env(s.Env)
	if err != nil {
		return Result{}, err
	}
	dir, err := sc.runDir()
	if err != nil {
		return Result{}, err
	}
	tr, err := agent.Create(filepath.Join(dir, sc.s.ID+".trajectory.ndjson"))
	if err != nil {
		return Result{}, err
	}
	defer tr.Close()
	res := Result{Outputs: map[string]string{"trajectory": tr.Path()}}
	tr.Write(agent.Line{Kind: "prompt", Text: s.Prompt, Agent: s.Agent})

	out, err := s.act(ctx, sc, env, tr)
	res.Outputs["turns"] = strconv.Itoa(out.turns)
	res.Outputs["tool_calls"] = strconv.Itoa(out.calls)
	if err != nil {
		tr.Write(agent.Line{Kind: "error", Error: err.Error()})
		return res, err
	}
	res.Outputs["response"] = out.response
	tr.Write(agent.Line{Kind: "response", Text: out.response})
	return res, tr.Err()
}

// agentRun is what an agent did.
type agentRun struct {
	response     string
	turns, calls int
}

// agentToken returns the token an agent acting as role in env is handed: its role's, never the
// admin's. A deployer without role tokens (nil Tokens) leaves only the admin token, which an
// agent of the default role gets.
func agentToken(env DeployedEnv, role string) (string, error) {
	if env.Tokens == nil && (role == "" || role == DefaultRole) {
		return env.Token, nil
	}
	if t := env.TokenFor(role); t != "" {
		return t, nil
	}
	roles := slices.Sorted(maps.Keys(env.Tokens))
	return "", fmt.Errorf("role: the env has no role %q (roles: %s)%s", role, strings.Join(roles, ", "), suggest.DidYouMean(role, roles))
}

func (s *promptAgent) act(ctx context.Context, sc *scope, env DeployedEnv, tr *agent.Trajectory) (agentRun, error) {
	token, err := agentToken(env, s.Role)
	if err != nil {
		return agentRun{}, err
	}
	cs, err := sc.connect(ctx, env.GatewayURL, token)
	if err != nil {
		return agentRun{}, err
	}
	defer cs.Close()
	if s.Agent == AgentOpenAI {
		return s.openai(ctx, sc, cs, tr)
	}
	var out agentRun
	for i, c := range s.Calls {
		tr.Write(agent.Line{Kind: "tool_call", Turn: i + 1, Tool: c.Tool, Arguments: json.RawMessage(marshal(c.Arguments))})
		tc, err := callOne(ctx, cs, c.Tool, c.Arguments)
		out.calls++
		if err != nil {
			return out, fmt.Errorf("scripted call %d: %w", i+1, err)
		}
		writeResult(tr, i+1, c.Tool, "", tc)
		out.response = tc.Text
	}
	if s.Response != "" {
		out.response = s.Response
	}
	return out, nil
}

// writeResult records a tool call's result.
func writeResult(tr *agent.Trajectory, turn int, tool, callID string, tc toolCall) {
	l := agent.Line{Kind: agent.KindToolResult, Turn: turn, Tool: tool, CallID: callID, Text: tc.Text, IsError: tc.IsError}
	if tc.JSON != "" {
		l.JSON = json.RawMessage(tc.JSON)
	}
	tr.Write(l)
}

// toolsOf lists the tools the gateway offers, following pagination.
func toolsOf(ctx context.Context, cs *mcp.ClientSession) ([]*mcp.Tool, error) {
	var out []*mcp.Tool
	params := &mcp.ListToolsParams{}
	for range 100 {
		res, err := cs.ListTools(ctx, params)
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		out = append(out, res.Tools...)
		if res.NextCursor == "" {
			return out, nil
		}
		params = &mcp.ListToolsParams{Cursor: res.NextCursor}
	}
	return out, nil
}
