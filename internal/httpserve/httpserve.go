// Package httpserve builds the HTTP servers agentenv runs (gateway, env servers, stdio bridge,
// db-mcp, explorer) with one set of bounds: header, read, write and idle timeouts, a cap on
// open connections and a cap on MCP sessions.
//
// Long-lived MCP requests (the standalone SSE stream of GET /mcp, and a POST /mcp whose tool
// call may run for many minutes) are exempt from the server-wide read and write deadlines: the
// request body is still read under ReadTimeout, then both deadlines are lifted for that
// request, so a stream or a long call is not cut. Their length is bounded by the owners of the
// calls (call timeouts) and of the sessions (idle-session timeouts) instead.
package httpserve

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/netutil"
)

// Defaults of [Limits]; a zero field takes its default.
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultReadTimeout       = time.Minute
	DefaultWriteTimeout      = time.Minute
	DefaultIdleTimeout       = 2 * time.Minute
	DefaultMaxConns          = 4096
	DefaultMaxSessions       = 256
	DefaultMaxHeaderBytes    = 64 << 10
)

// Limits bounds one HTTP server. A zero field takes its Default; a negative duration or count
// means no bound.
type Limits struct {
	// ReadHeaderTimeout bounds reading a request's headers (a slowloris client is cut by it).
	ReadHeaderTimeout time.Duration
	// ReadTimeout bounds reading a whole request, body included.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response, except for long-lived MCP requests.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection idle this long.
	IdleTimeout time.Duration
	// MaxConns caps the connections open at once; Accept waits past it.
	MaxConns int
	// MaxSessions caps the MCP sessions open at once (see [SessionCap]).
	MaxSessions int
	// MaxHeaderBytes bounds a request's headers.
	MaxHeaderBytes int
}

// WithDefaults returns l with every zero field set to its default.
func (l Limits) WithDefaults() Limits {
	dur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
		if *d < 0 {
			*d = 0 // net/http: zero is no timeout
		}
	}
	num := func(n *int, def int) {
		if *n == 0 {
			*n = def
		}
	}
	dur(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	dur(&l.ReadTimeout, DefaultReadTimeout)
	dur(&l.WriteTimeout, DefaultWriteTimeout)
	dur(&l.IdleTimeout, DefaultIdleTimeout)
	num(&l.MaxConns, DefaultMaxConns)
	num(&l.MaxSessions, DefaultMaxSessions)
	num(&l.MaxHeaderBytes, DefaultMaxHeaderBytes)
	return l
}

// New returns a server for h bounded by l (after [Limits.WithDefaults]). Requests that
// [LongLived] picks are exempt from the read deadline once their body is read and from the
// write deadline. The caller serves it on a listener from [Listen].
func New(h http.Handler, l Limits) *http.Server {
	l = l.WithDefaults()
	return &http.Server{
		Handler:           exemptLong(h),
		ReadHeaderTimeout: l.ReadHeaderTimeout,
		ReadTimeout:       l.ReadTimeout,
		WriteTimeout:      l.WriteTimeout,
		IdleTimeout:       l.IdleTimeout,
		MaxHeaderBytes:    l.MaxHeaderBytes,
	}
}

// Listen listens on TCP addr (host:port; port 0 picks one) and caps the connections open at
// once at maxConns (0 takes [DefaultMaxConns], negative means no cap).
func Listen(ctx context.Context, addr string, maxConns int) (net.Listener, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen %s: %w", addr, err)
	}
	return Cap(ln, maxConns), nil
}

// Cap returns ln capped at maxConns open connections (0 takes [DefaultMaxConns], negative
// means ln itself). Accept waits while the cap is reached; the kernel's backlog holds the
// clients meanwhile.
func Cap(ln net.Listener, maxConns int) net.Listener {
	if maxConns == 0 {
		maxConns = DefaultMaxConns
	}
	if maxConns < 0 {
		return ln
	}
	return netutil.LimitListener(ln, maxConns)
}

// LongLived reports whether r is an MCP request that may stay open for long: any request on
// a path ending in /mcp (the standalone event stream, a tool call, a session's DELETE).
func LongLived(r *http.Request) bool {
	p := r.URL.Path
	return len(p) >= 4 && p[len(p)-4:] == "/mcp"
}

// exemptLong lifts the connection's read and write deadlines for long-lived requests: the
// write deadline at once, the read deadline once the body is read (so a dribbled body is
// still cut by ReadTimeout).
func exemptLong(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !LongLived(r) {
			h.ServeHTTP(w, r)
			return
		}
		rc := http.NewResponseController(w)
		_ = rc.SetWriteDeadline(time.Time{})
		if r.Body == nil || r.Body == http.NoBody || r.ContentLength == 0 {
			_ = rc.SetReadDeadline(time.Time{})
		} else {
			r.Body = &liftOnEOF{ReadCloser: r.Body, rc: rc}
		}
		h.ServeHTTP(w, r)
	})
}

