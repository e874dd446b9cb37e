// Package dbmcp is the db-mcp sidecar: an MCP server over SQL on an env's service database. Its
// tools are query (one read-only statement, run in a READ ONLY transaction that is always
// rolled back, with a row cap and a statement timeout), list_tables and describe_table. It is
// an envsdk server, so it also publishes a card; it has no data plane.
//
// The READ ONLY transaction is a convenience, not the bound: what db-mcp cannot do is what its
// role may not do. A deployment gives it a role with SELECT and nothing else (spec's
// DBRoleDBMCP), so that the server itself refuses COPY ... TO PROGRAM, pg_read_file,
// lo_import, writes and SET ROLE. Run warns when its role could do more.
package dbmcp

import (
	"context"
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
)

// Config configures [Run].
type Config struct {
	// Listen is the HTTP address (host:port) to serve on.
	Listen string
	// DatabaseURL is the PostgreSQL DSN (postgres://...) of the service database.
	DatabaseURL string
}

// Run connects to the database (retrying until ctx's deadline, or envsdk.DefaultConnectTimeout) and
// serves db-mcp until ctx ends. A nil logger discards.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	pool, err := envsdk.OpenDB(ctx, cfg.DatabaseURL, logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if powers, err := privileged(ctx, pool); err != nil {
		logger.Warn("db-mcp: cannot read its role's rights", "err", err)
	} else if len(powers) > 0 {
		logger.Warn("db-mcp: its role can do more than read; a read-only transaction does not stop it running programs or reading files on the server", "rights", powers)
	}
	return New(pool, logger).Serve(ctx, cfg.Listen)
}

// privileged returns the rights of the pool's role beyond reading tables: superuser, and
// membership of the roles that read, write or run things on the database server.
func privileged(ctx context.Context, pool *pgxpool.Pool) ([]string, error) {
	var powers []string
	err := pool.QueryRow(ctx, `SELECT array_remove(ARRAY[
		CASE WHEN rolsuper THEN 'superuser' END,
		CASE WHEN pg_has_role(current_user, 'pg_read_server_files', 'MEMBER') THEN 'pg_read_server_files' END,
		CASE WHEN pg_has_role(current_user, 'pg_write_server_files', 'MEMBER') THEN 'pg_write_server_files' END,
		CASE WHEN pg_has_role(current_user, 'pg_execute_server_program', 'MEMBER') THEN 'pg_execute_server_program' END
	], NULL) FROM pg_roles WHERE rolname = current_user`).Scan(&powers)
	if err != nil {
		return nil, fmt.Errorf("role rights: %w", err)
	}
	return powers, nil
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
