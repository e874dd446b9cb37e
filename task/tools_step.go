package task

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strconv"
	"strings"
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
	// Remote are MCP servers over HTTP that this host reaches at their URL (a sandbox's
	// published port).
	Remote []ToolsURL
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

// ToolsURL is one MCP server over HTTP of a ToolsSpec.
type ToolsURL struct {
	Name      string
	URL       string // its MCP endpoint from this host, such as http://127.0.0.1:49153/mcp
	Transport string // TransportStreamable or TransportSSE
}

// The HTTP transports of an MCP server a serve_tools step reaches.
const (
	TransportStreamable = "streamable-http" // the current MCP transport: POST and GET on one endpoint
	TransportSSE        = "sse"             // the 2024-11-05 one: an event stream that names where to POST
)

// serveTools serves tools behind a gateway in this process (Runner.Tools), on 127.0.0.1: stdio
// MCP servers run in the sandbox (each attached through the lifecycle manager and bridged
// here), MCP servers over HTTP in deploy_sandbox sandboxes (reached at the port each publishes
// on this host's loopback) and, with terminal, the sandbox's terminal tools. It registers as
// an env: prompt_agent and the other env steps take it as env, its admin and role tokens as a
// deploy_env's, its trajectory is kept as theirs is, and it is closed when the episode ends.
type serveTools struct {
	// Sandbox is the deploy_sandbox step whose sandbox runs the stdio servers and the terminal;
	// required with either.
	Sandbox string       `yaml:"sandbox"`
	Servers []toolServer `yaml:"servers"` // the MCP servers to serve
	// Terminal also serves the sandbox's terminal tools, as the server named "terminal": how an
	// A2A agent works in the sandbox through the gateway.
	Terminal bool `yaml:"terminal"`
}

// toolServer is one MCP server of a serve_tools step: a stdio server (command, run in the
// step's sandbox), or a server over HTTP in a deploy_sandbox step's sandbox (sandbox, port,
// path, transport), reached at the address the port is published at on this host.
type toolServer struct {
	Name    string   `yaml:"name" task:"required"` // its name behind the gateway
	Command []string `yaml:"command"`              // a stdio server: the program and its arguments, run in the step's sandbox
	// Sandbox is the deploy_sandbox step whose sandbox serves MCP over HTTP at Port, which that
	// step lists in its ports.
	Sandbox   string `yaml:"sandbox"`
	Port      int    `yaml:"port"`
	Path      string `yaml:"path"`      // the MCP endpoint's path; /mcp (streamable-http) or /sse (sse) if empty
	Transport string `yaml:"transport"` // streamable-http (the default) or sse
}

// url is the endpoint of an HTTP server at addr (host:port).
func (sv toolServer) url(addr string) string {
	path := sv.Path
	if path == "" {
		path = "/mcp"
		if sv.Transport == TransportSSE {
			path = "/sse"
		}
	}
	return "http://" + addr + path
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
	stdio := s.Terminal
	for i, sv := range s.Servers {
		switch {
		case !toolServerName.MatchString(sv.Name):
			return fmt.Errorf("servers[%d].name: want 1-64 of letters, digits, '_', '-' and '.', got %q", i, sv.Name)
		case s.Terminal && sv.Name == TerminalBackend:
			return fmt.Errorf("servers[%d].name: %q is the terminal's name with terminal: true", i, sv.Name)
		case seen[sv.Name]:
			return fmt.Errorf("servers[%d].name: %q is served twice", i, sv.Name)
		}
		seen[sv.Name] = true
		if sv.Sandbox == "" && sv.Port == 0 && sv.Path == "" && sv.Transport == "" {
			if len(sv.Command) == 0 || sv.Command[0] == "" {
				return fmt.Errorf("servers[%d].command: want the program and its arguments (or sandbox and port, for a server over HTTP)", i)
			}
			stdio = true
			continue
		}
		switch {
		case len(sv.Command) > 0:
			return fmt.Errorf("servers[%d].command: a stdio server's; set command, or sandbox and port, not both", i)
		case sv.Sandbox == "":
			return fmt.Errorf("servers[%d].sandbox: want the deploy_sandbox step that serves MCP at port", i)
		case sv.Port < 1 || sv.Port > 65535:
			return fmt.Errorf("servers[%d].port: want the container port (1-65535) the sandbox's step lists in its ports, got %d", i, sv.Port)
		case sv.Path != "" && !strings.HasPrefix(sv.Path, "/"):
			return fmt.Errorf("servers[%d].path: want a path starting with /, got %q", i, sv.Path)
		case sv.Transport != "" && sv.Transport != TransportStreamable && sv.Transport != TransportSSE:
			return fmt.Errorf("servers[%d].transport: want %s (the default) or %s, got %q", i, TransportStreamable, TransportSSE, sv.Transport)
		}
	}
	if stdio && s.Sandbox == "" {
		return errors.New("sandbox: want the deploy_sandbox step whose sandbox runs the stdio servers and the terminal")
	}
	return nil
}

