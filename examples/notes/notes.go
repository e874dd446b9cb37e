// Package notes is an example env whose state lives in PostgreSQL: notes with a title, a body
// and tags, in the table <schema>.notes. Its tools add, list, search and delete notes; its data
// plane resets (deletes every note), adds (data parts {title, body, tags}, text parts as bodies
// with a derived title, text files likewise) and gets (every note as a data part, by id).
package notes

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentenv/agentenv/envsdk"
	"github.com/agentenv/agentenv/internal/cleanup"
)

// rollbackTimeout bounds the rollback of a transaction that did not commit.
const rollbackTimeout = 5 * time.Second

// DefaultSchema is the schema holding the notes table when Config.Schema is empty.
const DefaultSchema = "notes"

// Config configures [Run].
type Config struct {
	// Listen is the HTTP address (host:port) to serve on, unless Stdio is set.
	Listen string
	// DatabaseURL is the PostgreSQL DSN (postgres://...).
	DatabaseURL string
	// Schema holds the notes table; empty means DefaultSchema. It is created if missing.
	Schema string
	// Stdio serves the MCP tools over stdin/stdout instead of HTTP.
	Stdio bool
}

// Run connects to the database (retrying until ctx's deadline, or envsdk.DefaultConnectTimeout),
// creates the schema and table if missing, and serves the notes env until ctx ends. A nil logger
// discards.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	pool, err := envsdk.OpenDB(ctx, cfg.DatabaseURL, logger)
	if err != nil {
		return err
	}
	defer pool.Close()
	s, err := New(ctx, pool, cfg.Schema, logger)
	if err != nil {
		return err
	}
	if cfg.Stdio {
		return s.ServeStdio(ctx)
	}
	return s.Serve(ctx, cfg.Listen)
}

// Note is one note as the tools and the data plane show it.
type Note struct {
	ID        int64     `json:"id"`
	Title     string    `json:"title"`
	Body      string    `json:"body"`
	Tags      []string  `json:"tags"`
	CreatedAt time.Time `json:"created_at"`
}

// NoteInput is a new note: the input of add_note and the data part data/add takes.
type NoteInput struct {
	Title string   `json:"title" jsonschema:"the note's title"`
	Body  string   `json:"body,omitempty" jsonschema:"the note's text"`
	Tags  []string `json:"tags,omitempty" jsonschema:"labels to find the note by"`
}

// AddResult is the result of add_note.
type AddResult struct {
	ID int64 `json:"id"`
}

// NotesResult is the result of list_notes and search_notes.
type NotesResult struct {
	Notes []Note `json:"notes"`
}

// DeleteResult is the result of delete_note.
type DeleteResult struct {
	Deleted bool `json:"deleted"`
}

// Limits of list_notes.
const (
	defaultListLimit = 50
	maxListLimit     = 1000
)

// store is the notes table in one schema.
type store struct {
	pool  *pgxpool.Pool
	table string // quoted schema.table
}

// New creates the schema and table if missing and returns the notes env server over pool; the
// caller keeps owning pool. Concurrent calls (several servers starting at once) are safe. An
// empty schema means DefaultSchema; a nil logger discards.
func New(ctx context.Context, pool *pgxpool.Pool, schema string, logger *slog.Logger) (*envsdk.Server, error) {
	if schema == "" {
		schema = DefaultSchema
	}
	st := &store{pool: pool, table: pgx.Identifier{schema, "notes"}.Sanitize()}
	if err := st.migrate(ctx, schema); err != nil {
		return nil, fmt.Errorf("notes: %w", err)
	}
	s := envsdk.New(envsdk.Options{Name: "notes", Description: "Notes kept in PostgreSQL.", Logger: logger})

	envsdk.AddTool(s, "add_note", "Add a note; returns its id.", func(ctx context.Context, in NoteInput) (AddResult, error) {
		if strings.TrimSpace(in.Title) == "" {
			return AddResult{}, errors.New("title is empty")
		}
		id, err := st.insert(ctx, st.pool, in)
		return AddResult{ID: id}, err
	})
	envsdk.AddTool(s, "list_notes", "List notes, oldest first.", func(ctx context.Context, in struct {
		Limit int `json:"limit,omitempty" jsonschema:"at most this many notes; default 50, at most 1000"`
	}) (NotesResult, error) {
		limit := in.Limit
		if limit <= 0 {
			limit = defaultListLimit
		}
		notes, err := st.query(ctx, "ORDER BY id LIMIT $1", min(limit, maxListLimit))
		return NotesResult{Notes: notes}, err
	})
	envsdk.AddTool(s, "search_notes", "Find notes whose title or body contains query, ignoring case.", func(ctx context.Context, in struct {
		Query string `json:"query" jsonschema:"text to look for"`
	}) (NotesResult, error) {
		pattern := "%" + likeEscaper.Replace(in.Query) + "%"
		notes, err := st.query(ctx, `WHERE title ILIKE $1 OR body ILIKE $1 ORDER BY id LIMIT $2`, pattern, maxListLimit)
		return NotesResult{Notes: notes}, err
	})
	envsdk.AddTool(s, "delete_note", "Delete the note with this id.", func(ctx context.Context, in struct {
		ID int64 `json:"id" jsonschema:"the note's id"`
	}) (DeleteResult, error) {
		tag, err := st.pool.Exec(ctx, "DELETE FROM "+st.table+" WHERE id = $1", in.ID)
		if err != nil {
			return DeleteResult{}, fmt.Errorf("delete note %d: %w", in.ID, err)
		}
		return DeleteResult{Deleted: tag.RowsAffected() == 1}, nil
	})

	s.HandleReset(st.reset)
	s.HandleAdd(st.add)
	s.HandleGet(st.get)
	return s, nil
}

