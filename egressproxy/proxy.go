// Package egressproxy is the egress proxy of a Harbor task run with network_mode = "allowlist"
// (`agentenv serve egress-proxy`): an HTTP forward proxy that lets through only the hosts of its
// Allowlist, by name.
//
// It answers CONNECT host:port by dialing host:port and tunnelling bytes both ways (HTTPS, and
// anything else a client tunnels: git over HTTPS, pip, apt with an https mirror), and a
// plain-HTTP request with an absolute URI (GET http://host/path) by forwarding it. Any other
// host is answered 403 with a one-line reason, before anything is dialled; every decision is
// logged. Names are resolved by the proxy, so a client behind it needs no DNS of its own. An
// IP literal passes only when the list has it (or a prefix holding it), so a listed name is no
// way to reach an address that is not.
//
// The proxy is the only way out for a task on a network with no route out (harbor's native
// mapping): what honours HTTP_PROXY/HTTPS_PROXY goes through it, and nothing else gets out.
// It is bounded: each dial by DialTimeout, each tunnel and keep-alive connection by IdleTimeout
// of silence, the connections open at once by MaxConns (past it, Accept waits).
//
// A task whose phases differ in network mode (Harbor's [agent] and [verifier] network_mode)
// switches the proxy's Policy between them: WritePolicy writes it to the proxy's PolicyFile and
// returns once the proxy has applied it, closing what it no longer allows (policy.go).
package egressproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/netutil"

	"github.com/agentenv/agentenv/internal/cleanup"
)

// Defaults of Config; a zero field takes its default.
const (
	DefaultListen      = ":3128"
	DefaultDialTimeout = 10 * time.Second
	DefaultIdleTimeout = 5 * time.Minute
	DefaultMaxConns    = 256
)

// Bounds of the proxy's own: how long Serve waits for requests in flight once its context ends,
// and how long a client may take to send a request's headers.
const (
	shutdownWait  = 5 * time.Second
	headerTimeout = 30 * time.Second
)

// Config configures a Proxy.
type Config struct {
	Listen string   // address to listen on (DefaultListen)
	Allow  []string // the allowlist's entries (see ParseAllowlist); none allows nothing
	Any    bool     // every host instead of Allow (a "public" phase; see Policy)
	// PolicyFile, when set, is where WritePolicy puts the policy of each later phase of the
	// task; Serve applies it within PolicyPoll of its writing, closing the tunnels it no longer
	// allows, and acknowledges it.
	PolicyFile  string
	DialTimeout time.Duration // bound on each dial to a host (DefaultDialTimeout)
	IdleTimeout time.Duration // a tunnel or connection silent this long is closed (DefaultIdleTimeout)
	MaxConns    int           // client connections open at once (DefaultMaxConns)
}

// Proxy is the egress proxy: an http.Handler, and Run serves it.
type Proxy struct {
	cfg  Config
	log  *slog.Logger
	dial func(ctx context.Context, network, addr string) (net.Conn, error)
	fwd  *httputil.ReverseProxy

	mu      sync.Mutex
	allow   Allowlist // the phase's: Config's, then each Policy applied
	applied []byte    // the policy file as last applied
	// open are the tunnels (hijacked client connections) and forwarded requests under way,
	// with their hosts: closed when Run ends, or when a policy no longer allows their host.
	open map[io.Closer]string
}

