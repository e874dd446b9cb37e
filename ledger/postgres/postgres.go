// Package postgres is the agentenv.Ledger for a team or a fleet: tables in a PostgreSQL
// database that many hosts share, reached with pgx through a connection pool.
//
// The tables are named agentenv_*, in the first schema of the connection's search_path (set
// search_path in the DSN to keep them apart). Open creates and migrates them under a
// transaction-scoped advisory lock, so processes that open a new database at once do not race.
// [Ledger.Update] locks the row with SELECT ... FOR UPDATE. Times are kept to the microsecond.
package postgres

import (
	"context"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// rollbackTimeout bounds the rollback of a failed transaction, which runs even when ctx ended.
const rollbackTimeout = 5 * time.Second

// Ledger is an agentenv.Ledger kept in PostgreSQL. It is safe for concurrent use by several
// goroutines and by several processes sharing the database.
type Ledger struct {
	pool *pgxpool.Pool
	name string // the DSN without its password, for messages
	log  *slog.Logger

	deployments *docStore[agentenv.Deployment]
	runs        *docStore[agentenv.Run]
}

var _ agentenv.Ledger = (*Ledger)(nil)

// Open connects to the database at dsn (a postgres:// URL or key=value string, as pgx takes)
// and migrates its tables to the newest version. A nil logger discards. Errors name the DSN
// with its password redacted.
func Open(ctx context.Context, dsn string, logger *slog.Logger) (*Ledger, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	name := Redact(dsn)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("postgres: open %s: %w: %w", name, agentenv.ErrInvalid, err)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: open %s: %w", name, err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open %s: %w", name, err)
	}
	l := &Ledger{pool: pool, name: name, log: logger.With("ledger", name)}
	if err := l.migrate(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: open %s: %w", name, err)
	}
	l.deployments = &docStore[agentenv.Deployment]{l: l, table: "agentenv_deployments", kind: "deployment"}
	l.runs = &docStore[agentenv.Run]{l: l, table: "agentenv_runs", kind: "run"}
	l.log.Debug("ledger open")
	return l, nil
}

// Deployments returns the store of deployment documents.
func (l *Ledger) Deployments() agentenv.DocStore[agentenv.Deployment] { return l.deployments }

// Runs returns the store of run documents.
func (l *Ledger) Runs() agentenv.DocStore[agentenv.Run] { return l.runs }

// Close closes the connection pool, waiting for connections in use to be returned. Calls after
// Close fail; Close itself may be called again.
func (l *Ledger) Close() error {
	l.pool.Close()
	return nil
}

// inTx runs fn in a transaction and commits it if fn returns nil. fn's error is returned as it
// is.
func (l *Ledger) inTx(ctx context.Context, fn func(tx pgx.Tx) error) error {
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		// Rollback on a broken connection fails too; the server rolls back on its own then.
		_ = cleanup.Do(ctx, rollbackTimeout, tx.Rollback)
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// Patterns of passwords in DSNs: a key=value pair, a URL query parameter, and the user info of
// a URL that net/url cannot parse.
var (
	passwordParam = regexp.MustCompile(`(?i)(password\s*=\s*)('(?:[^'\\]|\\.)*'|\S+)`)
	passwordQuery = regexp.MustCompile(`(?i)([?&]password=)[^&#]*`)
	passwordUser  = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9+.-]*://[^:/?#@]*:).*@`)
)

// Redact returns dsn with any password replaced by "xxxxx", for messages and logs. It takes
// URLs of any scheme (a password in the user info or a password query parameter) and
// key=value strings.
func Redact(dsn string) string {
	if !strings.Contains(dsn, "://") {
		return passwordParam.ReplaceAllString(dsn, "${1}xxxxx")
	}
	dsn = passwordQuery.ReplaceAllString(dsn, "${1}xxxxx")
	if u, err := url.Parse(dsn); err == nil {
		return u.Redacted()
	}
	return passwordUser.ReplaceAllString(dsn, "${1}xxxxx@")
}
