package bolt

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/agentenv/agentenv"
	bbolt "go.etcd.io/bbolt"
)

// stored is a record as the records bucket keeps it: the Record's fields under their own JSON
// names, times in UTC, and Seq, the order of its first Put among records of the same Created.
type stored struct {
	agentenv.Record
	Seq uint64
}

// Put inserts r, or replaces the record with r.ID. It sets Updated, and Created when it is
// zero: to the time of the write for a new record, and to the stored Created on a replace.
func (l *Ledger) Put(ctx context.Context, r agentenv.Record) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("bolt: put record %s: %w", r.ID, err)
	}
	err := l.update(ctx, func(tx *bbolt.Tx) error {
		_, err := putRecord(tx, r, false)
		return err
	})
	if err != nil {
		return fmt.Errorf("bolt: put record %s: %w", r.ID, err)
	}
	return nil
}

// Insert writes r unless a record has r.ID: an error wrapping agentenv.ErrConflict then. The
// check and the write are one transaction under the file's lock, so of concurrent inserts of
// one id, in any process, exactly one succeeds.
func (l *Ledger) Insert(ctx context.Context, r agentenv.Record) error {
	if err := r.Validate(); err != nil {
		return fmt.Errorf("bolt: insert record %s: %w", r.ID, err)
	}
	err := l.update(ctx, func(tx *bbolt.Tx) error {
		_, err := putRecord(tx, r, true)
		return err
	})
	if err != nil {
		return fmt.Errorf("bolt: insert record %s: %w", r.ID, err)
	}
	return nil
}

// Get returns the record with id, or an error wrapping agentenv.ErrNotFound.
func (l *Ledger) Get(ctx context.Context, id string) (agentenv.Record, error) {
	var r stored
	err := l.view(ctx, func(tx *bbolt.Tx) error {
		var err error
		r, err = getRecord(tx, []byte(id))
		return err
	})
	if err != nil {
		return agentenv.Record{}, fmt.Errorf("bolt: get record %s: %w", id, err)
	}
	return r.Record, nil
}

// Update applies fn to the record with id and writes it back in one write transaction under
// the file's lock, so no other writer, in this process or another, writes the record in
// between. It sets Updated. If fn returns an error, nothing is written and that error is
// returned as it is. fn must not change the record's ID, and must not use the ledger: that
// would wait for itself.
func (l *Ledger) Update(ctx context.Context, id string, fn func(*agentenv.Record) error) (agentenv.Record, error) {
	var out agentenv.Record
	var fnErr error
	err := l.update(ctx, func(tx *bbolt.Tx) error {
		r, err := getRecord(tx, []byte(id))
		if err != nil {
			return err
		}
		if fnErr = fn(&r.Record); fnErr != nil {
			return fnErr
		}
		if r.ID != id {
			return fmt.Errorf("fn changed the id to %q: %w", r.ID, agentenv.ErrInvalid)
		}
		if err := r.Validate(); err != nil {
			return err
		}
		out, err = putRecord(tx, r.Record, false)
		return err
	})
	if fnErr != nil {
		return agentenv.Record{}, err
	}
	if err != nil {
		return agentenv.Record{}, fmt.Errorf("bolt: update record %s: %w", id, err)
	}
	return out, nil
}