// New returns a proxy of cfg, its defaults filled in; an allowlist entry it cannot read is an
// error naming it. A nil logger discards.
func New(cfg Config, log *slog.Logger) (*Proxy, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	allow, err := ParseAllowlist(cfg.Allow)
	if err != nil {
		return nil, err
	}
	if cfg.Any {
		allow = AnyHost()
	}
	if cfg.Listen == "" {
		cfg.Listen = DefaultListen
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.IdleTimeout <= 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	d := &net.Dialer{Timeout: cfg.DialTimeout}
	p := &Proxy{cfg: cfg, allow: allow, log: log, dial: d.DialContext, open: map[io.Closer]string{}}
	tr := &http.Transport{
		Proxy:                 nil, // never another proxy: the proxy's own environment is not the task's
		DialContext:           func(ctx context.Context, n, a string) (net.Conn, error) { return p.dial(ctx, n, a) },
		ResponseHeaderTimeout: cfg.IdleTimeout,
		IdleConnTimeout:       cfg.IdleTimeout,
		MaxIdleConns:          cfg.MaxConns,
		TLSHandshakeTimeout:   cfg.DialTimeout,
	}
	p.fwd = &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.Out.Host = r.In.Host }, // the absolute URI as asked
		Transport: tr,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			p.log.Warn("egress forward failed", "host", r.URL.Host, "err", err)
			refuse(w, http.StatusBadGateway, fmt.Sprintf("%s: %v", r.URL.Host, err))
		},
	}
	return p, nil
}

// Run serves the proxy on cfg.Listen until ctx ends, then closes its listener, its connections
// and its tunnels within a bounded wait. A nil logger discards.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	p, err := New(cfg, log)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", p.cfg.Listen)
	if err != nil {
		return fmt.Errorf("egress proxy: listen: %w", err)
	}
	return p.Serve(ctx, ln)
}

// Serve serves the proxy on ln until ctx ends (see Run); it closes ln.
func (p *Proxy) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{
		Handler:           p,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       p.cfg.IdleTimeout,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          slog.NewLogLogger(p.log.Handler(), slog.LevelDebug),
	}
	p.log.Info("egress proxy listening", "addr", ln.Addr().String(), "allow", p.cfg.Allow, "any", p.cfg.Any, "policy_file", p.cfg.PolicyFile)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(netutil.LimitListener(ln, p.cfg.MaxConns)) }()
	if p.cfg.PolicyFile != "" {
		pctx, stop := context.WithCancel(ctx)
		defer stop()
		go p.watch(pctx)
	}
	select {
	case err := <-done:
		return fmt.Errorf("egress proxy: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := cleanup.Detached(ctx, shutdownWait)
	defer cancel()
	err := srv.Shutdown(sctx)
	p.closeAll()
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("egress proxy: shut down: %w", err)
	}
	return nil
}

// ServeHTTP answers one proxy request: CONNECT host:port, or an absolute http:// URI.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodConnect {
		p.connect(w, r)
		return
	}
	if r.URL.Host == "" || !r.URL.IsAbs() {
		p.log.Info("egress refused", "method", r.Method, "target", r.RequestURI, "reason", "not a proxy request")
		refuse(w, http.StatusBadRequest, "not a proxy request: want CONNECT host:port or an absolute http:// URI")
		return
	}
	if r.URL.Scheme != "http" {
		p.log.Info("egress refused", "method", r.Method, "target", r.URL.Redacted(), "reason", "scheme")
		refuse(w, http.StatusBadRequest, fmt.Sprintf("scheme %q: want http:// (tunnel https with CONNECT)", r.URL.Scheme))
		return
	}
	if !p.decide(r.Method, r.URL.Hostname(), r.URL.Host) {
		refuse(w, http.StatusForbidden, fmt.Sprintf("host %s is not in the task's allowed_hosts", r.URL.Hostname()))
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	f := forward(cancel)
	if !p.track(&f, r.URL.Hostname()) {
		cancel()
		refuse(w, http.StatusForbidden, fmt.Sprintf("host %s is not allowed in this phase", r.URL.Hostname()))
		return
	}
	defer p.untrack(&f)
	p.fwd.ServeHTTP(w, r.WithContext(ctx))
}

// forward is a forwarded request under way; closing it cancels it.
type forward context.CancelFunc

func (f *forward) Close() error {
	(*f)()
	return nil
}

// decide says whether host may be reached and logs the decision.
func (p *Proxy) decide(method, host, target string) bool {
	p.mu.Lock()
	allow := p.allow
	p.mu.Unlock()
	ok, why := allow.Allows(host)
	if ok {
		p.log.Info("egress allowed", "method", method, "target", target, "reason", why)
	} else {
		p.log.Info("egress denied", "method", method, "target", target, "reason", why)
	}
	return ok
}

