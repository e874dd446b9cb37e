// Package ledger opens the agentenv.Ledger that a DSN names: a SQLite file on this host (the
// default, package sqlite) or a PostgreSQL database shared by a team or a fleet (package
// postgres).
package ledger

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/postgres"
	"github.com/agentenv/agentenv/ledger/sqlite"
)

// Open opens the ledger named by dsn:
//
//	postgres://... or postgresql://...  a PostgreSQL database (see package postgres)
//	sqlite://PATH                        a SQLite file: sqlite:///abs/ledger.db, sqlite://rel.db
//	PATH                                 a SQLite file
//	""                                   the SQLite file at DefaultPath
//
// Any other scheme is an error wrapping agentenv.ErrInvalid. Errors never show a password from
// the DSN. A nil logger discards.
func Open(ctx context.Context, dsn string, logger *slog.Logger) (agentenv.Ledger, error) {
	scheme, rest, isURL := strings.Cut(dsn, "://")
	switch {
	case dsn == "":
		path, err := DefaultPath()
		if err != nil {
			return nil, err
		}
		return openSQLite(ctx, path, logger)
	case !isURL:
		return openSQLite(ctx, dsn, logger)
	case strings.EqualFold(scheme, "sqlite"):
		return openSQLite(ctx, rest, logger)
	case strings.EqualFold(scheme, "postgres"), strings.EqualFold(scheme, "postgresql"):
		l, err := postgres.Open(ctx, dsn, logger)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
	return nil, fmt.Errorf("ledger %s: unknown scheme %q, want postgres://, postgresql://, sqlite://PATH or a file path: %w",
		postgres.Redact(dsn), scheme, agentenv.ErrInvalid)
}

// openSQLite opens a SQLite ledger, returning a nil interface on error.
func openSQLite(ctx context.Context, path string, logger *slog.Logger) (agentenv.Ledger, error) {
	l, err := sqlite.Open(ctx, path, logger)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// DefaultPath returns where the SQLite ledger lives when no DSN is given:
// $XDG_STATE_HOME/agentenv/ledger.db, or ~/.local/state/agentenv/ledger.db when XDG_STATE_HOME
// is unset or not absolute (as the XDG Base Directory spec says to treat it).
func DefaultPath() (string, error) {
	if dir := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "agentenv", "ledger.db"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("ledger: default path: %w", err)
	}
	return filepath.Join(home, ".local", "state", "agentenv", "ledger.db"), nil
}
