package task

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/agent/atif"
	"github.com/agentenv/agentenv/agent/scripted"
	"github.com/agentenv/agentenv/agent/termtools"
	"github.com/agentenv/agentenv/internal/suggest"
)

// Agent kinds of prompt_agent.
const (
	AgentScripted  = "scripted"  // replays a list of tool calls; for deterministic runs and soak tests
	AgentOpenAI    = "openai"    // the built-in model agent on an OpenAI-compatible endpoint (agent_model.go)
	AgentAnthropic = "anthropic" // the built-in model agent on Anthropic's Messages API
	AgentA2A       = "a2a"       // an A2A agent, running or started by deploy_agent (agent_a2a.go)
	AgentHarness   = "harness"   // a command-line agent in a sandbox (agent_harness.go)
)

// TerminalServerName is the name an A2A agent working in a sandbox is handed its MCP server
// of terminal tools (run_command, read_file, write_file) under.
const TerminalServerName = "container"

// promptAgent lets an agent act in a deployed env through its gateway, or in a sandbox
// through a terminal (or both), and records the trajectory.
type promptAgent struct {
	Env string `yaml:"env"` // the deploy_env step; env or sandbox (or both) is required
	// Sandbox is the deploy_sandbox step whose sandbox the agent works in: the built-in model
	// agent gets run_command, read_file and write_file there, an A2A agent (a2a: URL, env not
	// set) the same tools as an MCP server served on this host; a harness runs in it.
	Sandbox string    `yaml:"sandbox"`
	Agent   agentSpec `yaml:"agent" task:"required"` // which agent: see agentSpec
	Role    string    `yaml:"role"`                  // the gateway role the agent acts as; "default" if empty
	Prompt  string    `yaml:"prompt"`
	// PromptFile is a file of the task's folder whose text is the prompt, as it is: no
	// placeholder or output reference in it is filled in (a Harbor task's instruction.md).
	PromptFile string `yaml:"prompt_file"`
	System     string `yaml:"system"`    // the system message
	Model      string `yaml:"model"`     // overrides model.name
	MaxTurns   int    `yaml:"max_turns"` // model turns allowed; the agent's default (model.DefaultMaxTurns) if 0
	// MaxOutputTokens caps the output tokens summed over the model's turns; 0: no cap.
	MaxOutputTokens int64 `yaml:"max_output_tokens"`
	// MaxCostUSD caps the cost of the prompt at the model's prices (model.input_price,
	// model.output_price); 0: no cap.
	MaxCostUSD float64 `yaml:"max_cost_usd"`
	// TimeoutSeconds caps the agent's wall time; it ends the loop with stop "timeout". The
	// step's own timeout still bounds the whole step. 0: no cap of the agent's own.
	TimeoutSeconds float64        `yaml:"timeout_seconds"`
	Calls          []scriptedCall `yaml:"calls"`    // scripted: the tool calls to replay
	Response       string         `yaml:"response"` // scripted: the final answer; the last call's text if empty
}

// agentSpec names a prompt_agent step's agent. In a task file it is either a built-in kind by
// name (`agent: scripted`, `agent: openai`) or a mapping with exactly one of:
//
//	agent: {a2a: http://host:port}     # an A2A agent already running
//	agent: {deployed: STEP_ID}         # the A2A agent a deploy_agent step started
//	agent: {harness: {image: ..., ...}} # a command-line agent run in a sandbox next to the env
type agentSpec struct {
	Kind     string       `yaml:"-"`        // a built-in kind, when given as a name
	A2A      string       `yaml:"a2a"`      // the URL of a running A2A agent
	Deployed string       `yaml:"deployed"` // the id of a deploy_agent step
	Harness  *harnessSpec `yaml:"harness"`  // a harness agent
}

// scalarField implements scalarForm: a bare name fills Kind.
func (agentSpec) scalarField() string { return "Kind" }

// UnmarshalYAML takes a name or a mapping.
func (a *agentSpec) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind == yaml.ScalarNode {
		*a = agentSpec{Kind: n.Value}
		return nil
	}
	type plain agentSpec
	return n.Decode((*plain)(a))
}

// name is how the agent is named in trajectories and errors.
func (a agentSpec) name() string {
	switch {
	case a.A2A != "" || a.Deployed != "":
		return AgentA2A
	case a.Harness != nil:
		return AgentHarness
	}
	return a.Kind
}

