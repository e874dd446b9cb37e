// Package sqlite is the default agentenv.Ledger: one SQLite file on this host, opened with the
// pure-Go driver modernc.org/sqlite (no cgo), shared safely by every agentenv process here.
//
// The file is opened in WAL mode, so readers never wait for a writer, with a busy timeout, and
// every write transaction starts with BEGIN IMMEDIATE: a writer takes the file's write lock
// before it reads, so [Ledger.Update] is atomic across processes and never fails with
// "database is locked" while another process holds the lock for less than the timeout.
// The schema is created and migrated by Open from SQL files embedded in the binary.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	_ "modernc.org/sqlite" // registers the "sqlite" driver
)

// busyTimeout is how long a writer waits for another process's write lock before failing.
const busyTimeout = 10 * time.Second

// Ledger is an agentenv.Ledger kept in one SQLite file. It is safe for concurrent use by
// several goroutines and by several processes opening the same file.
type Ledger struct {
	db   *sql.DB
	path string
	log  *slog.Logger

	// writing holds a token while one of this process's write transactions runs, so that
	// goroutines queue here (and give up when their context ends) instead of sleeping in
	// SQLite's busy handler; other processes wait on the file lock.
	writing chan struct{}

	deployments *docStore[agentenv.Deployment]
	runs        *docStore[agentenv.Run]
}

var _ agentenv.Ledger = (*Ledger)(nil)

// Open opens the ledger file at path, creating it and its parent directory (mode 0700) if
// missing, and migrates its schema to the newest version. A nil logger discards. The error
// names the path when the directory cannot be created or the file is not a usable database.
func Open(ctx context.Context, path string, logger *slog.Logger) (*Ledger, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if path == "" {
		return nil, fmt.Errorf("sqlite: open: empty path: %w", agentenv.ErrInvalid)
	}
	if strings.ContainsRune(path, '?') {
		return nil, fmt.Errorf("sqlite: open %s: a path with '?' is not supported: %w", path, agentenv.ErrInvalid)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := create(abs); err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	dsn := fmt.Sprintf("%s?_busy_timeout=%d&_journal_mode=WAL&_txlock=immediate", abs, busyTimeout.Milliseconds())
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	// The first connection applies the pragmas, which is where a file that is not a database
	// is found out.
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	l := &Ledger{db: db, path: abs, log: logger.With("ledger", abs), writing: make(chan struct{}, 1)}
	if err := l.migrate(ctx); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", abs, err)
	}
	l.deployments = &docStore[agentenv.Deployment]{l: l, table: "deployments", kind: "deployment"}
	l.runs = &docStore[agentenv.Run]{l: l, table: "runs", kind: "run"}
	l.log.Debug("ledger open")
	return l, nil
}

// create makes the parent directory and an empty file readable only by this user, unless the
// file exists. SQLite gives its -wal and -shm files the same mode.
func create(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return err
	}
	return f.Close()
}

// Path returns the absolute path of the ledger file.
func (l *Ledger) Path() string { return l.path }

// Deployments returns the store of deployment documents.
func (l *Ledger) Deployments() agentenv.DocStore[agentenv.Deployment] { return l.deployments }

// Runs returns the store of run documents.
func (l *Ledger) Runs() agentenv.DocStore[agentenv.Run] { return l.runs }

// Close closes the database. Calls after Close fail; Close itself may be called again.
func (l *Ledger) Close() error {
	if err := l.db.Close(); err != nil {
		return fmt.Errorf("sqlite: close %s: %w", l.path, err)
	}
	return nil
}

// write runs fn in a write transaction (BEGIN IMMEDIATE) and commits it if fn returns nil.
// fn's error is returned as it is.
func (l *Ledger) write(ctx context.Context, fn func(tx *sql.Tx) error) error {
	select {
	case l.writing <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("wait for writer: %w", context.Cause(ctx))
	}
	defer func() { <-l.writing }()
	tx, err := l.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	if err := fn(tx); err != nil {
		if rerr := rollback(tx); rerr != nil {
			return errors.Join(err, rerr)
		}
		return err
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// rollback rolls tx back, ignoring the error of a transaction already done.
func rollback(tx *sql.Tx) error {
	if err := tx.Rollback(); err != nil && !errors.Is(err, sql.ErrTxDone) {
		return fmt.Errorf("rollback: %w", err)
	}
	return nil
}
