package stdiobridge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// ErrExited is wrapped by the errors of calls made after the stdio server (the child) exited.
var ErrExited = errors.New("stdio server exited")

// stderrTailBytes is how much of the child's stderr is kept to report when it exits.
const stderrTailBytes = 4 << 10

// child is the stdio server process: its pipes, its exit and its stderr tail.
type child struct {
	cmd    *exec.Cmd
	stdin  *os.File // write end of the child's stdin
	stdout *os.File // read end of the child's stdout
	tail   *tailWriter
	log    *slog.Logger

	stopTimeout time.Duration // each step of Close

	exited   context.Context // done when the process has exited and been reaped
	markExit context.CancelFunc
	status   string // set before exited is done
}

var _ Process = (*child)(nil)

// startChild starts command with env added to the current environment, in its own process
// group so that stopping it stops what it started.
// Close stops it, each step bounded by stopTimeout.
func startChild(command, env []string, log *slog.Logger, stopTimeout time.Duration) (*child, error) {
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, fmt.Errorf("stdout pipe: %w", err)
	}
	tail := &tailWriter{log: log}
	cmd := exec.Command(command[0], command[1:]...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, tail
	// A grandchild that keeps stderr open must not hold up Wait forever.
	cmd.WaitDelay = 2 * time.Second
	setProcessGroup(cmd)
	err = cmd.Start()
	// The child holds its ends now; closing ours makes its exit visible as EOF.
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, fmt.Errorf("start %s: %w", command[0], err)
	}
	exited, markExit := context.WithCancel(context.Background())
	c := &child{cmd: cmd, stdin: inW, stdout: outR, tail: tail, log: log.With("pid", cmd.Process.Pid),
		exited: exited, markExit: markExit, stopTimeout: stopTimeout}
	c.log.Info("stdio server started", "command", strings.Join(command, " "))
	go c.wait()
	return c, nil
}

// wait reaps the child and records how it ended.
func (c *child) wait() {
	err := c.cmd.Wait()
	status := "exited"
	if ps := c.cmd.ProcessState; ps != nil {
		status = ps.String()
	} else if err != nil {
		status = err.Error()
	}
	c.status = status
	c.markExit()
}

func (c *child) Read(p []byte) (int, error)  { return c.stdout.Read(p) }
func (c *child) Write(p []byte) (int, error) { return c.stdin.Write(p) }
func (c *child) CloseWrite() error           { return c.stdin.Close() }
func (c *child) Done() <-chan struct{}       { return c.exited.Done() }
func (c *child) Stderr() string              { return c.tail.String() }

// ExitStatus is how the child ended, once Done is closed.
func (c *child) ExitStatus() string { return c.status }

// Close stops the child (see stop).
func (c *child) Close() error {
	c.stop(c.stopTimeout)
	return nil
}

// waitExit waits up to d for the child to exit and reports whether it did.
func (c *child) waitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.exited.Done():
		return true
	case <-t.C:
		return false
	}
}

// stop ends the child: it closes stdin (the stdio way to ask a server to exit), then sends
// SIGTERM and, after each bound d, SIGKILL to the whole process group. Whatever is left of the
// group once the child is gone is killed too, so nothing it started keeps running.
func (c *child) stop(d time.Duration) {
	defer func() {
		killGroup(c.cmd, true)
		c.stdout.Close()
	}()
	c.stdin.Close()
	if c.waitExit(d) {
		return
	}
	c.log.Warn("stdio server ignored the end of stdin, sending SIGTERM")
	killGroup(c.cmd, false)
	if c.waitExit(d) {
		return
	}
	c.log.Warn("stdio server ignored SIGTERM, sending SIGKILL")
	killGroup(c.cmd, true)
	if !c.waitExit(d) {
		c.log.Error("stdio server did not exit after SIGKILL")
	}
}

// tailWriter keeps the last stderrTailBytes of what is written and logs it line by line at
// Debug. It is safe for concurrent use.
type tailWriter struct {
	log *slog.Logger

	mu      sync.Mutex
	buf     []byte
	partial []byte
}

// Write implements io.Writer; it never fails.
func (t *tailWriter) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > stderrTailBytes {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-stderrTailBytes:]...)
	}
	t.partial = append(t.partial, p...)
	for {
		i := bytes.IndexByte(t.partial, '\n')
		if i < 0 {
			break
		}
		t.log.Debug("stdio server stderr", "line", string(t.partial[:i]))
		t.partial = t.partial[i+1:]
	}
	if len(t.partial) > stderrTailBytes {
		t.partial = t.partial[len(t.partial)-stderrTailBytes:]
	}
	return len(p), nil
}

// String returns the kept tail, from the first whole line on.
func (t *tailWriter) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := string(t.buf)
	if len(t.buf) == stderrTailBytes {
		if i := strings.IndexByte(s, '\n'); i >= 0 {
			s = s[i+1:]
		}
	}
	return strings.TrimSpace(s)
}
