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

// A burst is a run of this Ledger's operations on one open of the file: an operation that
// ends while another already waits for the turn hands its session over instead of closing
// the file. A burst ends after burstOps operations or burstTime, so that other processes
// waiting for the lock get their turn.
const (
	burstOps  = 32
	burstTime = 50 * time.Millisecond
)

// session is this Ledger's hold on the file for one operation or a burst of them: the turn,
// the lock file locked and the bbolt file open.
type session struct {
	l      *Ledger
	lock   *os.File
	db     *bbolt.DB
	opened time.Time
	ops    int  // operations done in this session
	sound  bool // the last operation's transaction ended as bbolt meant: the handle can go on
}

// view runs fn in a read transaction.
func (l *Ledger) view(ctx context.Context, fn func(tx *bbolt.Tx) error) (err error) {
	s, err := l.begin(ctx)
	if err != nil {
		return err
	}
	defer func() { err = s.end(err) }() // deferred, so that a panic in fn ends the session too
	s.sound = false
	var fnErr error
	err = s.db.View(func(tx *bbolt.Tx) error { fnErr = fn(tx); return fnErr })
	s.sound = err == fnErr
	return err
}

// update runs fn in a write transaction and commits it if fn returns nil. fn's error is
// returned as it is.
func (l *Ledger) update(ctx context.Context, fn func(tx *bbolt.Tx) error) (err error) {
	s, err := l.begin(ctx)
	if err != nil {
		return err
	}
	defer func() { err = s.end(err) }() // deferred, so that a panic in fn ends the session too
	s.sound = false
	var fnErr error
	err = s.db.Update(func(tx *bbolt.Tx) error { fnErr = fn(tx); return fnErr })
	s.sound = err == fnErr // not so after an error of the commit itself
	return err
}

// begin waits for this Ledger's turn, or a session handed over, and then for the file's lock,
// and opens the file, all within ctx and busyTimeout.
func (l *Ledger) begin(ctx context.Context) (*session, error) {
	if l.closed.Load() {
		return nil, errClosed
	}
	ctx, cancel := context.WithTimeoutCause(ctx, busyTimeout, fmt.Errorf("the ledger was busy for %v", busyTimeout))
	defer cancel()
	select {
	case l.turn <- struct{}{}:
	case s := <-l.handoff:
		if l.closed.Load() {
			return nil, s.close(errClosed)
		}
		return s, nil
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
	db, err := bbolt.Open(l.path, 0o600, &bbolt.Options{Timeout: timeout, NoStatistics: true})
	if err != nil {
		unlock(lock)
		<-l.turn
		return nil, l.describe(err)
	}
	return &session{l: l, lock: lock, db: db, opened: time.Now()}, nil
}

// end hands the session to an operation of this Ledger that waits for the turn, while the
// burst lasts and the handle is sound, or else closes it. It returns err, or the error of
// the close when err is nil.
func (s *session) end(err error) error {
	s.ops++
	if s.sound && s.ops < burstOps && time.Since(s.opened) < burstTime {
		select {
		case s.l.handoff <- s:
			return err
		default: // nobody waits
		}
	}
	return s.close(err)
}

// close closes the file, releases its lock and gives back the turn. It returns err, or the
// error of the close when err is nil.
func (s *session) close(err error) error {
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
