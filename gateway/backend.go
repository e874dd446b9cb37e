package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Timings of the backend monitor and of the bounded backend operations.
const (
	pingInterval     = 5 * time.Second // between pings of a healthy backend
	retryInterval    = time.Second     // between reconnects of an unhealthy backend
	pingTimeout      = 3 * time.Second
	reconnectTimeout = 5 * time.Second
	listTimeout      = 10 * time.Second
	closeTimeout     = 6 * time.Second // the SDK bounds its DELETE at 5 s
	maxIdleConns     = 1024            // kept-alive connections to one backend
)

// backend is the gateway's client of one MCP server. One client session is shared by every
// gateway session; a monitor goroutine pings it, reconnects it and re-lists its tools.
type backend struct {
	name, url string
	log       *slog.Logger
	httpc     *http.Client   // the SDK client's: stamps the caller's role header
	rawc      *http.Client   // the fast path's: same pooled connections, headers set per request
	ids       atomic.Uint64  // ids of forwarded calls
	lastOK    atomic.Int64   // unix nanoseconds of the last call the backend answered
	inflight  atomic.Int64   // calls forwarded and not answered yet
	changed   func(*backend) // called after the tool list changed

	relistc chan struct{} // cap 1: the backend said tools/list_changed
	pokec   chan struct{} // cap 1: a call failed, check health now
	wg      sync.WaitGroup

	mu        sync.Mutex
	session   *mcp.ClientSession
	healthy   bool
	lastErr   string
	lastCheck time.Time
	tools     []*mcp.Tool
	card      envproto.Card
	hasCard   bool   // the backend serves its own card
	dataURL   string // absolute data plane URL, empty if none
}

func newBackend(s Backend, log *slog.Logger, changed func(*backend)) *backend {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Many gateway sessions share one backend session, each call on a connection of its own:
	// keep enough idle connections for them all, without the default cap of 100 in total.
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = maxIdleConns
	var rt http.RoundTripper = tr
	if s.Token != "" {
		rt = bearerTransport{base: tr, value: "Bearer " + s.Token}
	}
	return &backend{
		name:    s.Name,
		url:     s.URL,
		log:     log.With("component", s.Name),
		httpc:   &http.Client{Transport: stampTransport{rt}},
		rawc:    &http.Client{Transport: rt},
		changed: changed,
		relistc: make(chan struct{}, 1),
		pokec:   make(chan struct{}, 1),
	}
}

// start connects, lists tools and fetches the card, retrying until ctx ends.
func (b *backend) start(ctx context.Context) error {
	delay := 50 * time.Millisecond
	for {
		attempt, cancel := context.WithTimeout(ctx, reconnectTimeout)
		cs, tools, err := b.connect(attempt)
		cancel()
		if err == nil {
			b.install(cs, tools)
			b.fetchCard(ctx)
			return nil
		}
		b.setError(err)
		select {
		case <-ctx.Done():
			return fmt.Errorf("server %s: connect %s: %w (last error: %v)", b.name, b.url, ctx.Err(), err)
		case <-time.After(delay):
		}
		delay = min(delay*2, time.Second)
	}
}

// connect opens a client session and lists the backend's tools.
func (b *backend) connect(ctx context.Context) (*mcp.ClientSession, []*mcp.Tool, error) {
	client := mcp.NewClient(&mcp.Implementation{Name: "agentenv-gateway", Version: envproto.Version}, &mcp.ClientOptions{
		Logger: b.log,
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
			signal(b.relistc)
		},
	})
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: b.url, HTTPClient: b.httpc}, nil)
	if err != nil {
		return nil, nil, fmt.Errorf("connect: %w", err)
	}
	tools, err := listTools(ctx, cs)
	if err != nil {
		b.closeAsync(cs)
		return nil, nil, err
	}
	return cs, tools, nil
}

func listTools(ctx context.Context, cs *mcp.ClientSession) ([]*mcp.Tool, error) {
	var tools []*mcp.Tool
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, fmt.Errorf("list tools: %w", err)
		}
		tools = append(tools, t)
	}
	return tools, nil
}

// install makes cs the live session and watches it end.
func (b *backend) install(cs *mcp.ClientSession, tools []*mcp.Tool) {
	b.mu.Lock()
	old := b.session
	b.session, b.tools, b.healthy, b.lastErr = cs, tools, true, ""
	b.mu.Unlock()
	if old != nil && old != cs {
		b.closeAsync(old)
	}
	b.wg.Go(func() {
		err := cs.Wait()
		if b.drop(cs, fmt.Errorf("session ended: %v", err)) {
			signal(b.pokec)
		}
	})
}

