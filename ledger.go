package agentenv

import (
	"context"
	"time"
)

// Ledger records every sandbox before it is created, and every transition after. Implementations
// must be safe for concurrent use by several goroutines and by several processes sharing the same
// database. Records are never deleted; gone records stay as history.
type Ledger interface {
	// Put inserts r, or replaces the record with r.ID. It sets Updated (and Created, if zero).
	Put(ctx context.Context, r Record) error

	// Insert writes r only if no record has r.ID, atomically with respect to every other
	// writer, so that of several callers inserting one id exactly one succeeds (a claim). It sets
	// Updated (and Created, if zero). An id that is taken is an error wrapping ErrConflict.
	Insert(ctx context.Context, r Record) error

	// Get returns the record with id, or an error wrapping ErrNotFound.
	Get(ctx context.Context, id string) (Record, error)

	// Update reads the record with id, applies fn to it and writes it back, atomically with
	// respect to every other writer, and returns what it wrote. If fn returns an error, nothing
	// is written and Update returns that error. An absent id is an error wrapping ErrNotFound.
	Update(ctx context.Context, id string, fn func(*Record) error) (Record, error)

	// List returns the records matching f, oldest first.
	List(ctx context.Context, f Filter) ([]Record, error)

	// RenewLease sets LeaseUntil to until on every record owned by owner that is not gone, and
	// returns how many it renewed.
	RenewLease(ctx context.Context, owner Owner, until time.Time) (int, error)

	// Deployments returns the store of deployment documents in the same database.
	Deployments() DocStore[Deployment]

	// Runs returns the store of run documents in the same database.
	Runs() DocStore[Run]

	// Close releases the database. Calls after Close fail.
	Close() error
}

// Doc is what a DocStore keeps: a JSON document with an id and a state for filtering, and a
// creation time that orders listings (zero: the time of its first Put stands in).
type Doc interface {
	DocID() string
	DocState() string
	DocCreated() time.Time
}

// DocStore keeps JSON documents (deployments, runs) beside the records. It is safe for concurrent
// use by several goroutines and processes.
type DocStore[T Doc] interface {
	// Put inserts or replaces the document with d.DocID().
	Put(ctx context.Context, d T) error
	// Get returns the document with id, or an error wrapping ErrNotFound.
	Get(ctx context.Context, id string) (T, error)
	// List returns documents whose state is one of states (all when empty), newest first, at
	// most limit of them (all when limit <= 0).
	List(ctx context.Context, states []string, limit int) ([]T, error)
	// Page returns one page of the documents q selects, in creation order (newest first unless
	// q.Oldest), and the cursor of the page after it. It walks an index on the creation time,
	// so a page costs about the same with ten or ten thousand documents; the Fields and Text
	// filters read the documents the walk passes over. A malformed cursor is an error wrapping
	// ErrInvalid.
	Page(ctx context.Context, q DocQuery) (DocPage[T], error)
}

// DocQuery selects a page of documents. Zero fields select everything.
type DocQuery struct {
	States []string // in one of these states
	// Fields selects documents whose string field at each dotted JSON path ("task",
	// "attrs.episode") equals the value. A path element cannot contain a dot.
	Fields map[string]string
	Text   string    // whose JSON text contains this, ignoring ASCII case (a search box)
	From   time.Time // created at or after
	To     time.Time // created before
	Oldest bool      // oldest first
	Cursor string    // continue after the page whose Next this is
	Limit  int       // at most this many; DefaultPageLimit if <= 0
}

// DefaultPageLimit is the page size of a DocQuery without a limit.
const DefaultPageLimit = 100

// DocPage is one page of a DocQuery.
type DocPage[T Doc] struct {
	Docs []T
	Next string // the cursor of the next page; empty on the last page
}

// DocStates returns typed document states (DeploymentState, RunStatus) as the strings a
// DocStore query takes, so that no query spells a state as a literal.
func DocStates[S ~string](states ...S) []string {
	out := make([]string, len(states))
	for i, st := range states {
		out[i] = string(st)
	}
	return out
}
