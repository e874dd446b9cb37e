package stdiobridge

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"
)

// Process is a stdio MCP server as the bridge speaks to it: its standard input and output, a
// signal that it ended and a way to stop it. An agentenv.Stream (a process attached in a
// sandbox through lifecycle.Manager.Attach) is one as it is.
type Process interface {
	// Read reads the server's standard output; io.EOF once it ended.
	Read(p []byte) (int, error)
	// Write writes to the server's standard input.
	Write(p []byte) (int, error)
	// CloseWrite ends the server's standard input, the stdio way to ask it to exit.
	CloseWrite() error
	// Done is closed once the server has ended (its output with it).
	Done() <-chan struct{}
	// Stderr returns a bounded tail of what the server wrote to its standard error, for reports.
	Stderr() string
	// Close stops the server, within a bound of its own, and releases what it holds. It is
	// idempotent.
	Close() error
}

// exitStatuser is implemented by a Process that can say how it ended (a child's wait status).
type exitStatuser interface {
	ExitStatus() string
}

// proc is the bridge's hold on its Process: how it ended, whether the bridge stopped it, and
// the reader and writer the MCP SDK's transport closes.
type proc struct {
	p        Process
	log      *slog.Logger
	stopping atomic.Bool
	once     sync.Once
	reported chan struct{} // closed once the end was logged
}

// newProc holds p and reports its end once it comes (an error unless the bridge stopped it).
func newProc(p Process, log *slog.Logger) *proc {
	x := &proc{p: p, log: log, reported: make(chan struct{})}
	go func() {
		defer close(x.reported)
		<-p.Done()
		status := x.status()
		if x.stopping.Load() {
			log.Info("stdio server stopped", "status", status)
		} else {
			log.Error("stdio server exited; it is not restarted", "status", status, "stderr", p.Stderr())
		}
	}()
	return x
}

func (x *proc) status() string {
	if s, ok := x.p.(exitStatuser); ok {
		return s.ExitStatus()
	}
	return "its output ended"
}

// exitErr returns nil while the server runs and an error wrapping [ErrExited] once it ended.
func (x *proc) exitErr() error {
	select {
	case <-x.p.Done():
		return fmt.Errorf("%w: %s", ErrExited, x.status())
	default:
		return nil
	}
}

// waitExit waits up to d for the server to end and reports whether it did.
func (x *proc) waitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-x.p.Done():
		return true
	case <-t.C:
		return false
	}
}

// afterExit calls f once the server ends, unless the returned stop is called first; stop
// reports whether it kept f from running, as context.AfterFunc's does.
func (x *proc) afterExit(f func()) (stop func() bool) {
	stopped := make(chan struct{})
	var once, closeOnce sync.Once
	go func() {
		select {
		case <-x.p.Done():
			once.Do(f)
		case <-stopped:
		}
	}()
	return func() bool {
		kept := false
		once.Do(func() { kept = true })
		closeOnce.Do(func() { close(stopped) })
		return kept
	}
}

// stop stops the server (once) and, within exitGrace, waits for its end to be reported, so
// the bridge's last log line is the server's end.
func (x *proc) stop() {
	x.once.Do(func() {
		x.stopping.Store(true)
		if err := x.p.Close(); err != nil {
			x.log.Warn("stop stdio server", "err", err)
		}
		t := time.NewTimer(exitGrace)
		defer t.Stop()
		select {
		case <-x.reported:
		case <-t.C:
		}
	})
}

// reader and writer are the server's output and input as the SDK's IOTransport takes them:
// closing the reader does nothing (the bridge stops the server), closing the writer ends the
// server's input.
func (x *proc) reader() readCloser  { return readCloser{x.p} }
func (x *proc) writer() writeCloser { return writeCloser{x.p} }

type readCloser struct{ p Process }

func (r readCloser) Read(b []byte) (int, error) { return r.p.Read(b) }
func (readCloser) Close() error                 { return nil }

type writeCloser struct{ p Process }

func (w writeCloser) Write(b []byte) (int, error) { return w.p.Write(b) }
func (w writeCloser) Close() error                { return w.p.CloseWrite() }
