// Package bolt is the default agentenv.Ledger: one bbolt file on this host (go.etcd.io/bbolt,
// pure Go), shared safely by every agentenv process here.
//
// bbolt locks its file (flock) for as long as a handle is open, so a Ledger never keeps one
// open between operations. An operation takes this Ledger's turn (a token, so that goroutines
// queue here and give up when their context ends), then a blocking flock(LOCK_EX) on the
// sibling file PATH.lock, which the kernel grants to one process at a time, then opens the
// bbolt file, runs one transaction and closes the file again. Operations of this Ledger that
// queue meanwhile share that open of the file, one after the other, for at most 32 operations
// or 50 ms (a burst); then the lock goes back to the kernel's queue, so other processes get
// their turn. Every wait is bounded by the caller's context and by a busy timeout. A flock
// still blocked when the context ends is left to a goroutine that releases the lock as soon
// as it gets it, and only then gives back the turn; so an abandoned wait never leaves the file
// locked. A write is one bbolt transaction under that lock, so [Ledger.Update] and
// [Ledger.Insert] are atomic across processes.
//
// The file holds buckets of JSON values: records by id, deployments and runs by id, an index
// of each by creation time (the key is the time, an insertion sequence and the id, so that
// walks are oldest or newest first with ties in insertion order), and "meta" with the schema
// version, which Open creates and checks.
package bolt

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/agentenv/agentenv"
	bbolt "go.etcd.io/bbolt"
)

// busyTimeout is how long an operation waits for this process's other operations and for
// other processes' locks before failing.
const busyTimeout = 10 * time.Second

// schemaVersion is the layout of the file this package writes; see migrate.
const schemaVersion = 1

// The buckets of the file, and the key of the schema version in the meta bucket.
const (
	bucketMeta            = "meta"
	bucketRecords         = "records"
	bucketRecordIndex     = "records_by_created"
	bucketDeployments     = "deployments"
	bucketDeploymentIndex = "deployments_by_created"
	bucketRuns            = "runs"
	bucketRunIndex        = "runs_by_created"
	keyVersion            = "version"
)

// Ledger is an agentenv.Ledger kept in one bbolt file. It is safe for concurrent use by
// several goroutines and by several processes opening the same file.
type Ledger struct {
	path string
	log  *slog.Logger

	// turn holds a token while one of this Ledger's operations has the file (or a goroutine
	// still waits for the lock of an operation that gave up), so that goroutines queue here
	// and give up when their context ends; other processes queue on the lock file.
	turn    chan struct{}
	handoff chan *session // unbuffered: a session passes only to an operation waiting for it
	closed  atomic.Bool

	deployments *docStore[agentenv.Deployment]
	runs        *docStore[agentenv.Run]
}

var _ agentenv.Ledger = (*Ledger)(nil)

// Open opens the ledger file at path, creating it and its parent directory (mode 0700) if
// missing, with the buckets of the newest schema. A nil logger discards. The error names the
// path when the directory cannot be created, the file is not a bbolt ledger (an SQLite ledger
// of an older agentenv is said to be one) or its schema is newer than this package knows.
func Open(ctx context.Context, path string, logger *slog.Logger) (*Ledger, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if path == "" {
		return nil, fmt.Errorf("bolt: open: empty path: %w", agentenv.ErrInvalid)
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("bolt: open %s: %w", path, err)
	}
	if err := create(abs); err != nil {
		return nil, fmt.Errorf("bolt: open %s: %w", abs, err)
	}
	l := &Ledger{path: abs, log: logger.With("ledger", abs), turn: make(chan struct{}, 1), handoff: make(chan *session)}
	if err := l.migrate(ctx); err != nil {
		return nil, fmt.Errorf("bolt: open %s: %w", abs, err)
	}
	l.deployments = &docStore[agentenv.Deployment]{l: l, docs: bucketDeployments, index: bucketDeploymentIndex, kind: "deployment"}
	l.runs = &docStore[agentenv.Run]{l: l, docs: bucketRuns, index: bucketRunIndex, kind: "run"}
	l.log.Debug("ledger open")
	return l, nil
}

// create makes the parent directory, and the file and its lock file readable only by this
// user, unless they exist.
func create(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	for _, p := range []string{path, lockPath(path)} {
		f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		if err := f.Close(); err != nil {
			return err
		}
	}
	return nil
}

// lockPath is the file whose flock guards the ledger at path.
func lockPath(path string) string { return path + ".lock" }

// migrate creates the buckets and records the schema version in one write transaction, so
// that two processes opening a new file at once do not both make it. A file of a newer schema
// is refused, and left as it is.
func (l *Ledger) migrate(ctx context.Context) error {
	return l.update(ctx, func(tx *bbolt.Tx) error {
		current := 0
		if meta := tx.Bucket([]byte(bucketMeta)); meta != nil {
			if v := meta.Get([]byte(keyVersion)); v != nil {
				n, err := strconv.Atoi(string(v))
				if err != nil {
					return fmt.Errorf("schema version %q: want a number", v)
				}
				current = n
			}
		}
		if current > schemaVersion {
			return fmt.Errorf("schema version %d is newer than this agentenv knows (%d); upgrade agentenv", current, schemaVersion)
		}
		if current == schemaVersion {
			return nil
		}
		for _, name := range []string{bucketMeta, bucketRecords, bucketRecordIndex, bucketDeployments, bucketDeploymentIndex, bucketRuns, bucketRunIndex} {
			if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
				return fmt.Errorf("bucket %s: %w", name, err)
			}
		}
		if err := tx.Bucket([]byte(bucketMeta)).Put([]byte(keyVersion), []byte(strconv.Itoa(schemaVersion))); err != nil {
			return fmt.Errorf("schema version: %w", err)
		}
		l.log.Debug("ledger schema created", "version", schemaVersion)
		return nil
	})
}

// Path returns the absolute path of the ledger file.
func (l *Ledger) Path() string { return l.path }

// Deployments returns the store of deployment documents.
func (l *Ledger) Deployments() agentenv.DocStore[agentenv.Deployment] { return l.deployments }

// Runs returns the store of run documents.
func (l *Ledger) Runs() agentenv.DocStore[agentenv.Run] { return l.runs }

// Close stops the Ledger: calls after Close fail. No handle stays open between operations, so
// there is nothing to release; operations under way finish on their own. Close may be called
// again.
func (l *Ledger) Close() error {
	l.closed.Store(true)
	return nil
}
