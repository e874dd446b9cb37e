package docker

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/ctxerr"
	"github.com/agentenv/agentenv/internal/engine"
)

// attachStderrBytes bounds the tail of an attached process's standard error that is kept.
const attachStderrBytes = 4 << 10

// attachCloseGrace bounds how long Close waits for the process to end its output once its
// standard input is closed, before it cuts the connection.
const attachCloseGrace = 2 * time.Second

var _ agentenv.Attacher = (*Provider)(nil)

// Attach implements agentenv.Attacher: argv runs as an exec of the container of sandbox id with
// its standard input, output and error attached over one hijacked connection of the engine
// API. Standard output is demultiplexed from standard error, of which a bounded tail is kept.
// It is ErrNotFound for an unknown sandbox and ErrGone for one that is not running.
func (p *Provider) Attach(ctx context.Context, id string, argv []string) (agentenv.Stream, error) {
	if err := checkID(id); err != nil {
		return nil, fmt.Errorf("docker: attach: %w", err)
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("docker: attach %s: empty command: %w", id, agentenv.ErrInvalid)
	}
	created, err := p.cli.ExecCreate(ctx, id, client.ExecCreateOptions{AttachStdin: true, AttachStdout: true, AttachStderr: true, Cmd: argv})
	if err != nil {
		return nil, fmt.Errorf("docker: attach %s: %w", id, engine.RunErr(p.host, err))
	}
	att, err := p.cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return nil, fmt.Errorf("docker: attach %s: %w", id, engine.RunErr(p.host, ctxerr.Prefer(ctx, err)))
	}
	pr, pw := io.Pipe()
	s := &execStream{conn: att.HijackedResponse, out: pr, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		_, err := stdcopy.StdCopy(pw, &s.stderr, att.Reader)
		pw.CloseWithError(err) // nil: io.EOF for the reader
	}()
	return s, nil
}

// execStream is an attached exec: the hijacked connection, standard output through a pipe
// fed by the demultiplexer, and the tail of standard error.
type execStream struct {
	conn   client.HijackedResponse
	out    *io.PipeReader
	stderr tail
	done   chan struct{} // closed when the output ended

	closeOnce sync.Once
}

func (s *execStream) Read(p []byte) (int, error) { return s.out.Read(p) }

// Write and CloseWrite go straight to the connection, which is safe for concurrent use: a
// write blocked on a process that does not read never holds up Close.
func (s *execStream) Write(p []byte) (int, error) { return s.conn.Conn.Write(p) }

func (s *execStream) CloseWrite() error { return s.conn.CloseWrite() }

func (s *execStream) Done() <-chan struct{} { return s.done }

func (s *execStream) Stderr() string { return s.stderr.String() }

// Close ends the process's input, gives it attachCloseGrace to end its output, then closes the
// connection (a process that ignores the end of its input runs on until its container goes).
func (s *execStream) Close() error {
	s.closeOnce.Do(func() {
		_ = s.CloseWrite()
		t := time.NewTimer(attachCloseGrace)
		defer t.Stop()
		select {
		case <-s.done:
		case <-t.C:
		}
		s.conn.Close()
		_ = s.out.Close()
		<-s.done // the demultiplexer ends once its connection is closed
	})
	return nil
}

// tail keeps the last attachStderrBytes written to it. It is safe for concurrent use.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if n := len(t.buf); n > attachStderrBytes {
		t.buf = append(t.buf[:0], t.buf[n-attachStderrBytes:]...)
	}
	return len(p), nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf)
}
