package task

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"regexp"
	"sync"
	"time"

	"github.com/agentenv/agentenv/agent/termtools"
	"github.com/agentenv/agentenv/gateway"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/httpserve"
	"github.com/agentenv/agentenv/stdiobridge"
)

// TerminalBackend is the name of the terminal tools (run_command, read_file, write_file) of a
// serve_tools step's sandbox behind its gateway.
const TerminalBackend = "terminal"

// toolsCloseTimeout bounds the close of a serve_tools step's gateway and what it fronts.
const toolsCloseTimeout = 15 * time.Second

// serveTools serves tools of a sandbox behind a gateway in this process, on 127.0.0.1: stdio
// MCP servers run in the sandbox (each attached through the lifecycle manager and bridged
// here) and, with terminal, the sandbox's terminal tools. It registers as an env: prompt_agent
// and the other env steps take it as env, its admin and role tokens as a deploy_env's, its
// trajectory is kept as theirs is, and it is closed when the episode ends.
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
		case seen[sv.Name]:
			return fmt.Errorf("servers[%d].name: %q is served twice (%q is the terminal's with terminal: true)", i, sv.Name, TerminalBackend)
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
	m := sc.e.r.Manager
	if m == nil {
		return Result{}, errors.New("no lifecycle manager configured")
	}
	ref, err := sc.sandbox(s.Sandbox)
	if err != nil {
		return Result{}, err
	}
	lt := &localTools{}
	ok := false
	defer func() {
		if !ok {
			lt.close(ctx)
		}
	}()
	var backends []gateway.Backend
	for _, sv := range s.Servers {
		st, err := m.Attach(ctx, ref.Record, sv.Command)
		if err != nil {
			return Result{}, fmt.Errorf("server %s: %w", sv.Name, err)
		}
		ep, err := stdiobridge.Serve(ctx, st, stdiobridge.ServeOptions{Logger: sc.log.With("server", sv.Name)})
		if err != nil {
			return Result{}, fmt.Errorf("server %s: %w", sv.Name, err)
		}
		lt.add(ep.Close)
		backends = append(backends, gateway.Backend{Name: sv.Name, URL: ep.URL, Token: ep.Token})
	}
	if s.Terminal {
		// The terminal's calls live as long as its server, not this step: Close ends them.
		ep, err := termtools.Serve(cleanup.Unbounded(ctx), newTerminal(m, ref.Record), nil, "127.0.0.1:0")
		if err != nil {
			return Result{}, err
		}
		lt.add(ep.Close)
		backends = append(backends, gateway.Backend{Name: TerminalBackend, URL: ep.URL, Token: ep.Token})
	}
	admin, err := newToken()
	if err != nil {
		return Result{}, err
	}
	role, err := newToken()
	if err != nil {
		return Result{}, err
	}
	g, err := gateway.New(ctx, gateway.Config{Name: sc.s.ID, Token: admin, RoleTokens: map[string]string{DefaultRole: role},
		Servers: backends, Logger: sc.log.With("gateway", sc.s.ID)})
	if err != nil {
		return Result{}, err
	}
	lt.add(g.Close)
	url, stop, err := serveLocal(ctx, g)
	if err != nil {
		return Result{}, err
	}
	lt.addFirst(stop)

	env := DeployedEnv{ID: sc.s.ID, GatewayURL: url, Token: admin, Tokens: map[string]string{DefaultRole: role}}
	sc.secret(admin)
	sc.secret(role)
	e := sc.e
	e.mu.Lock()
	e.envs[sc.s.ID] = &envRef{DeployedEnv: env, local: lt}
	e.envOrder = append(e.envOrder, sc.s.ID)
	e.mu.Unlock()
	ok = true
	names := make([]string, 0, len(backends))
	for _, b := range backends {
		names = append(names, b.Name)
	}
	return Result{Outputs: map[string]string{"gateway_url": url, "servers": marshal(names)}}, nil
}

// serveLocal serves g on 127.0.0.1 and returns its /mcp URL and the function that stops the
// server (its sessions first, then a bounded shutdown).
func serveLocal(ctx context.Context, g *gateway.Gateway) (string, func() error, error) {
	ln, err := httpserve.Listen(ctx, "127.0.0.1:0", 0)
	if err != nil {
		return "", nil, fmt.Errorf("gateway: %w", err)
	}
	base, stopBase := context.WithCancel(cleanup.Unbounded(ctx))
	hs := httpserve.New(g.Handler(), httpserve.Limits{})
	hs.BaseContext = func(net.Listener) context.Context { return base }
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = hs.Serve(ln) // ErrServerClosed once stopped
	}()
	stop := func() error {
		defer stopBase()
		sctx, cancel := cleanup.Context(ctx, 5*time.Second)
		defer cancel()
		err := hs.Shutdown(sctx)
		if err != nil {
			err = errors.Join(err, hs.Close())
		}
		<-served
		return err
	}
	return "http://" + ln.Addr().String() + "/mcp", stop, nil
}

// newToken is a fresh random bearer token.
func newToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// localTools is what a serve_tools step runs in this process, closed in order, once.
type localTools struct {
	mu      sync.Mutex
	closers []func() error
	done    bool
}

func (l *localTools) add(f func() error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closers = append(l.closers, f)
}

// addFirst adds f to be closed before everything added so far.
func (l *localTools) addFirst(f func() error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.closers = append([]func() error{f}, l.closers...)
}

// close closes the gateway's server, the gateway, then the servers behind it, on a detached
// context bounded by toolsCloseTimeout, whatever ended the episode. The bridges stop the
// processes they attached; one that ignores the end of its input goes with its sandbox.
func (l *localTools) close(ctx context.Context) error {
	l.mu.Lock()
	if l.done {
		l.mu.Unlock()
		return nil
	}
	l.done = true
	fs := l.closers
	l.mu.Unlock()
	cctx, cancel := cleanup.Context(ctx, toolsCloseTimeout)
	defer cancel()
	errc := make(chan error, 1)
	go func() {
		var errs []error
		for _, f := range fs {
			errs = append(errs, f())
		}
		errc <- errors.Join(errs...)
	}()
	select {
	case err := <-errc:
		if err != nil {
			return fmt.Errorf("close served tools: %w", err)
		}
		return nil
	case <-cctx.Done():
		return fmt.Errorf("close served tools: %w", cctx.Err())
	}
}
