package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/httpserve"
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
	ln, err := httpserve.Listen(ctx, addr, cfg.MaxConns)
	if err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	srv := httpserve.New(g.Handler(), httpserve.Limits{
		ReadTimeout: cfg.ReadTimeout, WriteTimeout: cfg.WriteTimeout, IdleTimeout: cfg.IdleTimeout,
	})
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
