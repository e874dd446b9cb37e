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

// timeLayout stores times as fixed-width RFC 3339 text in UTC with nanoseconds, so that they
// round-trip exactly and sort as text.
const timeLayout = "2006-01-02T15:04:05.000000000Z07:00"

const recordColumns = `id, kind, provider, sandbox_id, image, run, deployment, role, state,
	owner_host, owner_pid, owner_start, lease_until, expires, error, labels, attrs, created, updated`

// upsertRecord writes a record. ?18 is the given Created (NULL when zero), kept on replace when
// NULL; ?19 is the time of the write.
const upsertRecord = `INSERT INTO records (` + recordColumns + `)
	VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, COALESCE(?18, ?19), ?19)
	ON CONFLICT (id) DO UPDATE SET
		kind = excluded.kind, provider = excluded.provider, sandbox_id = excluded.sandbox_id,
		image = excluded.image, run = excluded.run, deployment = excluded.deployment,
		role = excluded.role, state = excluded.state, owner_host = excluded.owner_host,
		owner_pid = excluded.owner_pid, owner_start = excluded.owner_start,
		lease_until = excluded.lease_until, expires = excluded.expires, error = excluded.error,
		labels = excluded.labels, attrs = excluded.attrs,
		created = COALESCE(?18, records.created), updated = excluded.updated`

// Put inserts r, or replaces the record with r.ID. It sets Updated, and Created when it is
// zero: to the time of the write for a new record, and to the stored Created on a replace.
func (l *Ledger) Put(ctx context.Context, r agentenv.Record) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("sqlite: put record %s: %w", r.ID, err)
	}
	err := l.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, upsertRecord, recordArgs(r, time.Now())...)
		return err
	})
	if err != nil {
		return fmt.Errorf("sqlite: put record %s: %w", r.ID, err)
	}
	return nil
}

// insertRecord writes a record whose id is not taken, and nothing otherwise.
const insertRecord = `INSERT INTO records (` + recordColumns + `)
	VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, COALESCE(?18, ?19), ?19)
	ON CONFLICT (id) DO NOTHING`

// Insert writes r unless a record has r.ID: an error wrapping agentenv.ErrConflict then. One
// statement decides, so of concurrent inserts of one id, in any process, exactly one succeeds.
func (l *Ledger) Insert(ctx context.Context, r agentenv.Record) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("sqlite: insert record %s: %w", r.ID, err)
	}
	if err := l.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, insertRecord, recordArgs(r, time.Now())...)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		if err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("id is taken: %w", agentenv.ErrConflict)
		}
		return nil
	}); err != nil {
		return fmt.Errorf("sqlite: insert record %s: %w", r.ID, err)
	}
	return nil
}

// Get returns the record with id, or an error wrapping agentenv.ErrNotFound.
func (l *Ledger) Get(ctx context.Context, id string) (agentenv.Record, error) {
	r, err := getRecord(ctx, l.db, id)
	if err != nil {
		return agentenv.Record{}, fmt.Errorf("sqlite: get record %s: %w", id, err)
	}
	return r, nil
}

// Update applies fn to the record with id and writes it back in one write transaction, so no
// other writer, in this process or another, writes the record in between. It sets Updated. If
// fn returns an error, nothing is written and that error is returned as it is. fn must not
// change the record's ID, and must not write to the ledger: that would wait for itself.
func (l *Ledger) Update(ctx context.Context, id string, fn func(*agentenv.Record) error) (agentenv.Record, error) {
	var out agentenv.Record
	var fnErr error
	err := l.write(ctx, func(tx *sql.Tx) error {
		r, err := getRecord(ctx, tx, id)
		if err != nil {
			return err
		}
		if fnErr = fn(&r); fnErr != nil {
			return fnErr
		}
		if r.ID != id {
			return fmt.Errorf("fn changed the id to %q: %w", r.ID, agentenv.ErrInvalid)
		}
		if err := r.Validate(); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, upsertRecord, recordArgs(r, time.Now())...); err != nil {
			return err
		}
		out, err = getRecord(ctx, tx, id)
		return err
	})
	if fnErr != nil {
		return agentenv.Record{}, err
	}
	if err != nil {
		return agentenv.Record{}, fmt.Errorf("sqlite: update record %s: %w", id, err)
	}
	return out, nil
}

