package envsdk

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// DefaultConnectTimeout bounds OpenDB when its context has no deadline.
const DefaultConnectTimeout = 60 * time.Second

// pingIdle is how long a pooled connection may sit idle before it is pinged on its next use:
// an agent's tool calls come seconds apart, so nearly every one is checked (a round trip on the
// private network); a burst of queries within one call is not.
const pingIdle = 50 * time.Millisecond

// OpenDB opens a pool on the service DB at dsn and waits until it answers a query, retrying
// with backoff until ctx's deadline, or for DefaultConnectTimeout if ctx has none: an env
// server usually starts beside its database and must not fail because it came up first. A nil
// logger discards.
func OpenDB(ctx context.Context, dsn string, logger *slog.Logger) (*pgxpool.Pool, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultConnectTimeout)
		defer cancel()
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	// A connection idle for a while is pinged before use, so that one the server closed meanwhile
	// (a snapshot of the database closes its sessions) is replaced instead of failing a tool call.
	cfg.ShouldPing = func(_ context.Context, p pgxpool.ShouldPingParams) bool { return p.IdleDuration > pingIdle }
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("open database: %w", err)
	}
	wait := 100 * time.Millisecond
	for {
		var one int
		err = pool.QueryRow(ctx, "SELECT 1").Scan(&one)
		if err == nil {
			return pool, nil
		}
		logger.Warn("database not ready, retrying", "err", err, "in", wait)
		select {
		case <-ctx.Done():
			pool.Close()
			return nil, fmt.Errorf("database not ready: %w", errors.Join(err, context.Cause(ctx)))
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}
