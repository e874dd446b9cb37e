// Package toolgate serves a sandbox's tools behind an MCP gateway in this process, on
// 127.0.0.1: stdio MCP servers run in the sandbox (attached through the function the caller
// gives, which goes through the lifecycle manager) and bridged by stdiobridge, MCP servers over
// HTTP at a sandbox's published port (streamable HTTP reached by the gateway itself, SSE
// bridged by stdiobridge over an SSE client connection, sse.go), and the sandbox's terminal
// tools (agent/termtools). Each backend has a bearer token of its own that
// only the gateway holds. It implements task.ToolServer, for the serve_tools step; package task
// does not link the gateway, so that what reads run records (the explorer) does not either.
package toolgate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/agentenv/agentenv/agent/termtools"
	"github.com/agentenv/agentenv/gateway"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/httpserve"
	"github.com/agentenv/agentenv/stdiobridge"
	"github.com/agentenv/agentenv/task"
)

// CloseTimeout bounds the close of a gateway and of everything behind it.
const CloseTimeout = 15 * time.Second

// Server implements task.ToolServer. The zero value is ready to use.
type Server struct{}

var _ task.ToolServer = Server{}

// Serve starts spec's servers (spec.Attach each command in the sandbox, then bridges it; an SSE
// server of spec.Remote is connected, retrying until ctx ends, and bridged too) and, with
// spec.Terminal, its terminal tools as the server task.TerminalBackend, then a gateway in
// front of them with an admin token and a task.DefaultRole token. It returns the gateway as an
// env and the function that closes it all (the gateway's HTTP server, the gateway, the bridges
// and what they attached, the terminal's server) on a detached context bounded by
// CloseTimeout. On error, what it started is closed. ctx bounds only the start.
func (Server) Serve(ctx context.Context, spec task.ToolsSpec) (task.DeployedEnv, func(context.Context) error, error) {
	log := spec.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var closers []func() error
	closeAll := func(ctx context.Context) error { return closeInOrder(ctx, closers) }
	fail := func(err error) (task.DeployedEnv, func(context.Context) error, error) {
		_ = closeAll(ctx)
		return task.DeployedEnv{}, nil, err
	}
	var backends []gateway.Backend
	for _, sv := range spec.Servers {
		if spec.Attach == nil {
			return fail(errors.New("no way to attach a process in the sandbox"))
		}
		st, err := spec.Attach(ctx, sv.Command)
		if err != nil {
			return fail(fmt.Errorf("server %s: %w", sv.Name, err))
		}
		ep, err := stdiobridge.Serve(ctx, st, stdiobridge.ServeOptions{Logger: log.With("server", sv.Name)})
		if err != nil {
			return fail(fmt.Errorf("server %s: %w", sv.Name, err))
		}
		closers = append(closers, ep.Close)
		backends = append(backends, gateway.Backend{Name: sv.Name, URL: ep.URL, Token: ep.Token})
	}
	for _, sv := range spec.Remote {
		switch sv.Transport {
		case task.TransportSSE:
			// The gateway speaks streamable HTTP: an SSE server is bridged to it here.
			p, err := dialSSE(ctx, sv.URL)
			if err != nil {
				return fail(fmt.Errorf("server %s: %w", sv.Name, err))
			}
			ep, err := stdiobridge.Serve(ctx, p, stdiobridge.ServeOptions{Logger: log.With("server", sv.Name)})
			if err != nil {
				return fail(fmt.Errorf("server %s: %w", sv.Name, err))
			}
			closers = append(closers, ep.Close)
			backends = append(backends, gateway.Backend{Name: sv.Name, URL: ep.URL, Token: ep.Token})
		default: // streamable HTTP: the gateway reaches it itself, retrying until it answers
			backends = append(backends, gateway.Backend{Name: sv.Name, URL: sv.URL})
		}
	}
	if spec.Terminal != nil {
		// The terminal's calls live as long as its server, not the caller's ctx: Close ends them.
		ep, err := termtools.Serve(cleanup.Unbounded(ctx), spec.Terminal, nil, "127.0.0.1:0")
		if err != nil {
			return fail(err)
		}
		closers = append(closers, ep.Close)
		backends = append(backends, gateway.Backend{Name: task.TerminalBackend, URL: ep.URL, Token: ep.Token})
	}
	admin, err := newToken()
	if err != nil {
		return fail(err)
	}
	role, err := newToken()
	if err != nil {
		return fail(err)
	}
	g, err := gateway.New(ctx, gateway.Config{Name: spec.Name, Token: admin, RoleTokens: map[string]string{task.DefaultRole: role},
		Servers: backends, Logger: log.With("gateway", spec.Name)})
	if err != nil {
		return fail(err)
	}
	closers = append([]func() error{g.Close}, closers...)
	url, stop, err := serveLocal(ctx, g)
	if err != nil {
		return fail(err)
	}
	closers = append([]func() error{stop}, closers...)
	env := task.DeployedEnv{ID: spec.Name, GatewayURL: url, Token: admin, Tokens: map[string]string{task.DefaultRole: role}}
	return env, closeAll, nil
}

// serveLocal serves g on 127.0.0.1 and returns its /mcp URL and the function that stops the
// server with a bounded shutdown.
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

// closeInOrder calls each of fs in turn on a detached context bounded by CloseTimeout; past
// the bound it returns, and what is left closes on its own bounds.
func closeInOrder(ctx context.Context, fs []func() error) error {
	cctx, cancel := cleanup.Context(ctx, CloseTimeout)
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

// newToken is a fresh random bearer token.
func newToken() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