// List returns the records matching f, oldest first (by Created, then by insertion).
func (l *Ledger) List(ctx context.Context, f agentenv.Filter) ([]agentenv.Record, error) {
	var where []string
	var args []any
	if len(f.States) > 0 {
		where = append(where, "state IN (?"+strings.Repeat(", ?", len(f.States)-1)+")")
		for _, s := range f.States {
			args = append(args, string(s))
		}
	}
	for _, c := range []struct{ col, val string }{{"run", f.Run}, {"deployment", f.Deployment}, {"provider", f.Provider}} {
		if c.val != "" {
			where = append(where, c.col+" = ?")
			args = append(args, c.val)
		}
	}
	if f.Owner != nil {
		where = append(where, "owner_host = ? AND owner_pid = ? AND owner_start = ?")
		args = append(args, f.Owner.Host, f.Owner.PID, f.Owner.Start)
	}
	q := "SELECT " + recordColumns + " FROM records"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created, rowid"
	rows, err := l.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("sqlite: list records: %w", err)
	}
	defer rows.Close()
	var out []agentenv.Record
	for rows.Next() {
		r, err := scanRecord(rows)
		if err != nil {
			return nil, fmt.Errorf("sqlite: list records: %w", err)
		}
		out = append(out, r)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("sqlite: list records: %w", err)
	}
	return out, nil
}

// RenewLease sets LeaseUntil to until on every record of owner that is not gone, and returns
// how many it renewed. It leaves Updated alone: a renewal is not a transition. The zero owner
// is an error wrapping agentenv.ErrInvalid.
func (l *Ledger) RenewLease(ctx context.Context, owner agentenv.Owner, until time.Time) (int, error) {
	if owner.IsZero() {
		return 0, fmt.Errorf("sqlite: renew lease: zero owner: %w", agentenv.ErrInvalid)
	}
	var n int64
	err := l.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE records SET lease_until = ?
			WHERE owner_host = ? AND owner_pid = ? AND owner_start = ? AND state <> ?`,
			timeArg(until), owner.Host, owner.PID, owner.Start, string(agentenv.StateGone))
		if err != nil {
			return err
		}
		n, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("sqlite: renew lease of %s: %w", owner, err)
	}
	return int(n), nil
}

// querier is what getRecord needs of a *sql.DB or *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// getRecord reads one record, or returns an error wrapping agentenv.ErrNotFound.
func getRecord(ctx context.Context, q querier, id string) (agentenv.Record, error) {
	r, err := scanRecord(q.QueryRowContext(ctx, "SELECT "+recordColumns+" FROM records WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return agentenv.Record{}, agentenv.ErrNotFound
	}
	return r, err
}

// recordArgs returns the parameters of upsertRecord for r written at now.
func recordArgs(r agentenv.Record, now time.Time) []any {
	labels, _ := json.Marshal(r.Labels) // a map[string]string always marshals
	attrs, _ := json.Marshal(r.Attrs)
	return []any{
		r.ID, string(r.Kind), r.Provider, r.SandboxID, r.Image, r.Run, r.Deployment, r.Role,
		string(r.State), r.Owner.Host, r.Owner.PID, r.Owner.Start, timeArg(r.LeaseUntil),
		timeArg(r.Expires), r.Error, string(labels), string(attrs), timeArg(r.Created), timeArg(now),
	}
}

// scanRecord reads the columns of recordColumns.
func scanRecord(row interface{ Scan(...any) error }) (agentenv.Record, error) {
	var r agentenv.Record
	var kind, state, labels, attrs string
	var lease, expires sql.NullString
	var created, updated string
	err := row.Scan(&r.ID, &kind, &r.Provider, &r.SandboxID, &r.Image, &r.Run, &r.Deployment,
		&r.Role, &state, &r.Owner.Host, &r.Owner.PID, &r.Owner.Start, &lease, &expires, &r.Error,
		&labels, &attrs, &created, &updated)
	if err != nil {
		return agentenv.Record{}, err
	}
	r.Kind, r.State = agentenv.Kind(kind), agentenv.State(state)
	if err := json.Unmarshal([]byte(labels), &r.Labels); err != nil {
		return agentenv.Record{}, fmt.Errorf("record %s: labels: %w", r.ID, err)
	}
	if err := json.Unmarshal([]byte(attrs), &r.Attrs); err != nil {
		return agentenv.Record{}, fmt.Errorf("record %s: attrs: %w", r.ID, err)
	}
	for _, t := range []struct {
		dst *time.Time
		src string
	}{{&r.LeaseUntil, lease.String}, {&r.Expires, expires.String}, {&r.Created, created}, {&r.Updated, updated}} {
		if *t.dst, err = parseTime(t.src); err != nil {
			return agentenv.Record{}, fmt.Errorf("record %s: %w", r.ID, err)
		}
	}
	return r, nil
}

// timeArg returns t as stored: text in UTC, or NULL for the zero time.
func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t.UTC().Format(timeLayout)
}

// parseTime parses a time stored by timeArg; the empty string is the zero time.
func parseTime(s string) (time.Time, error) {
	if s == "" {
		return time.Time{}, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("time %q: %w", s, err)
	}
	return t.UTC(), nil
}
