// Package ledger opens the agentenv.Ledger that a DSN names: a bbolt file on this host (the
// default, package bolt) or a PostgreSQL database shared by a team or a fleet (package
// postgres).
package ledger

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/ledger/postgres"
)

// Open opens the ledger named by dsn:
//
//	postgres://... or postgresql://...  a PostgreSQL database (see package postgres)
//	bolt://PATH                          a bbolt file: bolt:///abs/ledger.bolt, bolt://rel.bolt
//	PATH                                 a bbolt file
//	""                                   the bbolt file at DefaultPath
//
// sqlite://PATH, the SQLite ledger of earlier versions, and any other scheme are errors
// wrapping agentenv.ErrInvalid. Errors never show a password from the DSN. A nil logger
// discards.
func Open(ctx context.Context, dsn string, logger *slog.Logger) (agentenv.Ledger, error) {
	scheme, rest, isURL := strings.Cut(dsn, "://")
	switch {
	case dsn == "":
		path, err := DefaultPath()
		if err != nil {
			return nil, err
		}
		warnOldLedger(filepath.Join(filepath.Dir(path), oldDefaultFile), logger)
		return openBolt(ctx, path, logger)
	case !isURL:
		return openBolt(ctx, dsn, logger)
	case strings.EqualFold(scheme, "bolt"):
		return openBolt(ctx, rest, logger)
	case strings.EqualFold(scheme, "sqlite"):
		return nil, fmt.Errorf("ledger %s: the SQLite ledger was replaced by a bbolt file: name one as bolt://PATH or a plain path (default %s): %w",
			postgres.Redact(dsn), defaultPathHint(), agentenv.ErrInvalid)
	case strings.EqualFold(scheme, "postgres"), strings.EqualFold(scheme, "postgresql"):
		l, err := postgres.Open(ctx, dsn, logger)
		if err != nil {
			return nil, err
		}
		return l, nil
	}
	return nil, fmt.Errorf("ledger %s: unknown scheme %q, want postgres://, postgresql://, bolt://PATH or a file path: %w",
		postgres.Redact(dsn), scheme, agentenv.ErrInvalid)
}

// openBolt opens a bbolt ledger, returning a nil interface on error.
func openBolt(ctx context.Context, path string, logger *slog.Logger) (agentenv.Ledger, error) {
	l, err := bolt.Open(ctx, path, logger)
	if err != nil {
		return nil, err
	}
	return l, nil
}

// DefaultPath returns where the bbolt ledger lives when no DSN is given:
// $XDG_STATE_HOME/agentenv/ledger.bolt, or ~/.local/state/agentenv/ledger.bolt when
// XDG_STATE_HOME is unset or not absolute (as the XDG Base Directory spec says to treat it).
func DefaultPath() (string, error) {
	if dir := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(dir) {
		return filepath.Join(dir, "agentenv", defaultFile), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("ledger: default path: %w", err)
	}
	return filepath.Join(home, ".local", "state", "agentenv", defaultFile), nil
}

// defaultFile is the name of the ledger file in the state directory.
const defaultFile = "ledger.bolt"

// oldDefaultFile is the SQLite ledger that earlier versions kept in the state directory.
const oldDefaultFile = "ledger.db"

// warnOldLedger warns when path holds an SQLite ledger of an earlier version: its records are
// not in the bbolt ledger, so what it still lists live was never torn down by this one.
func warnOldLedger(path string, logger *slog.Logger) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	head := make([]byte, 16)
	if _, err := io.ReadFull(f, head); err != nil || string(head) != "SQLite format 3\x00" {
		return
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	logger.Warn("an SQLite ledger of an earlier agentenv is beside the bbolt ledger, which does not read it: "+
		"tear down what it still records with that version (agentenv gc, agentenv sandbox ls), then remove it", "path", path)
}

// defaultPathHint is DefaultPath for a message, or the file's name when it has none.
func defaultPathHint() string {
	if p, err := DefaultPath(); err == nil {
		return p
	}
	return defaultFile
}
