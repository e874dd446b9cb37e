package envsdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/httpserve"
)

// ShutdownTimeout bounds the graceful shutdown of [Server.Serve] once its context ends; requests
// still running after it are cut off.
const ShutdownTimeout = 5 * time.Second

// Serve listens on addr (host:port, ":0" picks a port) and serves [Server.Handler] until ctx
// ends, then shuts down gracefully within [ShutdownTimeout]. It returns nil after a shutdown
// caused by ctx, and an error if it cannot listen or serving fails.
func (s *Server) Serve(ctx context.Context, addr string) error {
	ln, err := httpserve.Listen(ctx, addr, 0)
	if err != nil {
		return fmt.Errorf("envsdk: %w", err)
	}
	return s.ServeListener(ctx, ln)
}

// ServeListener is [Server.Serve] on a listener the caller made; it closes ln. The caller caps
// ln's connections if it wants to ([Server.Serve] caps them at 4096).
func (s *Server) ServeListener(ctx context.Context, ln net.Listener) error {
	return ServeHandler(ctx, ln, s.Handler(), s.mcp, s.log)
}

// ServeHandler serves h on ln until ctx ends, then closes the MCP sessions of srv (which ends their
// long-lived streams; srv may be nil) and shuts the HTTP server down within [ShutdownTimeout].
// It returns nil after a shutdown caused by ctx. It closes ln. A nil logger discards.
// The HTTP server has the bounds of internal/httpserve's defaults: 10 s to read headers, 60 s
// to read a request and to write a response (requests on /mcp are exempt once their body is
// read: event streams and long tool calls are not cut), 120 s of keep-alive idleness.
func ServeHandler(ctx context.Context, ln net.Listener, h http.Handler, srv *mcp.Server, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	hs := httpserve.New(h, httpserve.Limits{})
	hs.BaseContext = func(net.Listener) context.Context { return cleanup.Unbounded(ctx) }
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("serving", "addr", ln.Addr().String())

	select {
	case err := <-errc:
		return fmt.Errorf("envsdk: serve %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	if srv != nil {
		for ss := range srv.Sessions() {
			_ = ss.Close()
		}
	}
	sctx, cancel := cleanup.Context(ctx, ShutdownTimeout)
	defer cancel()
	err := hs.Shutdown(sctx)
	if err != nil {
		log.Warn("graceful shutdown timed out, closing connections", "err", err)
		err = hs.Close()
	}
	if serr := <-errc; serr != nil && !errors.Is(serr, http.ErrServerClosed) {
		return fmt.Errorf("envsdk: serve %s: %w", ln.Addr(), serr)
	}
	if err != nil {
		return fmt.Errorf("envsdk: shut down %s: %w", ln.Addr(), err)
	}
	log.Info("stopped", "addr", ln.Addr().String())
	return nil
}

// ServeStdio serves the MCP tools over stdin/stdout until ctx ends or the client closes stdin.
// The card and the data plane are not served over stdio.
func (s *Server) ServeStdio(ctx context.Context) error {
	err := s.mcp.Run(ctx, &mcp.StdioTransport{})
	if err != nil && ctx.Err() == nil {
		return fmt.Errorf("envsdk: serve stdio: %w", err)
	}
	return nil
}
