package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/jackc/pgx/v5"
)

const recordColumns = `id, kind, provider, sandbox_id, image, run, deployment, role, state,
	owner_host, owner_pid, owner_start, lease_until, expires, error, labels, attrs, created, updated`

// upsertRecord writes a record. $18 is the given Created (NULL when zero), kept on replace when
// NULL; $19 is the time of the write.
const upsertRecord = `INSERT INTO agentenv_records (` + recordColumns + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
		COALESCE($18::timestamptz, $19::timestamptz), $19)
	ON CONFLICT (id) DO UPDATE SET
		kind = excluded.kind, provider = excluded.provider, sandbox_id = excluded.sandbox_id,
		image = excluded.image, run = excluded.run, deployment = excluded.deployment,
		role = excluded.role, state = excluded.state, owner_host = excluded.owner_host,
		owner_pid = excluded.owner_pid, owner_start = excluded.owner_start,
		lease_until = excluded.lease_until, expires = excluded.expires, error = excluded.error,
		labels = excluded.labels, attrs = excluded.attrs,
		created = COALESCE($18::timestamptz, agentenv_records.created), updated = excluded.updated`

// Put inserts r, or replaces the record with r.ID. It sets Updated, and Created when it is
// zero: to the time of the write for a new record, and to the stored Created on a replace.
func (l *Ledger) Put(ctx context.Context, r agentenv.Record) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("postgres: put record %s: %w", r.ID, err)
	}
	if _, err := l.pool.Exec(ctx, upsertRecord, recordArgs(r, time.Now())...); err != nil {
		return fmt.Errorf("postgres: put record %s: %w", r.ID, err)
	}
	return nil
}

// insertRecord writes a record whose id is not taken, and nothing otherwise.
const insertRecord = `INSERT INTO agentenv_records (` + recordColumns + `)
	VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17,
		COALESCE($18::timestamptz, $19::timestamptz), $19)
	ON CONFLICT (id) DO NOTHING`

// Insert writes r unless a record has r.ID: an error wrapping agentenv.ErrConflict then. One
// statement decides, so of concurrent inserts of one id, in any process, exactly one succeeds.
func (l *Ledger) Insert(ctx context.Context, r agentenv.Record) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("postgres: insert record %s: %w", r.ID, err)
	}
	if err := func() error {
		tag, err := l.pool.Exec(ctx, insertRecord, recordArgs(r, time.Now())...)
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return fmt.Errorf("id is taken: %w", agentenv.ErrConflict)
		}
		return nil
	}(); err != nil {
		return fmt.Errorf("postgres: insert record %s: %w", r.ID, err)
	}
	return nil
}

// Get returns the record with id, or an error wrapping agentenv.ErrNotFound.
func (l *Ledger) Get(ctx context.Context, id string) (agentenv.Record, error) {
	r, err := getRecord(ctx, l.pool, id, "")
	if err != nil {
		return agentenv.Record{}, fmt.Errorf("postgres: get record %s: %w", id, err)
	}
	return r, nil
}

// Update locks the record with id (SELECT ... FOR UPDATE), applies fn to it and writes it back
// in the same transaction, so no other writer writes the record in between. It sets Updated.
// If fn returns an error, nothing is written and that error is returned as it is. fn must not
// change the record's ID, and must not write to the ledger: that would wait for itself.
func (l *Ledger) Update(ctx context.Context, id string, fn func(*agentenv.Record) error) (agentenv.Record, error) {
	var out agentenv.Record
	var fnErr error
	err := l.inTx(ctx, func(tx pgx.Tx) error {
		r, err := getRecord(ctx, tx, id, " FOR UPDATE")
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
		if _, err := tx.Exec(ctx, upsertRecord, recordArgs(r, time.Now())...); err != nil {
			return err
		}
		out, err = getRecord(ctx, tx, id, "")
		return err
	})
	if fnErr != nil {
		return agentenv.Record{}, err
	}
	if err != nil {
		return agentenv.Record{}, fmt.Errorf("postgres: update record %s: %w", id, err)
	}
	return out, nil
}

// List returns the records matching f, oldest first (by Created, then by first insertion).
func (l *Ledger) List(ctx context.Context, f agentenv.Filter) ([]agentenv.Record, error) {
	var where []string
	var args []any
	arg := func(v any) string {
		args = append(args, v)
		return "$" + strconv.Itoa(len(args))
	}
	if len(f.States) > 0 {
		states := make([]string, len(f.States))
		for i, s := range f.States {
			states[i] = string(s)
		}
		where = append(where, "state = ANY("+arg(states)+"::text[])")
	}
	for _, c := range []struct{ col, val string }{{"run", f.Run}, {"deployment", f.Deployment}, {"provider", f.Provider}} {
		if c.val != "" {
			where = append(where, c.col+" = "+arg(c.val))
		}
	}
	if f.Owner != nil {
		where = append(where, "owner_host = "+arg(f.Owner.Host)+" AND owner_pid = "+arg(f.Owner.PID)+" AND owner_start = "+arg(f.Owner.Start))
	}
	q := "SELECT " + recordColumns + " FROM agentenv_records"
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY created, seq"
	rows, err := l.pool.Query(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("postgres: list records: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (agentenv.Record, error) { return scanRecord(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: list records: %w", err)
	}
	return out, nil
}

// RenewLease sets LeaseUntil to until on every record of owner that is not gone, and returns
// how many it renewed. It leaves Updated alone: a renewal is not a transition. The zero owner
// is an error wrapping agentenv.ErrInvalid.
func (l *Ledger) RenewLease(ctx context.Context, owner agentenv.Owner, until time.Time) (int, error) {
	if owner.IsZero() {
		return 0, fmt.Errorf("postgres: renew lease: zero owner: %w", agentenv.ErrInvalid)
	}
	tag, err := l.pool.Exec(ctx, `UPDATE agentenv_records SET lease_until = $1
		WHERE owner_host = $2 AND owner_pid = $3 AND owner_start = $4 AND state <> $5`,
		timeArg(until), owner.Host, owner.PID, owner.Start, string(agentenv.StateGone))
	if err != nil {
		return 0, fmt.Errorf("postgres: renew lease of %s: %w", owner, err)
	}
	return int(tag.RowsAffected()), nil
}

// querier is what getRecord needs of a pool or a transaction.
type querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// getRecord reads one record, with suffix (such as " FOR UPDATE") appended to the query, or
// returns an error wrapping agentenv.ErrNotFound.
func getRecord(ctx context.Context, q querier, id, suffix string) (agentenv.Record, error) {
	r, err := scanRecord(q.QueryRow(ctx, "SELECT "+recordColumns+" FROM agentenv_records WHERE id = $1"+suffix, id))
	if errors.Is(err, pgx.ErrNoRows) {
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
		timeArg(r.Expires), r.Error, labels, attrs, timeArg(r.Created), now,
	}
}

// scanRecord reads the columns of recordColumns.
func scanRecord(row pgx.Row) (agentenv.Record, error) {
	var r agentenv.Record
	var kind, state string
	var labels, attrs []byte
	var lease, expires *time.Time
	err := row.Scan(&r.ID, &kind, &r.Provider, &r.SandboxID, &r.Image, &r.Run, &r.Deployment,
		&r.Role, &state, &r.Owner.Host, &r.Owner.PID, &r.Owner.Start, &lease, &expires, &r.Error,
		&labels, &attrs, &r.Created, &r.Updated)
	if err != nil {
		return agentenv.Record{}, err
	}
	r.Kind, r.State = agentenv.Kind(kind), agentenv.State(state)
	if err := json.Unmarshal(labels, &r.Labels); err != nil {
		return agentenv.Record{}, fmt.Errorf("record %s: labels: %w", r.ID, err)
	}
	if err := json.Unmarshal(attrs, &r.Attrs); err != nil {
		return agentenv.Record{}, fmt.Errorf("record %s: attrs: %w", r.ID, err)
	}
	if lease != nil {
		r.LeaseUntil = lease.UTC()
	}
	if expires != nil {
		r.Expires = expires.UTC()
	}
	r.Created, r.Updated = r.Created.UTC(), r.Updated.UTC()
	return r, nil
}

// timeArg returns t as a parameter: itself, or NULL for the zero time.
func timeArg(t time.Time) any {
	if t.IsZero() {
		return nil
	}
	return t
}