// connect tunnels a CONNECT to an allowed host:port.
func (p *Proxy) connect(w http.ResponseWriter, r *http.Request) {
	host, port, err := net.SplitHostPort(r.Host)
	if err != nil || port == "" {
		p.log.Info("egress refused", "method", r.Method, "target", r.Host, "reason", "no port")
		refuse(w, http.StatusBadRequest, fmt.Sprintf("CONNECT %q: want host:port", r.Host))
		return
	}
	if !p.decide(r.Method, host, r.Host) {
		refuse(w, http.StatusForbidden, fmt.Sprintf("host %s is not in the task's allowed_hosts", host))
		return
	}
	up, err := p.dial(r.Context(), "tcp", net.JoinHostPort(host, port))
	if err != nil {
		p.log.Warn("egress dial failed", "target", r.Host, "err", err)
		refuse(w, http.StatusBadGateway, fmt.Sprintf("dial %s: %v", r.Host, err))
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		refuse(w, http.StatusInternalServerError, "this connection cannot be tunnelled")
		return
	}
	client, buf, err := hj.Hijack()
	if err != nil {
		up.Close()
		p.log.Warn("egress hijack failed", "target", r.Host, "err", err)
		return
	}
	if !p.track(client, host) {
		client.Close()
		up.Close()
		return
	}
	defer p.untrack(client)
	defer up.Close()
	_ = client.SetDeadline(time.Time{}) // the server's deadlines end with the request
	if _, err := client.Write([]byte("HTTP/1.1 200 Connection Established\r\n\r\n")); err != nil {
		return
	}
	start := time.Now()
	c, u := idle{client, p.cfg.IdleTimeout}, idle{up, p.cfg.IdleTimeout}
	var wg sync.WaitGroup
	var sent, received int64
	wg.Go(func() {
		// What the client sent past the CONNECT's headers first.
		if n := buf.Reader.Buffered(); n > 0 {
			b, _ := buf.Reader.Peek(n)
			if _, err := u.Write(b); err != nil {
				up.Close()
				return
			}
			sent += int64(n)
		}
		n, _ := io.Copy(u, c)
		sent += n
		halfClose(up)
	})
	n, _ := io.Copy(c, u)
	received = n
	halfClose(client)
	wg.Wait()
	p.log.Info("egress tunnel closed", "target", r.Host, "sent", sent, "received", received, "duration", time.Since(start).Round(time.Millisecond))
}

// track records c, a tunnel or a forwarded request to host, so that Serve's end, or a policy
// that no longer allows host, closes it; false once Serve has ended, or when host is no longer
// allowed (a policy applied since the request was decided).
func (p *Proxy) track(c io.Closer, host string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if ok, _ := p.allow.Allows(host); p.open == nil || !ok {
		return false
	}
	p.open[c] = host
	return true
}

// untrack forgets c and closes it.
func (p *Proxy) untrack(c io.Closer) {
	p.mu.Lock()
	delete(p.open, c)
	p.mu.Unlock()
	c.Close()
}

// closeAll closes every tunnel and forwarded request, and refuses new ones.
func (p *Proxy) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.open {
		c.Close()
	}
	p.open = nil
}

// refuse answers the request with code and a one-line reason.
func refuse(w http.ResponseWriter, code int, reason string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Connection", "close")
	w.WriteHeader(code)
	fmt.Fprintf(w, "agentenv egress proxy: %s\n", strings.ReplaceAll(reason, "\n", " "))
}

// idle is a connection whose every read and write must make progress within timeout.
type idle struct {
	net.Conn
	timeout time.Duration
}

func (c idle) Read(b []byte) (int, error) {
	_ = c.Conn.SetDeadline(time.Now().Add(c.timeout))
	return c.Conn.Read(b)
}

func (c idle) Write(b []byte) (int, error) {
	_ = c.Conn.SetDeadline(time.Now().Add(c.timeout))
	return c.Conn.Write(b)
}

// halfClose ends the writing side of c, so that its peer reads EOF while the other direction
// finishes; a connection that cannot is closed.
func halfClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	c.Close()
}
