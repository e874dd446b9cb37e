package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/agentenv/agentenv/internal/cleanup"
)

// shutdownTimeout bounds the graceful shutdown of ListenAndServe.
const shutdownTimeout = 5 * time.Second

// ListenAndServe starts a gateway for cfg, listens on addr (HOST:PORT; port 0 picks one),
// calls ready with the address it listens on, and serves until ctx ends. Shutdown is graceful
// and bounded: MCP sessions are closed, in-flight requests get a few seconds, then the
// backends' sessions are closed.
func ListenAndServe(ctx context.Context, addr string, cfg Config, ready func(addr string)) error {
	g, err := New(ctx, cfg)
	if err != nil {
		return err
	}
	defer g.Close()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("gateway: listen: %w", err)
	}
	srv := &http.Server{Handler: g.Handler(), ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if ready != nil {
		ready(ln.Addr().String())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("gateway: serve: %w", err)
	case <-ctx.Done():
	}
	// Open SSE streams would hold Shutdown until its deadline: end the sessions first.
	g.mcp.closeSessions()
	sctx, cancel := cleanup.Context(ctx, shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("gateway: serve: %w", err)
	}
	return nil
}