func (s *serveTools) Refs() []Ref {
	var refs []Ref
	if s.Sandbox != "" {
		refs = append(refs, Ref{"sandbox", s.Sandbox, sandboxTypes})
	}
	for i, sv := range s.Servers {
		if sv.Sandbox != "" {
			refs = append(refs, Ref{fmt.Sprintf("servers[%d].sandbox", i), sv.Sandbox, sandboxTypes})
		}
	}
	return refs
}

func (s *serveTools) Run(ctx context.Context, sc *scope) (Result, error) {
	m, ts := sc.e.r.Manager, sc.e.r.Tools
	if m == nil {
		return Result{}, errors.New("no lifecycle manager configured")
	}
	if ts == nil {
		return Result{}, fmt.Errorf("serve_tools needs a tool server, and none is configured: %w", agentenv.ErrInvalid)
	}
	spec := ToolsSpec{Name: sc.s.ID, Logger: sc.log}
	if s.Sandbox != "" {
		ref, err := sc.sandbox(s.Sandbox)
		if err != nil {
			return Result{}, err
		}
		spec.Attach = func(ctx context.Context, argv []string) (agentenv.Stream, error) {
			return m.Attach(ctx, ref.Record, argv)
		}
		if s.Terminal {
			spec.Terminal = newTerminal(m, ref.Record)
		}
	}
	for i, sv := range s.Servers {
		if sv.Sandbox == "" {
			spec.Servers = append(spec.Servers, ToolsCmd{Name: sv.Name, Command: sv.Command})
			continue
		}
		ref, err := sc.sandbox(sv.Sandbox)
		if err != nil {
			return Result{}, fmt.Errorf("servers[%d].sandbox: %w", i, err)
		}
		addr := ref.Endpoints[strconv.Itoa(sv.Port)]
		if addr == "" {
			return Result{}, fmt.Errorf("servers[%d].port: step %s publishes no port %d on this host (list it in that step's ports): %w", i, sv.Sandbox, sv.Port, agentenv.ErrInvalid)
		}
		tr := sv.Transport
		if tr == "" {
			tr = TransportStreamable
		}
		spec.Remote = append(spec.Remote, ToolsURL{Name: sv.Name, URL: sv.url(addr), Transport: tr})
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
	local := &localTools{close: closeFn}
	if s.Terminal {
		local.terminal = s.Sandbox
	}
	e.envs[sc.s.ID] = &envRef{DeployedEnv: env, local: local}
	e.envOrder = append(e.envOrder, sc.s.ID)
	e.mu.Unlock()
	names := make([]string, 0, len(s.Servers)+1)
	for _, sv := range s.Servers {
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
	// terminal is the deploy_sandbox step whose terminal the gateway serves, if it serves one:
	// the sandbox an agent working through it works in.
	terminal string
}

// shut closes the tools (once); later calls return nil.
func (l *localTools) shut(ctx context.Context) (err error) {
	l.once.Do(func() { err = l.close(ctx) })
	return err
}