// drop marks the backend unhealthy if cs is still its session, and closes cs. It reports
// whether cs was the live session.
func (b *backend) drop(cs *mcp.ClientSession, err error) bool {
	b.mu.Lock()
	live := b.session == cs
	if live {
		b.session, b.healthy, b.lastErr = nil, false, err.Error()
	}
	b.mu.Unlock()
	if live {
		b.log.Warn("backend down", "err", err)
		b.closeAsync(cs)
	}
	return live
}

// markDown marks the backend unhealthy after a failed call without closing its session: the
// monitor pings it right away and decides.
func (b *backend) markDown(cs *mcp.ClientSession, err error) {
	b.mu.Lock()
	if b.session == cs {
		b.healthy, b.lastErr = false, err.Error()
	}
	b.mu.Unlock()
	signal(b.pokec)
}

func (b *backend) setError(err error) {
	b.mu.Lock()
	b.lastErr = err.Error()
	b.mu.Unlock()
}

// closeAsync closes cs in the background; close waits for it, bounded.
func (b *backend) closeAsync(cs *mcp.ClientSession) {
	b.wg.Go(func() { _ = cs.Close() })
}

// close closes the live session and waits, bounded, for every background close.
func (b *backend) close() {
	b.mu.Lock()
	cs := b.session
	b.session, b.healthy = nil, false
	b.mu.Unlock()
	if cs != nil {
		b.closeAsync(cs)
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	if cleanup.Wait(ctx, &b.wg) != nil {
		b.log.Warn("backend close timed out")
	}
}

// live returns the session to call, or ErrBackendUnavailable without waiting.
func (b *backend) live() (*mcp.ClientSession, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.session == nil || !b.healthy {
		return nil, fmt.Errorf("server %s: %w: %s", b.name, ErrBackendUnavailable, b.lastErr)
	}
	return b.session, nil
}

// call forwards one tool call. A backend that cannot be reached fails the call at once with
// ErrBackendUnavailable naming the backend; a JSON-RPC error of the backend is returned as is.
func (b *backend) call(ctx context.Context, tool string, args json.RawMessage, meta mcp.Meta) (*mcp.CallToolResult, error) {
	params := &mcp.CallToolParams{Meta: meta, Name: tool, Arguments: args}
	if args == nil {
		params.Arguments = map[string]any{}
	}
	for retried := false; ; retried = true {
		cs, err := b.live()
		if err != nil {
			signal(b.pokec)
			return nil, err
		}
		b.inflight.Add(1)
		res, err := cs.CallTool(ctx, params)
		b.inflight.Add(-1)
		if err == nil {
			b.answered()
			return res, nil
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("server %s: call %s: %w", b.name, tool, ctx.Err())
		}
		if werr := backendAnswer(err); werr != nil {
			return nil, werr
		}
		if errors.Is(err, mcp.ErrSessionMissing) && !retried {
			// The backend restarted and forgot our session before handling the call: reconnect
			// once, bounded, and send it again.
			b.drop(cs, err)
			if rerr := b.reconnect(ctx); rerr == nil {
				continue
			}
		}
		b.markDown(cs, err)
		return nil, fmt.Errorf("server %s: %w: %v", b.name, ErrBackendUnavailable, err)
	}
}

// reconnect opens a new session, bounded, and installs it.
func (b *backend) reconnect(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, reconnectTimeout)
	defer cancel()
	cs, tools, err := b.connect(ctx)
	if err != nil {
		b.setError(err)
		return err
	}
	prev := b.toolsSnapshot()
	b.install(cs, tools)
	b.fetchCard(ctx)
	b.log.Info("backend connected")
	if !sameTools(prev, tools) {
		b.changed(b)
	}
	return nil
}

// monitor pings the backend, reconnects it when it is down and re-lists its tools when it
// says they changed, until ctx ends.
func (b *backend) monitor(ctx context.Context) {
	t := time.NewTimer(pingInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.relistc:
			b.relist(ctx)
			continue
		case <-b.pokec:
			b.mu.Lock()
			recent := time.Since(b.lastCheck) < retryInterval
			b.mu.Unlock()
			if recent {
				continue
			}
		case <-t.C:
		}
		b.check(ctx)
		b.mu.Lock()
		next := pingInterval
		if !b.healthy {
			next = retryInterval
		}
		b.lastCheck = time.Now()
		b.mu.Unlock()
		t.Reset(next)
	}
}

// answered notes that the backend just answered a call.
func (b *backend) answered() { b.lastOK.Store(time.Now().UnixNano()) }