// check says whether exactly one agent is named.
func (a agentSpec) check() error {
	n := 0
	for _, set := range []bool{a.Kind != "", a.A2A != "", a.Deployed != "", a.Harness != nil} {
		if set {
			n++
		}
	}
	if n != 1 {
		return errors.New("agent: name one agent: scripted, openai, anthropic, or a mapping with one of a2a, deployed, harness")
	}
	return nil
}

// scriptedCall is one tool call of a scripted agent.
type scriptedCall struct {
	Tool      string         `yaml:"tool" task:"required"`
	Arguments map[string]any `yaml:"arguments"`
	// Capture takes arguments from the text of the previous call's result: argument name to
	// a regular expression (Go's RE2 syntax) whose first group, or whole match without one, is
	// the argument's value as a string (over arguments). No match is the agent's error. For
	// element references a page gives, such as Playwright MCP's aria refs from a
	// browser_snapshot, which browser_click takes as target: {target: 'button "Order Notebook" \[ref=(\w+)\]'}.
	Capture map[string]string `yaml:"capture"`
}

// compiled returns c.Capture compiled; the error names the argument.
func (c scriptedCall) compiled() (map[string]*regexp.Regexp, error) {
	if len(c.Capture) == 0 {
		return nil, nil
	}
	out := make(map[string]*regexp.Regexp, len(c.Capture))
	for _, name := range slices.Sorted(maps.Keys(c.Capture)) {
		re, err := regexp.Compile(c.Capture[name])
		if err != nil {
			return nil, fmt.Errorf("capture.%s: %w", name, err)
		}
		if re.NumSubexp() > 1 {
			return nil, fmt.Errorf("capture.%s: want at most one group, the argument's value; make the others (?:...)", name)
		}
		out[name] = re
	}
	return out, nil
}

func (s *promptAgent) Check() error {
	if err := s.Agent.check(); err != nil {
		return err
	}
	if s.Prompt != "" && s.PromptFile != "" {
		return errors.New("prompt_file: set prompt or prompt_file, not both")
	}
	if s.Agent.Kind != AgentScripted && (len(s.Calls) > 0 || s.Response != "") {
		return errors.New("calls and response are for the scripted agent")
	}
	switch {
	case s.MaxTurns < 0:
		return errors.New("max_turns: want a positive number")
	case s.MaxOutputTokens < 0:
		return errors.New("max_output_tokens: want a positive number")
	case s.MaxCostUSD < 0:
		return errors.New("max_cost_usd: want a positive number")
	case s.TimeoutSeconds < 0:
		return errors.New("timeout_seconds: want a positive number")
	}
	switch {
	case s.Agent.A2A != "" || s.Agent.Deployed != "":
		switch {
		case s.Env != "" && s.Sandbox != "":
			return errors.New("sandbox: an A2A agent gets one MCP server: set env (a deploy_env step) or sandbox (a deploy_sandbox step), not both")
		case s.Agent.Deployed != "" && s.Sandbox != "":
			return errors.New("sandbox: a deployed A2A agent cannot work in a sandbox yet (its own sandbox has no route to the terminal served on this host); use agent: {a2a: URL} or env")
		case s.Env == "" && s.Sandbox == "":
			return errors.New("env: an A2A agent works through an env or in a sandbox: set env (a deploy_env step) or sandbox (a deploy_sandbox step)")
		}
		return s.checkA2A()
	case s.Agent.Harness != nil:
		return s.checkHarness()
	}
	if s.Env == "" && s.Sandbox == "" {
		return errors.New("env: set env (a deploy_env step), sandbox (a deploy_sandbox step), or both")
	}
	switch s.Agent.Kind {
	case AgentScripted:
		if s.Sandbox != "" {
			return errors.New("sandbox: the scripted agent replays env tool calls and has no terminal; use env")
		}
		if len(s.Calls) == 0 {
			return errors.New("calls: a scripted agent needs at least one call")
		}
		for i, c := range s.Calls {
			if _, err := c.compiled(); err != nil {
				return fmt.Errorf("calls[%d].%w", i, err)
			}
			if i == 0 && len(c.Capture) > 0 {
				return errors.New("calls[0].capture: the first call has no previous result to capture from")
			}
		}
	case AgentOpenAI, AgentAnthropic:
		if !s.hasPrompt() {
			return fmt.Errorf("prompt: the %s agent needs a prompt", s.Agent.Kind)
		}
	default:
		return fmt.Errorf("agent: want scripted, openai or anthropic, got %q%s", s.Agent.Kind, suggest.DidYouMean(s.Agent.Kind, []string{AgentScripted, AgentOpenAI, AgentAnthropic}))
	}
	return nil
}

