package task

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"sync"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent"
)

// TerminalBackend is the name of the terminal tools (run_command, read_file, write_file) of a
// serve_tools step's sandbox behind its gateway.
const TerminalBackend = "terminal"

// ToolServer serves a sandbox's tools behind a gateway in this process, for serve_tools;
// package task/toolgate implements it. Implementations must be safe for concurrent use.
type ToolServer interface {
	// Serve starts spec's servers and terminal behind a gateway and returns it as an env (its
	// admin token and role tokens), with the function that closes it all within a bound of its
	// own on a context detached from the one it is given. On error nothing it started is left
	// running. ctx bounds only the start.
	Serve(ctx context.Context, spec ToolsSpec) (DeployedEnv, func(context.Context) error, error)
}

// ToolsSpec is what a ToolServer serves.
type ToolsSpec struct {
	Name    string     // the gateway's and the env's name: the step's id
	Servers []ToolsCmd // stdio MCP servers, each started with Attach
	// Attach starts argv in the sandbox with its stdio attached, through the lifecycle manager.
	Attach func(ctx context.Context, argv []string) (agentenv.Stream, error)
	// Terminal, if not nil, is the sandbox's shell, served as the server TerminalBackend.
	Terminal agent.Terminal
	Logger   *slog.Logger
}

// ToolsCmd is one stdio MCP server of a ToolsSpec.
type ToolsCmd struct {
	Name    string
	Command []string
}

// serveTools serves tools of a sandbox behind a gateway in this process (Runner.Tools), on
// 127.0.0.1: stdio MCP servers run in the sandbox (each attached through the lifecycle manager
// and bridged here) and, with terminal, the sandbox's terminal tools. It registers as an env:
// prompt_agent and the other env steps take it as env, its admin and role tokens as a
// deploy_env's, its trajectory is kept as theirs is, and it is closed when the episode ends.
type serveTools struct {
	Sandbox string       `yaml:"sandbox" task:"required"` // the deploy_sandbox step whose sandbox runs the servers
	Servers []toolServer `yaml:"servers"`                 // stdio MCP servers to run in the sandbox
	// Terminal also serves the sandbox's terminal tools, as the server named "terminal": how an
	// A2A agent works in the sandbox through the gateway.
	Terminal bool `yaml:"terminal"`
}

// toolServer is one stdio MCP server of a serve_tools step.
type toolServer struct {
	Name    string   `yaml:"name" task:"required"`    // its name behind the gateway
	Command []string `yaml:"command" task:"required"` // the program and its arguments, run in the sandbox
}

var toolServerName = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

func (s *serveTools) Check() error {
	if len(s.Servers) == 0 && !s.Terminal {
		return errors.New("servers: set servers, terminal: true, or both")
	}
	seen := map[string]bool{}
	if s.Terminal {
		seen[TerminalBackend] = true
	}
	for i, sv := range s.Servers {
		switch {
		case !toolServerName.MatchString(sv.Name):
			return fmt.Errorf("servers[%d].name: want 1-64 of letters, digits, '_', '-' and '.', got %q", i, sv.Name)
		case s.Terminal && sv.Name == TerminalBackend:
			return fmt.Errorf("servers[%d].name: %q is the terminal's name with terminal: true", i, sv.Name)
		case seen[sv.Name]:
			return fmt.Errorf("servers[%d].name: %q is served twice", i, sv.Name)
		case len(sv.Command) == 0 || sv.Command[0] == "":
			return fmt.Errorf("servers[%d].command: want the program and its arguments", i)
		}
		seen[sv.Name] = true
	}
	return nil
}

func (s *serveTools) Refs() []Ref {
	return []Ref{{"sandbox", s.Sandbox, sandboxTypes}}
}

func (s *serveTools) Run(ctx context.Context, sc *scope) (Result, error) {
	m, ts := sc.e.r.Manager, sc.e.r.Tools
	if m == nil {
		return Result{}, errors.New("no lifecycle manager configured")
	}
	if ts == nil {
		return Result{}, fmt.Errorf("serve_tools needs a tool server, and none is configured: %w", agentenv.ErrInvalid)
	}
	ref, err := sc.sandbox(s.Sandbox)
	if err != nil {
		return Result{}, err
	}
	spec := ToolsSpec{Name: sc.s.ID, Logger: sc.log,
		Attach: func(ctx context.Context, argv []string) (agentenv.Stream, error) {
			return m.Attach(ctx, ref.Record, argv)
		}}
	for _, sv := range s.Servers {
		spec.Servers = append(spec.Servers, ToolsCmd(sv))
	}
	if s.Terminal {
		spec.Terminal = newTerminal(m, ref.Record)
	}
	env, closeFn, err := ts.Serve(ctx, spec)
	if err != nil {
		return Result{}, err
	}
	sc.secret(env.Token)
	for _, t := range env.Tokens {
		sc.secret(t)
	}
	e := sc.e
	e.mu.Lock()
	e.envs[sc.s.ID] = &envRef{DeployedEnv: env, local: &localTools{close: closeFn}}
	e.envOrder = append(e.envOrder, sc.s.ID)
	e.mu.Unlock()
	names := make([]string, 0, len(spec.Servers)+1)
	for _, sv := range spec.Servers {
		names = append(names, sv.Name)
	}
	if s.Terminal {
		names = append(names, TerminalBackend)
	}
	return Result{Outputs: map[string]string{"gateway_url": env.GatewayURL, "servers": marshal(names)}}, nil
}

// localTools is a serve_tools step's gateway as the episode holds it: closed once.
type localTools struct {
	once  sync.Once
	close func(context.Context) error
}

// shut closes the tools (once); later calls return nil.
func (l *localTools) shut(ctx context.Context) (err error) {
	l.once.Do(func() { err = l.close(ctx) })
	return err
}
