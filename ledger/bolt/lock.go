//go:build unix

package bolt

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/agentenv/agentenv"
	bbolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
	"golang.org/x/sys/unix"
)

// errClosed is what an operation on a closed Ledger returns.
var errClosed = errors.New("ledger is closed")

// sqliteHeader begins every SQLite database file, such as the ledger of an agentenv before
// bbolt.
const sqliteHeader = "SQLite format 3\x00"

// boltMagic is the magic number of a bbolt meta page, the first page of every bbolt file.
const boltMagic = 0xED0CDAED

// session is one operation's hold on the file: this Ledger's turn, the lock file locked and
// the bbolt file open.
type session struct {
	l    *Ledger
	lock *os.File
	db   *bbolt.DB
}

// view runs fn in a read transaction of its own session.
func (l *Ledger) view(ctx context.Context, fn func(tx *bbolt.Tx) error) (err error) {
	s, err := l.begin(ctx, false)
	if err != nil {
		return err
	}
	defer func() { err = s.end(err) }() // deferred, so that a panic in fn ends the session too
	return s.db.View(fn)
}

// update runs fn in a write transaction of its own session and commits it if fn returns nil.
// fn's error is returned as it is.
func (l *Ledger) update(ctx context.Context, fn func(tx *bbolt.Tx) error) (err error) {
	s, err := l.begin(ctx, true)
	if err != nil {
		return err
	}
	defer func() { err = s.end(err) }() // deferred, so that a panic in fn ends the session too
	return s.db.Update(fn)
}

// begin waits for this Ledger's turn and the file's lock, then opens the file (read-only
// unless write), all within ctx and busyTimeout.
func (l *Ledger) begin(ctx context.Context, write bool) (*session, error) {
	if l.closed.Load() {
		return nil, errClosed
	}
	ctx, cancel := context.WithTimeoutCause(ctx, busyTimeout, fmt.Errorf("the ledger was busy for %v", busyTimeout))
	defer cancel()
	select {
	case l.turn <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("wait for this process's other ledger operations: %w", context.Cause(ctx))
	}
	if l.closed.Load() {
		<-l.turn
		return nil, errClosed
	}
	lock, err := l.lock(ctx)
	if err != nil {
		return nil, err // l.lock gave the turn back, or left it to the goroutine still waiting
	}
	// No other agentenv process has the file now, so bbolt's own flock succeeds at once; its
	// timeout only bounds a holder that is not agentenv.
	timeout := busyTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = max(time.Until(d), time.Millisecond)
	}
	db, err := bbolt.Open(l.path, 0o600, &bbolt.Options{Timeout: timeout, ReadOnly: !write, NoStatistics: true})
	if err != nil {
		unlock(lock)
		<-l.turn
		return nil, l.describe(err)
	}
	return &session{l: l, lock: lock, db: db}, nil
}

// end closes the file, releases its lock and gives back the turn. It returns err, or the
// error of the close when err is nil.
func (s *session) end(err error) error {
	cerr := s.db.Close()
	unlock(s.lock)
	<-s.l.turn
	if err == nil && cerr != nil {
		return fmt.Errorf("close: %w", cerr)
	}
	return err
}

// lock opens the lock file and takes flock(LOCK_EX) on it, waiting within ctx. On an error it
// gives back the turn; if ctx ends while the flock is blocked, a goroutine goes on waiting for
// it, releases it once it has it, and only then gives back the turn.
func (l *Ledger) lock(ctx context.Context) (*os.File, error) {
	f, err := os.OpenFile(lockPath(l.path), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		<-l.turn
		return nil, fmt.Errorf("lock: %w", err)
	}
	fd := int(f.Fd())
	err = flock(fd, unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		return f, nil
	}
	if !errors.Is(err, unix.EWOULDBLOCK) {
		f.Close()
		<-l.turn
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	got := make(chan error, 1)
	go func() { got <- flock(fd, unix.LOCK_EX) }()
	select {
	case err := <-got:
		if err != nil {
			f.Close()
			<-l.turn
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		return f, nil
	case <-ctx.Done():
		go l.abandon(f, got)
		return nil, fmt.Errorf("wait for another process's hold on %s: %w", f.Name(), context.Cause(ctx))
	}
}

// abandon waits for the flock of an operation that gave up, releases it and gives back the
// turn, which was held all along so that no other operation of this Ledger piles up behind it.
func (l *Ledger) abandon(f *os.File, got <-chan error) {
	if err := <-got; err == nil {
		l.log.Debug("ledger lock released after its wait was given up")
	}
	unlock(f)
	<-l.turn
}

// unlock releases the flock on f and closes it (which would release it too).
func unlock(f *os.File) {
	_ = flock(int(f.Fd()), unix.LOCK_UN)
	_ = f.Close()
}

// flock calls flock(2), again when a signal interrupts it.
func flock(fd, how int) error {
	for {
		err := unix.Flock(fd, how)
		if !errors.Is(err, unix.EINTR) {
			return err
		}
	}
}

// describe says what the file is when bbolt cannot open it and the file does not begin as a
// bbolt file does: an SQLite ledger of an older agentenv, or something else. A file that
// does, but is damaged, keeps bbolt's error.
func (l *Ledger) describe(err error) error {
	if errors.Is(err, berrors.ErrTimeout) {
		return fmt.Errorf("the ledger file stayed locked: %w", err)
	}
	const magicEnd = 20 // a page header (16 bytes), then the meta page's magic
	head := make([]byte, magicEnd)
	f, ferr := os.Open(l.path)
	if ferr != nil {
		return err
	}
	n, _ := io.ReadFull(f, head)
	f.Close()
	head = head[:n]
	switch {
	case bytes.HasPrefix(head, []byte(sqliteHeader)):
		return fmt.Errorf("an SQLite database (an older agentenv's ledger?), not a bbolt ledger: agentenv keeps its ledger in a bbolt file now; name another file, such as ledger.bolt: %w", agentenv.ErrInvalid)
	case n < magicEnd || (binary.LittleEndian.Uint32(head[16:]) != boltMagic && binary.BigEndian.Uint32(head[16:]) != boltMagic):
		return fmt.Errorf("not a bbolt ledger (%w): %w", err, agentenv.ErrInvalid)
	}
	return err
}
