package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
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

// Page returns one page of the documents q selects; see agentenv.DocStore. The cursor is the
// creation time and rowid of the page's last document.
func (s *docStore[T]) Page(ctx context.Context, q agentenv.DocQuery) (agentenv.DocPage[T], error) {
	var page agentenv.DocPage[T]
	limit := q.Limit
	if limit <= 0 {
		limit = agentenv.DefaultPageLimit
	}
	var where []string
	var args []any
	if len(q.States) > 0 {
		where = append(where, `state IN (?`+strings.Repeat(", ?", len(q.States)-1)+`)`)
		for _, st := range q.States {
			args = append(args, st)
		}
	}
	paths := make([]string, 0, len(q.Fields))
	for p := range q.Fields {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		jp, err := jsonPath(p)
		if err != nil {
			return page, fmt.Errorf("sqlite: page %ss: %w", s.kind, err)
		}
		where = append(where, `json_extract(doc, ?) = ?`)
		args = append(args, jp, q.Fields[p])
	}
	if q.Text != "" {
		where = append(where, `doc LIKE ? ESCAPE '\'`)
		args = append(args, "%"+likeEscaper.Replace(q.Text)+"%")
	}
	if !q.From.IsZero() {
		where = append(where, `created >= ?`)
		args = append(args, timeArg(q.From))
	}
	if !q.To.IsZero() {
		where = append(where, `created < ?`)
		args = append(args, timeArg(q.To))
	}
	cmp, order := "<", "DESC"
	if q.Oldest {
		cmp, order = ">", "ASC"
	}
	if q.Cursor != "" {
		created, rowid, err := parseCursor(q.Cursor)
		if err != nil {
			return page, fmt.Errorf("sqlite: page %ss: %w", s.kind, err)
		}
		where = append(where, `(created, rowid) `+cmp+` (?, ?)`)
		args = append(args, created, rowid)
	}
	query := `SELECT created, rowid, doc FROM ` + s.table
	if len(where) > 0 {
		query += ` WHERE ` + strings.Join(where, " AND ")
	}
	query += ` ORDER BY created ` + order + `, rowid ` + order + ` LIMIT ?`
	args = append(args, limit+1)
	rows, err := s.l.db.QueryContext(ctx, query, args...)
	if err != nil {
		return page, fmt.Errorf("sqlite: page %ss: %w", s.kind, err)
	}
	defer rows.Close()
	var last string
	for rows.Next() {
		var created, doc string
		var rowid int64
		if err := rows.Scan(&created, &rowid, &doc); err != nil {
			return page, fmt.Errorf("sqlite: page %ss: %w", s.kind, err)
		}
		if len(page.Docs) == limit {
			page.Next = last
			break
		}
		var d T
		if err := json.Unmarshal([]byte(doc), &d); err != nil {
			return page, fmt.Errorf("sqlite: page %ss: %w", s.kind, err)
		}
		page.Docs = append(page.Docs, d)
		last = created + "/" + strconv.FormatInt(rowid, 10)
	}
	if err := rows.Err(); err != nil {
		return page, fmt.Errorf("sqlite: page %ss: %w", s.kind, err)
	}
	return page, nil
}

// likeEscaper escapes the wildcards of a LIKE pattern (with ESCAPE '\').
var likeEscaper = strings.NewReplacer(`\`, `\\`, `%`, `\%`, `_`, `\_`)

// jsonPath turns a dotted path ("attrs.episode") into a SQLite JSON path ($."attrs"."episode").
func jsonPath(dotted string) (string, error) {
	var b strings.Builder
	b.WriteString("$")
	for _, el := range strings.Split(dotted, ".") {
		if el == "" || strings.ContainsAny(el, `"\`) {
			return "", fmt.Errorf("field path %q: %w", dotted, agentenv.ErrInvalid)
		}
		b.WriteString(`."` + el + `"`)
	}
	return b.String(), nil
}

// parseCursor splits a cursor made by Page into its creation time and rowid.
func parseCursor(c string) (string, int64, error) {
	created, id, ok := strings.Cut(c, "/")
	rowid, err := strconv.ParseInt(id, 10, 64)
	if _, terr := time.Parse(time.RFC3339Nano, created); !ok || err != nil || terr != nil {
		return "", 0, fmt.Errorf("cursor %q: %w", c, agentenv.ErrInvalid)
	}
	return created, rowid, nil
}