// liftOnEOF lifts the read deadline when the body has been read to its end: the server's
// background read that watches for a closed connection would otherwise hit the deadline and
// cancel the request's context mid-call.
type liftOnEOF struct {
	io.ReadCloser
	rc   *http.ResponseController
	done bool
}

func (b *liftOnEOF) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err == io.EOF && !b.done {
		b.done = true
		_ = b.rc.SetReadDeadline(time.Time{})
	}
	return n, err
}

// Stream lifts the read and write deadlines of w's connection for the rest of this request,
// for a handler about to serve a long event stream on a path [LongLived] does not pick. Call it
// once the request body is read. Its error is the ResponseController's (for a writer that
// cannot set deadlines).
func Stream(w http.ResponseWriter) error {
	rc := http.NewResponseController(w)
	if err := rc.SetWriteDeadline(time.Time{}); err != nil {
		return fmt.Errorf("lift write deadline: %w", err)
	}
	if err := rc.SetReadDeadline(time.Time{}); err != nil {
		return fmt.Errorf("lift read deadline: %w", err)
	}
	return nil
}

// SessionHeader is the MCP streamable-HTTP header naming a request's session.
const SessionHeader = "Mcp-Session-Id"

// SessionCap wraps an MCP streamable-HTTP handler h so that at most max sessions are open at
// once: a POST with no session header whose JSON-RPC method opens a session (initialize, or
// the sessionless protocol's server/discover) is refused with 503 and a JSON-RPC error while
// open() plus the openings in progress reach max. open must report the sessions open now; a
// session counts until it closes, so closing one frees its slot. Other requests pass
// untouched. A non-positive max means no cap.
func SessionCap(h http.Handler, max int, open func() int) http.Handler {
	if max <= 0 {
		return h
	}
	var pending atomic.Int64
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get(SessionHeader) != "" || r.Body == nil {
			h.ServeHTTP(w, r)
			return
		}
		body, err := io.ReadAll(io.LimitReader(r.Body, maxPeek+1))
		rest := io.MultiReader(bytes.NewReader(body), r.Body)
		r.Body = struct {
			io.Reader
			io.Closer
		}{rest, r.Body}
		if err != nil || len(body) > maxPeek || !opensSession(body) {
			h.ServeHTTP(w, r) // the handler answers what it cannot parse
			return
		}
		n := pending.Add(1)
		var once sync.Once
		settle := func() { once.Do(func() { pending.Add(-1) }) }
		defer settle()
		if int64(open())+n > int64(max) {
			writeRefusal(w, max)
			return
		}
		h.ServeHTTP(&opening{ResponseWriter: w, settle: settle}, r)
	})
}

// opening is the ResponseWriter of a request that opens a session. Its first write settles
// the opening: by then the handler has opened the session (which open() counts) or refused it,
// so it is no longer in progress. Counting it until the handler returned instead counted a
// session twice while its answer was already with the client, whose next initialize was then
// refused short of the cap.
type opening struct {
	http.ResponseWriter
	settle func()
}

func (w *opening) WriteHeader(code int) {
	w.settle()
	w.ResponseWriter.WriteHeader(code)
}

func (w *opening) Write(p []byte) (int, error) {
	w.settle()
	return w.ResponseWriter.Write(p)
}

// Flush flushes the response, as the event stream of a session's answer needs.
func (w *opening) Flush() {
	w.settle()
	_ = http.NewResponseController(w.ResponseWriter).Flush()
}

// Unwrap gives http.ResponseController the writer underneath (deadlines, hijacking).
func (w *opening) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// maxPeek bounds the body SessionCap reads to find a request's method; the MCP SDK refuses
// bodies past the same bound.
const maxPeek = 4 << 20

// opensSession reports whether body is one JSON-RPC request whose method opens a session.
func opensSession(body []byte) bool {
	var m struct {
		Method string `json:"method"`
	}
	if json.Unmarshal(body, &m) != nil {
		return false
	}
	return m.Method == "initialize" || m.Method == "server/discover"
}

// ErrCodeTooManySessions is the JSON-RPC error code of a refused initialize (in the range
// JSON-RPC leaves to servers).
const ErrCodeTooManySessions = -32001

func writeRefusal(w http.ResponseWriter, max int) {
	body, _ := json.Marshal(map[string]any{
		"jsonrpc": "2.0",
		"id":      nil,
		"error": map[string]any{
			"code":    ErrCodeTooManySessions,
			"message": fmt.Sprintf("too many MCP sessions: the server's cap of %d is reached; close one (DELETE /mcp) or retry later", max),
		},
	})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "5")
	w.WriteHeader(http.StatusServiceUnavailable)
	_, _ = w.Write(append(body, '\n'))
}