func (s *promptAgent) Refs() []Ref {
	var refs []Ref
	if s.Env != "" {
		refs = append(refs, Ref{"env", s.Env, envTypes})
	}
	if s.Sandbox != "" {
		refs = append(refs, Ref{"sandbox", s.Sandbox, sandboxTypes})
	}
	if h := s.Agent.Harness; h != nil && h.In != "" && h.In != s.Sandbox {
		refs = append(refs, Ref{"agent.harness.in", h.In, sandboxTypes})
	}
	if s.Agent.Deployed != "" {
		refs = append(refs, Ref{"agent.deployed", s.Agent.Deployed, []string{TypeDeployAgent}})
	}
	return refs
}

// hasPrompt reports whether the step gives a prompt, in its text or in a file.
func (s *promptAgent) hasPrompt() bool { return s.Prompt != "" || s.PromptFile != "" }

func (s *promptAgent) Run(ctx context.Context, sc *scope) (Result, error) {
	if s.PromptFile != "" {
		p, err := sc.within("prompt_file", s.PromptFile)
		if err != nil {
			return Result{}, err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return Result{}, fmt.Errorf("prompt_file: %w", err)
		}
		s.Prompt = string(data)
	}
	var env DeployedEnv
	if s.Env != "" {
		var err error
		if env, err = sc.env(s.Env); err != nil {
			return Result{}, err
		}
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
	tr.Write(agent.Line{Kind: agent.KindPrompt, Text: s.Prompt, Agent: s.Agent.name()})

	out, err := s.act(ctx, sc, env, tr)
	res.Outputs["turns"] = strconv.Itoa(out.turns)
	res.Outputs["tool_calls"] = strconv.Itoa(out.calls)
	res.Outputs["stop"] = agent.Finish(tr, agent.Answer{Text: out.response, Turns: out.turns, ToolCalls: out.calls, Usage: out.usage, Stop: out.stop}, err)
	res.Outputs["input_tokens"] = strconv.FormatInt(out.usage.InputTokens, 10)
	res.Outputs["output_tokens"] = strconv.FormatInt(out.usage.OutputTokens, 10)
	res.Outputs["cost_usd"] = strconv.FormatFloat(out.usage.CostUSD, 'g', -1, 64)
	if in := s.workedIn(sc); in != "" && s.Agent.Harness == nil { // a harness leaves its own, if any
		s.leaveTrajectory(ctx, sc, in, tr.Path())
	}
	if err != nil {
		return res, err
	}
	res.Outputs["response"] = out.response
	return res, tr.Err()
}

// AgentTrajectoryFile is where an agent's trajectory is left, as ATIF, in the sandbox it
// worked in: where Harbor's agents leave theirs for the task's tests and viewers.
const AgentTrajectoryFile = "/logs/agent/trajectory.json"

// workedIn returns the deploy_sandbox step whose sandbox the agent worked in: its own sandbox,
// or the one whose terminal its env (a serve_tools step) serves, as an A2A agent's; "" if none.
func (s *promptAgent) workedIn(sc *scope) string {
	if s.Sandbox != "" || s.Env == "" {
		return s.Sandbox
	}
	sc.e.mu.Lock()
	defer sc.e.mu.Unlock()
	if env := sc.e.envs[s.Env]; env != nil && env.local != nil {
		return env.local.terminal
	}
	return ""
}

// leaveTrajectory writes the trajectory at path into the sandbox of step in as
// AgentTrajectoryFile, unless the step's own time is up (an agent that ran out of its wall time
// leaves the step some). It is a courtesy to tests that read it: a failure is a warning, not
// the step's.
func (s *promptAgent) leaveTrajectory(ctx context.Context, sc *scope, in, path string) {
	if ctx.Err() != nil {
		return
	}
	err := func() error {
		ref, err := sc.sandbox(in)
		if err != nil {
			return err
		}
		lines, err := atif.ReadLines(path)
		if err != nil {
			return err
		}
		t, err := atif.FromLines(lines, atif.Info{SessionID: sc.e.id, TrajectoryID: sc.e.id + "/" + sc.s.ID, System: s.System})
		if err != nil {
			return err
		}
		data, err := atif.Marshal(t)
		if err != nil {
			return err
		}
		return sc.e.r.Manager.WriteFile(ctx, ref.Record, AgentTrajectoryFile, data)
	}()
	if err != nil {
		sc.log.Warn("agent trajectory not left in the sandbox", "step", sc.s.ID, "file", AgentTrajectoryFile, "err", err)
	}
}

// agentRun is what an agent did.
type agentRun struct {
	response     string
	turns, calls int
	stop         string // why its loop ended; empty for an agent that reports none
	usage        agent.Usage
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
	var token string
	var err error
	if s.Env != "" {
		if token, err = agentToken(env, s.Role); err != nil {
			return agentRun{}, err
		}
	}
	var ag agent.Agent
	switch {
	case s.Agent.A2A != "" || s.Agent.Deployed != "":
		ag, err = s.a2aAgent(sc)
	case s.Agent.Harness != nil:
		ag, err = s.harnessAgent(sc, env)
	case s.Agent.Kind == AgentOpenAI || s.Agent.Kind == AgentAnthropic:
		ag, err = s.modelAgent(sc)
	default:
		ag = s.scriptedAgent(sc)
	}
	if err != nil {
		return agentRun{}, err
	}
	p := s.prompt(env, token)
	if s.Sandbox != "" && s.Agent.Harness == nil {
		if p.Terminal, err = s.terminal(sc); err != nil {
			return agentRun{}, err
		}
	}
	if s.Agent.A2A != "" && s.Sandbox != "" {
		// An A2A agent speaks MCP, not the Terminal interface: it gets the terminal as an MCP
		// server on this host for the prompt's lifetime, every call written to tr.
		ep, err := termtools.Serve(ctx, p.Terminal, tr, "127.0.0.1:0")
		if err != nil {
			return agentRun{}, err
		}
		defer func() {
			if err := ep.Close(); err != nil {
				sc.log.Warn("terminal MCP server", "step", sc.s.ID, "err", err)
			}
		}()
		p.Terminal = nil
		p.Gateway = agent.Gateway{Name: TerminalServerName, URL: ep.URL, Headers: map[string]string{"Authorization": "Bearer " + ep.Token}}
	}
	ans, err := ag.Prompt(ctx, p, tr)
	return agentRun{response: ans.Text, turns: ans.Turns, calls: ans.ToolCalls, stop: ans.Stop, usage: ans.Usage}, err
}

// scriptedAgent is the scripted agent of a prompt_agent step (agent: scripted).
func (s *promptAgent) scriptedAgent(sc *scope) *scripted.Agent {
	a := &scripted.Agent{Response: s.Response, HTTP: sc.e.r.httpClient()}
	for _, c := range s.Calls {
		capture, _ := c.compiled() // checked at load
		a.Calls = append(a.Calls, scripted.Call{Tool: c.Tool, Arguments: c.Arguments, Capture: capture})
	}
	return a
}

// terminal is the shell of the step's sandbox.
func (s *promptAgent) terminal(sc *scope) (agent.Terminal, error) {
	if sc.e.r.Manager == nil {
		return nil, errors.New("no lifecycle manager configured")
	}
	ref, err := sc.sandbox(s.Sandbox)
	if err != nil {
		return nil, err
	}
	return newTerminal(sc.e.r.Manager, ref.Record), nil
}

// prompt is what the step asks of an agent, with the gateway as the step's role reaches it
// (none without an env).
func (s *promptAgent) prompt(env DeployedEnv, token string) agent.Prompt {
	p := agent.Prompt{
		Text:            s.Prompt,
		SystemPrompt:    s.System,
		Model:           s.Model,
		MaxTurns:        s.MaxTurns,
		MaxOutputTokens: s.MaxOutputTokens,
		MaxCostUSD:      s.MaxCostUSD,
		Timeout:         time.Duration(s.TimeoutSeconds * float64(time.Second)),
	}
	if s.Env != "" {
		p.Gateway = agent.Gateway{
			Name:    env.ID,
			URL:     env.GatewayURL,
			Headers: map[string]string{"Authorization": "Bearer " + token},
		}
	}
	return p
}