// likeEscaper escapes the LIKE wildcards (the default escape character is a backslash).
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// migrate creates the schema and the table if missing. An advisory lock serializes concurrent
// starts, since CREATE ... IF NOT EXISTS can still fail on a race in the catalog.
func (st *store) migrate(ctx context.Context, schema string) error {
	tx, err := st.pool.Begin(ctx)
	if err != nil {
		return fmt.Errorf("migrate: %w", err)
	}
	defer cleanup.Do(ctx, rollbackTimeout, tx.Rollback) //nolint:errcheck // a no-op after commit
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext($1))", "agentenv/notes/"+schema); err != nil {
		return fmt.Errorf("migrate: lock: %w", err)
	}
	// A deployed server's role owns its schema but may not create schemas, and PostgreSQL
	// checks that right even when IF NOT EXISTS would skip the creation: ask first.
	var exists bool
	if err := tx.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_namespace WHERE nspname = $1)", schema).Scan(&exists); err != nil {
		return fmt.Errorf("migrate: find schema %s: %w", schema, err)
	}
	var stmts []string
	if !exists {
		stmts = append(stmts, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	}
	stmts = append(stmts,
		"CREATE TABLE IF NOT EXISTS "+st.table+` (
			id         bigserial PRIMARY KEY,
			title      text NOT NULL,
			body       text NOT NULL DEFAULT '',
			tags       text[] NOT NULL DEFAULT '{}',
			created_at timestamptz NOT NULL DEFAULT now()
		)`)
	for _, stmt := range stmts {
		if _, err := tx.Exec(ctx, stmt); err != nil {
			return fmt.Errorf("migrate schema %s: %w", schema, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return fmt.Errorf("migrate: commit: %w", err)
	}
	return nil
}

// execer is what insert needs: a pool or a transaction.
type execer interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// insert adds one note and returns its id.
func (st *store) insert(ctx context.Context, db execer, in NoteInput) (int64, error) {
	tags := in.Tags
	if tags == nil {
		tags = []string{}
	}
	var id int64
	err := db.QueryRow(ctx, "INSERT INTO "+st.table+" (title, body, tags) VALUES ($1, $2, $3) RETURNING id",
		in.Title, in.Body, tags).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("insert note: %w", err)
	}
	return id, nil
}

// query returns the notes selected by the clause that follows FROM.
func (st *store) query(ctx context.Context, clause string, args ...any) ([]Note, error) {
	rows, err := st.pool.Query(ctx, "SELECT id, title, body, tags, created_at FROM "+st.table+" "+clause, args...)
	if err != nil {
		return nil, fmt.Errorf("query notes: %w", err)
	}
	notes, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (Note, error) {
		var n Note
		err := row.Scan(&n.ID, &n.Title, &n.Body, &n.Tags, &n.CreatedAt)
		return n, err
	})
	if err != nil {
		return nil, fmt.Errorf("query notes: %w", err)
	}
	if notes == nil {
		notes = []Note{}
	}
	return notes, nil
}
