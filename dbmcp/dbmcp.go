// Package dbmcp is the db-mcp sidecar: an MCP server over SQL on an env's service database. Its
// tools are query (one read-only statement, run in a READ ONLY transaction that is always
// rolled back, with a row cap and a statement timeout), list_tables and describe_table. It is
// an envsdk server, so it also publishes a card; it has no data plane.
package dbmcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentenv/agentenv/envsdk"
)

// Defaults and bounds of the tools.
const (
	// DefaultMaxRows is the row cap of query when the caller gives none.
	DefaultMaxRows = 200
	// MaxRows is the largest row cap a caller may ask for.
	MaxRows = 1000
	// StatementTimeout bounds each statement the tools run.
	StatementTimeout = 30 * time.Second
	// DefaultConnectTimeout bounds [Connect] when its context has no deadline.
	DefaultConnectTimeout = 60 * time.Second
)

// Config configures [Run].
type Config struct {
	// Listen is the HTTP address (host:port) to serve on.
	Listen string
	// DatabaseURL is the PostgreSQL DSN (postgres://...) of the service database.
	DatabaseURL string
}

// Run connects to the database (retrying until ctx's deadline, or DefaultConnectTimeout) and
// serves db-mcp until ctx ends. A nil logger discards.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	pool, err := Connect(ctx, cfg.DatabaseURL, logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	return New(pool, logger).Serve(ctx, cfg.Listen)
}

// Connect opens a pool on dsn and waits until the database answers a query, retrying until
// ctx's deadline, or for DefaultConnectTimeout if ctx has none. A nil logger discards.
func Connect(ctx context.Context, dsn string, logger *slog.Logger) (*pgxpool.Pool, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultConnectTimeout)
		defer cancel()
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, fmt.Errorf("dbmcp: open database: %w", err)
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
			return nil, fmt.Errorf("dbmcp: database not ready: %w", errors.Join(err, context.Cause(ctx)))
		case <-time.After(wait):
		}
		wait = min(2*wait, 2*time.Second)
	}
}

// New returns the db-mcp server over pool; the caller keeps owning pool. A nil logger discards.
func New(pool *pgxpool.Pool, logger *slog.Logger) *envsdk.Server {
	db := &db{pool: pool}
	s := envsdk.New(envsdk.Options{Name: "db-mcp", Description: "Read-only SQL on the env's service database.", Logger: logger})
	envsdk.AddTool(s, "query",
		"Run one read-only SQL statement and return its columns and rows. Writes are refused.",
		db.query)
	envsdk.AddTool(s, "list_tables",
		"List the tables and views outside the system schemas.",
		db.listTables)
	envsdk.AddTool(s, "describe_table",
		"Describe a table's columns and primary key.",
		db.describeTable)
	return s
}

// db runs the tools' SQL.
type db struct {
	pool *pgxpool.Pool
}
