package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
)

// docStore keeps documents of one kind in their own table: id, state, created, updated and the
// JSON document.
type docStore[T agentenv.Doc] struct {
	l     *Ledger
	table string // a constant of this package, never user input
	kind  string // for messages: deployment, run
}

var _ agentenv.DocStore[agentenv.Deployment] = (*docStore[agentenv.Deployment])(nil)

// Put inserts or replaces the document with d.DocID().
func (s *docStore[T]) Put(ctx context.Context, d T) error {
	id := d.DocID()
	if id == "" {
		return fmt.Errorf("sqlite: put %s: empty id: %w", s.kind, agentenv.ErrInvalid)
	}
	doc, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("sqlite: put %s %s: %w", s.kind, id, err)
	}
	q := `INSERT INTO ` + s.table + ` (id, state, created, updated, doc)
		VALUES (?1, ?2, COALESCE(?3, ?4), ?4, ?5)
		ON CONFLICT (id) DO UPDATE SET state = excluded.state,
			created = COALESCE(?3, ` + s.table + `.created), updated = excluded.updated, doc = excluded.doc`
	err = s.l.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, q, id, d.DocState(), timeArg(d.DocCreated()), timeArg(time.Now()), string(doc))
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: put %s %s: %w", s.kind, id, err)
	}
	return nil
}

// Get returns the document with id, or an error wrapping agentenv.ErrNotFound.
func (s *docStore[T]) Get(ctx context.Context, id string) (T, error) {
	var zero T
	var doc string
	err := s.l.db.QueryRowContext(ctx, `SELECT doc FROM `+s.table+` WHERE id = ?`, id).Scan(&doc)
	if errors.Is(err, sql.ErrNoRows) {
		err = agentenv.ErrNotFound
	}
	if err != nil {
		return zero, fmt.Errorf("sqlite: get %s %s: %w", s.kind, id, err)
	}
	var d T
	if err := json.Unmarshal([]byte(doc), &d); err != nil {
		return zero, fmt.Errorf("sqlite: get %s %s: %w", s.kind, id, err)
	}
	return d, nil
}

// List returns the documents whose state is one of states (all when empty), newest first, at
// most limit of them (all when limit <= 0).
func (s *docStore[T]) List(ctx context.Context, states []string, limit int) ([]T, error) {
	q := `SELECT doc FROM ` + s.table
	var args []any
	if len(states) > 0 {
		q += ` WHERE state IN (?` + strings.Repeat(", ?", len(states)-1) + `)`
		for _, st := range states {
			args = append(args, st)
		}
	}
	q += ` ORDER BY created DESC, rowid DESC`
	if limit > 0 {
		q += ` LIMIT ?`
		args = append(args, limit)
	}
	rows, err := s.l.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list %ss: %w", s.kind, err)
	}
	defer rows.Close()
	var out []T
	for rows.Next() {
		var doc string
		if err := rows.Scan(&doc); err != nil {
			return nil, fmt.Errorf("sqlite: list %ss: %w", s.kind, err)
		}
		var d T
		if err := json.Unmarshal([]byte(doc), &d); err != nil {
			return nil, fmt.Errorf("sqlite: list %ss: %w", s.kind, err)
		}
		out = append(out, d)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list %ss: %w", s.kind, err)
	}
	return out, nil
}
