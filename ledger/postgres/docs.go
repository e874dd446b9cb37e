package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/jackc/pgx/v5"
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
		return fmt.Errorf("postgres: put %s: empty id: %w", s.kind, agentenv.ErrInvalid)
	}
	doc, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("postgres: put %s %s: %w", s.kind, id, err)
	}
	q := `INSERT INTO ` + s.table + ` (id, state, created, updated, doc)
		VALUES ($1, $2, COALESCE($3::timestamptz, $4::timestamptz), $4, $5)
		ON CONFLICT (id) DO UPDATE SET state = excluded.state,
			created = COALESCE($3::timestamptz, ` + s.table + `.created), updated = excluded.updated, doc = excluded.doc`
	if _, err := s.l.pool.Exec(ctx, q, id, d.DocState(), timeArg(d.DocCreated()), time.Now(), doc); err != nil {
		return fmt.Errorf("postgres: put %s %s: %w", s.kind, id, err)
	}
	return nil
}

// Get returns the document with id, or an error wrapping agentenv.ErrNotFound.
func (s *docStore[T]) Get(ctx context.Context, id string) (T, error) {
	var d, zero T
	var doc []byte
	err := s.l.pool.QueryRow(ctx, `SELECT doc FROM `+s.table+` WHERE id = $1`, id).Scan(&doc)
	if errors.Is(err, pgx.ErrNoRows) {
		err = agentenv.ErrNotFound
	}
	if err != nil {
		return zero, fmt.Errorf("postgres: get %s %s: %w", s.kind, id, err)
	}
	if err := json.Unmarshal(doc, &d); err != nil {
		return zero, fmt.Errorf("postgres: get %s %s: %w", s.kind, id, err)
	}
	return d, nil
}

// List returns the documents whose state is one of states (all when empty), newest first, at
// most limit of them (all when limit <= 0).
func (s *docStore[T]) List(ctx context.Context, states []string, limit int) ([]T, error) {
	q := `SELECT doc FROM ` + s.table + ` WHERE (cardinality($1::text[]) = 0 OR state = ANY($1::text[]))
		ORDER BY created DESC, seq DESC`
	args := []any{states}
	if states == nil {
		args[0] = []string{}
	}
	if limit > 0 {
		q += ` LIMIT $2`
		args = append(args, limit)
	}
	rows, err := s.l.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list %ss: %w", s.kind, err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (T, error) {
		var d T
		var doc []byte
		if err := row.Scan(&doc); err != nil {
			return d, err
		}
		return d, json.Unmarshal(doc, &d)
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: list %ss: %w", s.kind, err)
	}
	return out, nil
}
