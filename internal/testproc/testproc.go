// Package testproc is a test kit for the kits that run a real server's binary for a test
// (internal/temporalserver, internal/registryserver): the tail of the server's output, kept
// for the error that says why it did not start, and its stop, SIGTERM then SIGKILL after a
// bound; and a Buffer for any test that reads what processes or goroutines still write. Only tests and test kits import it.
package testproc

import (
	"bytes"
	"fmt"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Tail keeps the last Max bytes written to it. It is safe for a process's writes and a
// test's reads at once.
type Tail struct {
	Max int

	mu  sync.Mutex
	buf bytes.Buffer
}

// Write keeps p, dropping what is older than the last Max bytes.
func (w *Tail) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if extra := w.buf.Len() - w.Max; extra > 0 {
		w.buf.Next(extra)
	}
	return len(p), nil
}

// String returns what is kept, trimmed of surrounding space.
func (w *Tail) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return strings.TrimSpace(w.buf.String())
}

// Buffer keeps everything written to it. It is safe for the writes of a process (or of
// episodes running side by side) and a test's reads at once.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

// Write keeps p.
func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns all that was written, as it was written.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Stop ends the started cmd, whose Wait closes exited: SIGTERM, then SIGKILL if it has not
// exited within d, which fails t naming what (the server, for the message).
func Stop(t testing.TB, what string, cmd *exec.Cmd, exited <-chan struct{}, d time.Duration) {
	t.Helper()
	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(d):
		t.Errorf("%s (pid %d) still running %v after SIGTERM: killed", what, cmd.Process.Pid, d)
		_ = cmd.Process.Kill()
		<-exited
	}
}

// Recorder is a testing.TB for checking how a kit fails: it keeps the first Fatalf's message
// and ends the goroutine, as testing does, and keeps every Errorf's, instead of failing the
// test it wraps.
type Recorder struct {
	testing.TB
	Stopped string
	Errs    []string
}

// Helper does nothing: the recorded messages carry no line.
func (r *Recorder) Helper() {}

// Fatalf records the message and ends the calling goroutine.
func (r *Recorder) Fatalf(format string, args ...any) {
	r.Stopped = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// Errorf records the message.
func (r *Recorder) Errorf(format string, args ...any) {
	r.Errs = append(r.Errs, fmt.Sprintf(format, args...))
}
