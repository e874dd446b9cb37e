package bolt

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	bbolt "go.etcd.io/bbolt"
)

// docStore keeps documents of one kind in a bucket of their own, by id, with an index bucket
// by creation time whose values are the documents' states.
type docStore[T agentenv.Doc] struct {
	l     *Ledger
	docs  string // bucket: id -> envelope
	index string // bucket: index key -> state
	kind  string // for messages: deployment, run
}

var _ agentenv.DocStore[agentenv.Deployment] = (*docStore[agentenv.Deployment])(nil)

// envelope is a document as its bucket keeps it: the document's JSON as the caller's type
// writes it, and what the store knows beside it.
type envelope struct {
	ID      string          `json:"id"`
	State   string          `json:"state"`
	Created time.Time       `json:"created"` // the document's, or the time of its first Put
	Updated time.Time       `json:"updated"` // the time of its last Put
	Seq     uint64          `json:"seq"`     // the order of its first Put
	Doc     json.RawMessage `json:"doc"`
}

// Put inserts or replaces the document with d.DocID(). A zero DocCreated keeps the stored
// creation time, or is the time of this Put for a new document.
func (s *docStore[T]) Put(ctx context.Context, d T) error {
	id := d.DocID()
	if id == "" {
		return fmt.Errorf("bolt: put %s: empty id: %w", s.kind, agentenv.ErrInvalid)
	}
	doc, err := json.Marshal(d)
	if err != nil {
		return fmt.Errorf("bolt: put %s %s: %w", s.kind, id, err)
	}
	err = s.l.update(ctx, func(tx *bbolt.Tx) error {
		docs, index := tx.Bucket([]byte(s.docs)), tx.Bucket([]byte(s.index))
		now := time.Now().UTC()
		e := envelope{ID: id, State: d.DocState(), Created: utc(d.DocCreated()), Updated: now, Doc: doc}
		if v := docs.Get([]byte(id)); v != nil {
			old, err := decodeEnvelope(v)
			if err != nil {
				return err
			}
			if e.Created.IsZero() {
				e.Created = old.Created
			}
			e.Seq = old.Seq
			if err := index.Delete(indexKey(old.Created, old.Seq, id)); err != nil {
				return err
			}
		} else {
			if e.Seq, err = docs.NextSequence(); err != nil {
				return err
			}
			if e.Created.IsZero() {
				e.Created = now
			}
		}
		v, err := json.Marshal(e)
		if err != nil {
			return err
		}
		if err := docs.Put([]byte(id), v); err != nil {
			return err
		}
		return index.Put(indexKey(e.Created, e.Seq, id), []byte(e.State))
	})
	if err != nil {
		return fmt.Errorf("bolt: put %s %s: %w", s.kind, id, err)
	}
	return nil
}

// Get returns the document with id, or an error wrapping agentenv.ErrNotFound.
func (s *docStore[T]) Get(ctx context.Context, id string) (T, error) {
	var d T
	err := s.l.view(ctx, func(tx *bbolt.Tx) error {
		v := tx.Bucket([]byte(s.docs)).Get([]byte(id))
		if v == nil {
			return agentenv.ErrNotFound
		}
		e, err := decodeEnvelope(v)
		if err != nil {
			return err
		}
		return json.Unmarshal(e.Doc, &d)
	})
	if err != nil {
		var zero T
		return zero, fmt.Errorf("bolt: get %s %s: %w", s.kind, id, err)
	}
	return d, nil
}