// List returns the records matching f, oldest first (by Created, then by first Put).
func (l *Ledger) List(ctx context.Context, f agentenv.Filter) ([]agentenv.Record, error) {
	var out []agentenv.Record
	err := l.view(ctx, func(tx *bbolt.Tx) error {
		var err error
		walk(tx.Bucket([]byte(bucketRecordIndex)).Cursor(), span{oldest: true}, func(k, _ []byte) bool {
			var r stored
			if r, err = getRecord(tx, keyID(k)); err != nil {
				return false
			}
			if matches(r.Record, f) {
				out = append(out, r.Record)
			}
			return true
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bolt: list records: %w", err)
	}
	return out, nil
}

// matches reports whether r is one of the records f selects.
func matches(r agentenv.Record, f agentenv.Filter) bool {
	switch {
	case len(f.States) > 0 && !slices.Contains(f.States, r.State),
		f.Run != "" && r.Run != f.Run,
		f.Deployment != "" && r.Deployment != f.Deployment,
		f.Provider != "" && r.Provider != f.Provider,
		f.Owner != nil && r.Owner != *f.Owner:
		return false
	}
	return true
}

// RenewLease sets LeaseUntil to until on every record of owner that is not gone, and returns
// how many it renewed. It leaves Updated alone: a renewal is not a transition. The zero owner
// is an error wrapping agentenv.ErrInvalid.
func (l *Ledger) RenewLease(ctx context.Context, owner agentenv.Owner, until time.Time) (int, error) {
	if owner.IsZero() {
		return 0, fmt.Errorf("bolt: renew lease: zero owner: %w", agentenv.ErrInvalid)
	}
	var n int
	err := l.update(ctx, func(tx *bbolt.Tx) error {
		n = 0
		recs := tx.Bucket([]byte(bucketRecords))
		var renewed []stored
		err := recs.ForEach(func(k, v []byte) error {
			r, err := decodeRecord(k, v)
			if err != nil {
				return err
			}
			if r.Owner == owner && r.State != agentenv.StateGone {
				r.LeaseUntil = until.UTC()
				renewed = append(renewed, r)
			}
			return nil
		})
		if err != nil {
			return err
		}
		for _, r := range renewed { // after the walk: a bucket must not change under ForEach
			if err := writeRecord(recs, r); err != nil {
				return err
			}
		}
		n = len(renewed)
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("bolt: renew lease of %s: %w", owner, err)
	}
	return n, nil
}

// putRecord writes r in tx, as Put does, or as Insert does when claim is set, and returns it
// as written.
func putRecord(tx *bbolt.Tx, r agentenv.Record, claim bool) (agentenv.Record, error) {
	recs, index := tx.Bucket([]byte(bucketRecords)), tx.Bucket([]byte(bucketRecordIndex))
	now := time.Now()
	s := stored{Record: r}
	if v := recs.Get([]byte(r.ID)); v != nil {
		if claim {
			return agentenv.Record{}, fmt.Errorf("id is taken: %w", agentenv.ErrConflict)
		}
		old, err := decodeRecord([]byte(r.ID), v)
		if err != nil {
			return agentenv.Record{}, err
		}
		if s.Created.IsZero() {
			s.Created = old.Created
		}
		s.Seq = old.Seq
		if err := index.Delete(indexKey(old.Created, old.Seq, old.ID)); err != nil {
			return agentenv.Record{}, err
		}
	} else {
		seq, err := recs.NextSequence()
		if err != nil {
			return agentenv.Record{}, err
		}
		s.Seq = seq
		if s.Created.IsZero() {
			s.Created = now
		}
	}
	s.Updated = now
	s.LeaseUntil, s.Expires, s.Created, s.Updated = utc(s.LeaseUntil), utc(s.Expires), utc(s.Created), utc(s.Updated)
	if err := writeRecord(recs, s); err != nil {
		return agentenv.Record{}, err
	}
	if err := index.Put(indexKey(s.Created, s.Seq, s.ID), []byte{}); err != nil {
		return agentenv.Record{}, err
	}
	return s.Record, nil
}

// writeRecord puts s in the records bucket.
func writeRecord(recs *bbolt.Bucket, s stored) error {
	v, err := json.Marshal(s)
	if err != nil {
		return err
	}
	return recs.Put([]byte(s.ID), v)
}

// getRecord reads one record, or returns an error wrapping agentenv.ErrNotFound.
func getRecord(tx *bbolt.Tx, id []byte) (stored, error) {
	v := tx.Bucket([]byte(bucketRecords)).Get(id)
	if v == nil {
		return stored{}, agentenv.ErrNotFound
	}
	return decodeRecord(id, v)
}

// decodeRecord decodes the value v of the record with id.
func decodeRecord(id, v []byte) (stored, error) {
	var s stored
	if err := json.Unmarshal(v, &s); err != nil {
		return stored{}, fmt.Errorf("record %s: %w", id, err)
	}
	return s, nil
}

// utc returns t in UTC with its monotonic reading stripped; the zero time stays zero.
func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}
