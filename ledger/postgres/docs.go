package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
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

// Page returns one page of the documents q selects; see agentenv.DocStore. The cursor is the
// creation time and sequence number of the page's last document.
func (s *docStore[T]) Page(ctx context.Context, q agentenv.DocQuery) (agentenv.DocPage[T], error) {
	var page agentenv.DocPage[T]
	limit := q.Limit
	if limit <= 0 {
		limit = agentenv.DefaultPageLimit
	}
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if len(q.States) > 0 {
		where = append(where, `state = ANY(`+arg(q.States)+`::text[])`)
	}
	paths := make([]string, 0, len(q.Fields))
	for p := range q.Fields {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		els := strings.Split(p, ".")
		if slices.Contains(els, "") {
			return page, fmt.Errorf("postgres: page %ss: field path %q: %w", s.kind, p, agentenv.ErrInvalid)
		}
		where = append(where, `doc #>> `+arg(els)+`::text[] = `+arg(q.Fields[p]))
	}
	if q.Text != "" {
		where = append(where, `doc::text ILIKE `+arg("%"+likeEscaper.Replace(q.Text)+"%")+` ESCAPE '\'`)
	}
	if !q.From.IsZero() {
		where = append(where, `created >= `+arg(q.From))
	}
	if !q.To.IsZero() {
		where = append(where, `created < `+arg(q.To))
	}
	cmp, order := "<", "DESC"
	if q.Oldest {
		cmp, order = ">", "ASC"
	}
	if q.Cursor != "" {
		created, seq, err := parseCursor(q.Cursor)
		if err != nil {
			return page, fmt.Errorf("postgres: page %ss: %w", s.kind, err)
		}
		where = append(where, `(created, seq) `+cmp+` (`+arg(created)+`::timestamptz, `+arg(seq)+`::bigint)`)
	}
	query := `SELECT created, seq, doc FROM ` + s.table
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY created ` + order + `, seq ` + order + ` LIMIT ` + arg(limit+1)
	rows, err := s.l.pool.Query(ctx, query, args...)
	if err != nil {
		return page, fmt.Errorf("postgres: page %ss: %w", s.kind, err)
	}
	defer rows.Close()
	var last string
	for rows.Next() {
		var created time.Time
		var seq int64
		var doc []byte
		if err := rows.Scan(&created, &seq, &doc); err != nil {
			return page, fmt.Errorf("postgres: page %ss: %w", s.kind, err)
		}
		if len(page.Docs) == limit {
			page.Next = last
			break
		}
		var d T
		if err := json.Unmarshal(doc, &d); err != nil {
			return page, fmt.Errorf("postgres: page %ss: %w", s.kind, err)
		}
		page.Docs = append(page.Docs, d)
		last = created.UTC().Format(time.RFC3339Nano) + "/" + strconv.FormatInt(seq, 10)
	}
	if err := rows.Err(); err != nil {
		return page, fmt.Errorf("postgres: page %ss: %w", s.kind, err)
	}
	return page, nil
}

// likeEscaper escapes the wildcards of a LIKE pattern (with ESCAPE '\').
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// parseCursor splits a cursor made by Page into its creation time and sequence number.
func parseCursor(c string) (time.Time, int64, error) {
	created, id, ok := strings.Cut(c, "/")
	seq, err := strconv.ParseInt(id, 10, 64)
	t, terr := time.Parse(time.RFC3339Nano, created)
	if !ok || err != nil || terr != nil {
		return time.Time{}, 0, fmt.Errorf("cursor %q: %w", c, agentenv.ErrInvalid)
	}
	return t, seq, nil
}