// List returns the documents whose state is one of states (all when empty), newest first, at
// most limit of them (all when limit <= 0).
func (s *docStore[T]) List(ctx context.Context, states []string, limit int) ([]T, error) {
	var out []T
	err := s.l.view(ctx, func(tx *bbolt.Tx) error {
		docs := tx.Bucket([]byte(s.docs))
		var err error
		walk(tx.Bucket([]byte(s.index)).Cursor(), span{}, func(k, state []byte) bool {
			if len(states) > 0 && !slices.Contains(states, string(state)) {
				return true
			}
			var d T
			if d, err = s.decode(docs, k); err != nil {
				return false
			}
			out = append(out, d)
			return limit <= 0 || len(out) < limit
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("bolt: list %ss: %w", s.kind, err)
	}
	return out, nil
}

// Page returns one page of the documents q selects; see agentenv.DocStore. It walks the index
// by creation time from the cursor on, skipping by the states kept in the index and reading
// the documents for the Fields and Text filters. The cursor is the creation time and sequence
// of the page's last document.
func (s *docStore[T]) Page(ctx context.Context, q agentenv.DocQuery) (agentenv.DocPage[T], error) {
	var page agentenv.DocPage[T]
	limit := q.Limit
	if limit <= 0 {
		limit = agentenv.DefaultPageLimit
	}
	match, err := docFilter(q)
	if err != nil {
		return page, fmt.Errorf("bolt: page %ss: %w", s.kind, err)
	}
	sp := span{oldest: q.Oldest}
	if !q.From.IsZero() {
		sp.from = timeKey(q.From)
	}
	if !q.To.IsZero() {
		sp.to = timeKey(q.To)
	}
	if q.Cursor != "" {
		if sp.after, err = parseCursor(q.Cursor); err != nil {
			return page, fmt.Errorf("bolt: page %ss: %w", s.kind, err)
		}
	}
	err = s.l.view(ctx, func(tx *bbolt.Tx) error {
		docs := tx.Bucket([]byte(s.docs))
		var err error
		var last string
		walk(tx.Bucket([]byte(s.index)).Cursor(), sp, func(k, state []byte) bool {
			if len(q.States) > 0 && !slices.Contains(q.States, string(state)) {
				return true
			}
			var e envelope
			if e, err = decodeEnvelope(docs.Get(keyID(k))); err != nil {
				return false
			}
			if !match(e.Doc) {
				return true
			}
			if len(page.Docs) == limit {
				page.Next = last
				return false
			}
			var d T
			if err = json.Unmarshal(e.Doc, &d); err != nil {
				return false
			}
			page.Docs = append(page.Docs, d)
			last = keyCursor(k)
			return true
		})
		return err
	})
	if err != nil {
		return agentenv.DocPage[T]{}, fmt.Errorf("bolt: page %ss: %w", s.kind, err)
	}
	return page, nil
}

// decode reads the document of index key k from the docs bucket.
func (s *docStore[T]) decode(docs *bbolt.Bucket, k []byte) (T, error) {
	var d T
	e, err := decodeEnvelope(docs.Get(keyID(k)))
	if err != nil {
		return d, err
	}
	err = json.Unmarshal(e.Doc, &d)
	return d, err
}

// decodeEnvelope decodes a value of a docs bucket; nil (an index entry without its document)
// is an error.
func decodeEnvelope(v []byte) (envelope, error) {
	var e envelope
	if v == nil {
		return e, fmt.Errorf("index names a missing document")
	}
	if err := json.Unmarshal(v, &e); err != nil {
		return e, err
	}
	return e, nil
}

// docFilter returns the test of a document's JSON for q's Fields and Text, or an error
// wrapping agentenv.ErrInvalid for a malformed field path.
func docFilter(q agentenv.DocQuery) (func(doc []byte) bool, error) {
	type field struct {
		path []string
		want string
	}
	var fields []field
	for p, want := range q.Fields {
		path := strings.Split(p, ".")
		for _, el := range path {
			if el == "" || strings.ContainsAny(el, `"\`) {
				return nil, fmt.Errorf("field path %q: %w", p, agentenv.ErrInvalid)
			}
		}
		fields = append(fields, field{path, want})
	}
	text := lowerASCII([]byte(q.Text))
	return func(doc []byte) bool {
		for _, f := range fields {
			if !fieldIs(doc, f.path, f.want) {
				return false
			}
		}
		return len(text) == 0 || bytes.Contains(lowerASCII(doc), text)
	}, nil
}

// fieldIs reports whether the JSON doc has a string at path (object keys) equal to want.
func fieldIs(doc []byte, path []string, want string) bool {
	v := json.RawMessage(doc)
	for _, el := range path {
		var obj map[string]json.RawMessage
		if json.Unmarshal(v, &obj) != nil {
			return false
		}
		var ok bool
		if v, ok = obj[el]; !ok {
			return false
		}
	}
	var got string
	return len(v) > 0 && v[0] == '"' && json.Unmarshal(v, &got) == nil && got == want
}

// lowerASCII returns a copy of b with the ASCII capitals lowered, and every other byte as it
// is: a search ignores ASCII case only.
func lowerASCII(b []byte) []byte {
	out := make([]byte, len(b))
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		out[i] = c
	}
	return out
}
