package toolgate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/stdiobridge"
)

// sseRetry is the pause between attempts to reach an SSE server that does not answer yet.
const sseRetry = 250 * time.Millisecond

// dialSSE opens the event stream of the MCP server at url (the SSE transport of MCP
// 2024-11-05), retrying until it answers or ctx ends, and returns it as a stdiobridge.Process:
// what the bridge writes as lines is posted to the server, what the server sends is read back as
// lines. The gateway speaks only streamable HTTP to its backends; the bridge serves it that.
func dialSSE(ctx context.Context, url string) (stdiobridge.Process, error) {
	tr := &mcp.SSEClientTransport{Endpoint: url, HTTPClient: &http.Client{}}
	for {
		// The stream lives as long as the process, not the caller's ctx: ctx bounds the
		// connect only, and Close ends the stream.
		life, end := context.WithCancel(cleanup.Unbounded(ctx))
		stop := context.AfterFunc(ctx, end)
		conn, err := tr.Connect(life)
		if err == nil && stop() {
			return newSSEProcess(conn, end), nil
		}
		if conn != nil {
			_ = conn.Close()
		}
		end()
		if err == nil {
			err = ctx.Err()
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect %s: %w (last error: %v)", url, ctx.Err(), err)
		case <-time.After(sseRetry):
		}
	}
}

// sseProcess is an MCP connection seen as a stdio server: newline-delimited JSON-RPC in and out.
type sseProcess struct {
	conn mcp.Connection
	end  context.CancelFunc // ends the stream's request
	out  *io.PipeReader     // the server's messages, one line each
	pw   *io.PipeWriter
	done chan struct{} // closed once the stream has ended

	mu      sync.Mutex
	pending []byte // the bridge's bytes past the last newline
	lastErr error
	once    sync.Once
}

func newSSEProcess(conn mcp.Connection, end context.CancelFunc) *sseProcess {
	pr, pw := io.Pipe()
	p := &sseProcess{conn: conn, end: end, out: pr, pw: pw, done: make(chan struct{})}
	go p.pump()
	return p
}

// pump copies the server's messages to out until the stream ends.
func (p *sseProcess) pump() {
	defer close(p.done)
	for {
		msg, err := p.conn.Read(context.Background()) // Close unblocks it
		if err != nil {
			p.fail(err)
			_ = p.pw.CloseWithError(io.EOF)
			return
		}
		line, err := jsonrpc.EncodeMessage(msg)
		if err != nil {
			p.fail(err)
			continue
		}
		if _, err := p.pw.Write(append(line, '\n')); err != nil {
			return // the reader went away: closed
		}
	}
}

func (p *sseProcess) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastErr == nil && !errors.Is(err, io.EOF) {
		p.lastErr = err
	}
}

// Read reads the server's messages, a line each; io.EOF once the stream ended.
func (p *sseProcess) Read(b []byte) (int, error) { return p.out.Read(b) }

// Write posts each whole line of b to the server as one JSON-RPC message.
func (p *sseProcess) Write(b []byte) (int, error) {
	p.mu.Lock()
	p.pending = append(p.pending, b...)
	var lines [][]byte
	for {
		i := bytes.IndexByte(p.pending, '\n')
		if i < 0 {
			break
		}
		if line := bytes.TrimSpace(p.pending[:i]); len(line) > 0 {
			lines = append(lines, bytes.Clone(line))
		}
		p.pending = p.pending[i+1:]
	}
	p.mu.Unlock()
	for _, line := range lines {
		msg, err := jsonrpc.DecodeMessage(line)
		if err != nil {
			return 0, fmt.Errorf("sse: a line that is no JSON-RPC message: %w", err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), sseWriteTimeout)
		err = p.conn.Write(ctx, msg)
		cancel()
		if err != nil {
			p.fail(err)
			return 0, fmt.Errorf("sse: post: %w", err)
		}
	}
	return len(b), nil
}

// sseWriteTimeout bounds the POST of one message (the answer comes on the stream).
const sseWriteTimeout = 30 * time.Second

// CloseWrite ends the session: an SSE server has no input to close but the stream itself.
func (p *sseProcess) CloseWrite() error { return p.Close() }

// Done is closed once the stream has ended.
func (p *sseProcess) Done() <-chan struct{} { return p.done }

// Stderr is the error that ended the stream, if any: an SSE server has no standard error.
func (p *sseProcess) Stderr() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.lastErr == nil {
		return ""
	}
	return p.lastErr.Error()
}

// Close ends the stream and waits, bounded, for the pump to stop.
func (p *sseProcess) Close() error {
	p.once.Do(func() {
		_ = p.conn.Close()
		p.end()
		_ = p.out.Close()
	})
	select {
	case <-p.done:
	case <-time.After(closeWait):
	}
	return nil
}

// closeWait bounds how long Close waits for the stream's reader to stop.
const closeWait = 5 * time.Second