// check pings the live session, or reconnects when there is none or the ping fails. A healthy
// backend that answered a call within the last ping interval is alive without a ping: under
// load a ping may queue behind the calls for longer than its timeout.
func (b *backend) check(ctx context.Context) {
	b.mu.Lock()
	cs, healthy := b.session, b.healthy
	b.mu.Unlock()
	if cs != nil && healthy && time.Since(time.Unix(0, b.lastOK.Load())) < pingInterval {
		return
	}
	if cs != nil {
		pctx, cancel := context.WithTimeout(ctx, pingTimeout)
		err := cs.Ping(pctx, nil)
		cancel()
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil && b.inflight.Load() > 0 {
			// Slow to answer a ping while it works on calls: busy, not dead (a dead backend
			// fails those calls, which marks it down).
			return
		}
		if err == nil || backendAnswer(err) != nil { // a JSON-RPC answer, even an error, is alive
			b.mu.Lock()
			if b.session == cs && !b.healthy {
				b.healthy, b.lastErr = true, ""
				b.log.Info("backend healthy again")
			}
			b.mu.Unlock()
			return
		}
		if ctx.Err() != nil {
			return
		}
		b.drop(cs, fmt.Errorf("ping: %w", err))
	}
	_ = b.reconnect(ctx)
}

// relist re-lists the tools after the backend's tools/list_changed.
func (b *backend) relist(ctx context.Context) {
	b.mu.Lock()
	cs := b.session
	b.mu.Unlock()
	if cs == nil {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, listTimeout)
	tools, err := listTools(lctx, cs)
	cancel()
	if err != nil {
		b.setError(fmt.Errorf("relist: %w", err))
		return
	}
	b.mu.Lock()
	if b.session != cs {
		b.mu.Unlock()
		return
	}
	b.tools = tools
	b.mu.Unlock()
	b.changed(b)
}

func (b *backend) toolsSnapshot() []*mcp.Tool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.tools
}

// health returns whether the backend is healthy and its last error.
func (b *backend) health() (bool, string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.healthy, b.lastErr
}

// sameTools reports whether two tool lists are equal as JSON.
func sameTools(a, b []*mcp.Tool) bool {
	ja, err1 := json.Marshal(a)
	jb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && string(ja) == string(jb)
}

// codeRejected is the code of the go-sdk's jsonrpc2.ErrRejected: the transport failed and
// the backend never answered.
const codeRejected = -32005

// backendAnswer returns the JSON-RPC error the backend answered with, or nil when err is a
// transport failure.
func backendAnswer(err error) *jsonrpc.Error {
	var werr *jsonrpc.Error
	if errors.As(err, &werr) && werr.Code != codeRejected {
		return werr
	}
	return nil
}

// signal sends on a buffered channel of capacity 1 without blocking.
func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

type roleKey struct{}

// withRole stores the caller's role for stampTransport.
func withRole(ctx context.Context, role string) context.Context {
	return context.WithValue(ctx, roleKey{}, role)
}

// stampTransport sets the AgentEnv-Role header of a forwarded request from its context, so a
// backend sees the caller's role both in _meta and where a plain HTTP server looks, and bounds
// the answer to a POST at maxBackendAnswer bytes (a GET is the session's long-lived stream).
type stampTransport struct{ base http.RoundTripper }

func (t stampTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if role, ok := r.Context().Value(roleKey{}).(string); ok && role != "" {
		r = r.Clone(r.Context())
		r.Header.Set(RoleHeader, role)
	}
	if vt := virtualTimeOf(r.Context()); vt != "" {
		r = r.Clone(r.Context())
		r.Header.Set(VirtualTimeHeader, vt)
	}
	resp, err := t.base.RoundTrip(r)
	if err == nil && r.Method == http.MethodPost {
		resp.Body = &boundedBody{ReadCloser: resp.Body, left: maxBackendAnswer}
	}
	return resp, err
}

// bearerTransport sets the backend's own bearer token (Backend.Token) on every request to it.
type bearerTransport struct {
	base  http.RoundTripper
	value string
}

func (t bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", t.value)
	return t.base.RoundTrip(r)
}

// boundedBody fails a read past its bound with errAnswerTooLarge.
type boundedBody struct {
	io.ReadCloser
	left int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.left < 0 {
		return 0, errAnswerTooLarge
	}
	if int64(len(p)) > b.left+1 {
		p = p[:b.left+1] // one more, to tell a body of exactly the bound from a longer one
	}
	n, err := b.ReadCloser.Read(p)
	b.left -= int64(n)
	if b.left < 0 {
		return n, errAnswerTooLarge
	}
	return n, err
}
