package bolt_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"golang.org/x/sys/unix"
)

// TestTwoLedgersOneFile writes one file through two Ledgers of this process at once, as two
// processes would (each Ledger has its own turn and its own lock file handle): both make
// progress, and no update is lost.
func TestTwoLedgersOneFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.bolt")
	ledgers := []agentenv.Ledger{open(t, path), open(t, path)}
	if err := ledgers[0].Put(t.Context(), agentenv.Record{ID: "shared", State: agentenv.StateLive, Attrs: map[string]string{"n": "0"}}); err != nil {
		t.Fatal(err)
	}
	const goroutines, updates = 4, 25 // per Ledger
	var wg sync.WaitGroup
	errs := make(chan error, len(ledgers)*goroutines)
	for i, l := range ledgers {
		for g := range goroutines {
			wg.Go(func() {
				for u := range updates {
					_, err := l.Update(t.Context(), "shared", func(r *agentenv.Record) error {
						n, err := strconv.Atoi(r.Attrs["n"])
						r.Attrs["n"] = strconv.Itoa(n + 1)
						return err
					})
					if err == nil {
						r := agentenv.Record{ID: fmt.Sprintf("l%d-g%d-%d", i, g, u), State: agentenv.StateLive, Run: fmt.Sprintf("ledger-%d", i)}
						err = l.Put(t.Context(), r)
					}
					if err != nil {
						errs <- fmt.Errorf("ledger %d: %w", i, err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i, l := range ledgers {
		r, err := l.Get(t.Context(), "shared")
		if want := strconv.Itoa(len(ledgers) * goroutines * updates); err != nil || r.Attrs["n"] != want {
			t.Errorf("ledger %d: counter = %q, %v; want %s", i, r.Attrs["n"], err, want)
		}
		rs, err := l.List(t.Context(), agentenv.Filter{Run: fmt.Sprintf("ledger-%d", i)})
		if err != nil || len(rs) != goroutines*updates {
			t.Errorf("ledger %d: List = %d records, %v; want %d", i, len(rs), err, goroutines*updates)
		}
	}
}

// TestCancelledWaitForLock checks that an operation waiting for another holder of the file's
// lock returns as soon as its context ends, that a later one waits for the turn the abandoned
// wait still holds, and that the lock is free again once the holder lets go: the wait that
// was given up did not keep it.
func TestCancelledWaitForLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.bolt")
	l := open(t, path)
	holder := lockFile(t, path+".lock")

	for _, c := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(t.Context(), 200*time.Millisecond)
		}, context.DeadlineExceeded},
		{"cancel", func() (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(t.Context())
			time.AfterFunc(200*time.Millisecond, cancel)
			return ctx, cancel
		}, context.Canceled},
	} {
		ctx, cancel := c.ctx()
		start := time.Now()
		err := l.Put(ctx, agentenv.Record{ID: "late-" + c.name, State: agentenv.StateLive})
		cancel()
		if took := time.Since(start); !errors.Is(err, c.want) || took > 2*time.Second {
			t.Errorf("%s: Put while another holds the lock = %v after %v; want %v within 2s", c.name, err, took, c.want)
		}
	}

	unix.Flock(int(holder.Fd()), unix.LOCK_UN)
	if err := l.Put(t.Context(), agentenv.Record{ID: "after", State: agentenv.StateLive}); err != nil {
		t.Fatalf("Put after the holder let go = %v", err)
	}
	// Nothing of this process holds the lock between operations.
	if err := unix.Flock(int(holder.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatalf("lock after the Ledger's operations = %v, want it free", err)
	}
	unix.Flock(int(holder.Fd()), unix.LOCK_UN)
	if _, err := l.Get(t.Context(), "late-deadline"); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Get(late-deadline) = %v, want ErrNotFound: its Put gave up", err)
	}
}

// lockFile opens path and takes flock(LOCK_EX) on it, as another process would; the file is
// closed (and so unlocked) when t ends.
func lockFile(t *testing.T, path string) *os.File {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestPanicInUpdate checks that a panic in Update's fn reaches the caller, writes nothing and
// leaves the Ledger usable: the operation's turn and lock are released on the way out.
func TestPanicInUpdate(t *testing.T) {
	l := open(t, filepath.Join(t.TempDir(), "ledger.bolt"))
	if err := l.Put(t.Context(), agentenv.Record{ID: "r", State: agentenv.StateLive}); err != nil {
		t.Fatal(err)
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Errorf("Update with a panicking fn did not panic")
			}
		}()
		l.Update(t.Context(), "r", func(r *agentenv.Record) error {
			r.State = agentenv.StateGone
			panic("boom")
		})
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if r, err := l.Get(ctx, "r"); err != nil || r.State != agentenv.StateLive {
		t.Errorf("Get after a panicking Update = %v, %v; want the record unchanged", r.State, err)
	}
}

// TestCloseDuringBurst closes a Ledger while its goroutines queue for the file, sharing one
// open of it: every operation ends, those after Close fail, and the file's lock is free for
// another Ledger at once.
func TestCloseDuringBurst(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.bolt")
	l := open(t, path)
	if err := l.Put(t.Context(), agentenv.Record{ID: "r", State: agentenv.StateLive}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				if _, err := l.Update(t.Context(), "r", func(*agentenv.Record) error { return nil }); err != nil {
					return
				}
			}
		})
	}
	time.Sleep(100 * time.Millisecond)
	l.Close()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("operations still run 5s after Close")
	}
	if _, err := l.Get(t.Context(), "r"); err == nil {
		t.Errorf("Get after Close = nil error, want one")
	}
	holder := lockFile(t, path+".lock") // fails t unless the lock is free
	unix.Flock(int(holder.Fd()), unix.LOCK_UN)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	if err := open(t, path).Put(ctx, agentenv.Record{ID: "next", State: agentenv.StateLive}); err != nil {
		t.Errorf("Put on another Ledger after Close = %v", err)
	}
}
