package egressproxy

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestAllowlist(t *testing.T) {
	a, err := ParseAllowlist([]string{"Example.org", "*.pypi.org", "192.0.2.7", "198.51.100.0/24", "[2001:db8::1]", "files.test."})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		host string
		want bool
	}{
		{"example.org", true},
		{"EXAMPLE.ORG.", true},        // case and a trailing dot do not matter
		{"www.example.org", false},    // an exact name is not a wildcard
		{"files.test", true},          // listed with a trailing dot
		{"pypi.org", false},           // *.pypi.org is its subdomains only
		{"files.pypi.org", true},      // one label down
		{"a.b.pypi.org", true},        // and deeper
		{"FILES.PyPI.org", true},      // case-insensitively
		{"evilpypi.org", false},       // not a subdomain
		{"pypi.org.evil.test", false}, // the suffix must end the name
		{"192.0.2.7", true},           // a listed address
		{"192.0.2.8", false},          // an address is never allowed by a name
		{"198.51.100.200", true},      // within a listed prefix
		{"2001:db8::1", true},
		{"[2001:db8::1]", true},
		{"2001:db8::2", false},
		{"::ffff:192.0.2.7", true}, // the mapped form of a listed address
		{"127.0.0.1", false},
		{"", false},
		{"bad host", false},
	} {
		if got, why := a.Allows(c.host); got != c.want {
			t.Errorf("Allows(%q) = %v (%s), want %v", c.host, got, why, c.want)
		}
	}
	var zero Allowlist
	if ok, _ := zero.Allows("example.org"); ok {
		t.Error("the zero Allowlist allows example.org")
	}
	for _, bad := range []string{"", "http://example.org", "example.org:443", "*.", "a.*.org", "*example.org", "10.0.0.0/99"} {
		if _, err := ParseAllowlist([]string{bad}); err == nil || !strings.Contains(err.Error(), "allow[0]") {
			t.Errorf("ParseAllowlist(%q): %v, want an error naming allow[0]", bad, err)
		}
	}
}

// rig is a proxy served on 127.0.0.1 whose dials of the names in hosts go to their addresses
// (the test's servers), so that the tests reach local servers by name; its log is kept.
type rig struct {
	url  *url.URL
	log  *bytes.Buffer
	stop context.CancelFunc
	done chan error
}

func newRig(t *testing.T, cfg Config, hosts map[string]string) *rig {
	t.Helper()
	var buf bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(lockedWriter{&mu, &buf}, nil))
	p, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	real := p.dial
	p.dial = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, _ := net.SplitHostPort(addr)
		if to, ok := hosts[host]; ok {
			addr = net.JoinHostPort(to, port)
		}
		return real(ctx, network, addr)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &rig{url: &url.URL{Scheme: "http", Host: ln.Addr().String()}, log: &buf, stop: cancel, done: make(chan error, 1)}
	go func() { r.done <- p.Serve(ctx, ln) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-r.done:
			if err != nil {
				t.Errorf("serve: %v", err)
			}
		case <-time.After(time.Minute):
			t.Error("the proxy did not stop within a minute of its context's end")
		}
		mu.Lock()
		defer mu.Unlock()
		if t.Failed() {
			t.Logf("proxy log:\n%s", buf.String())
		}
	})
	return r
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}

// client is an HTTP client that goes through r, trusting ts's certificate.
func (r *rig) client(ts *httptest.Server) *http.Client {
	tr := ts.Client().Transport.(*http.Transport).Clone()
	tr.Proxy = http.ProxyURL(r.url)
	return &http.Client{Transport: tr, Timeout: time.Minute}
}

// connect sends CONNECT target to the proxy by hand and returns the connection, its reader
// and the status line's code.
func (r *rig) connect(t *testing.T, target string) (net.Conn, *bufio.Reader, int, string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", r.url.Host, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	_ = c.SetDeadline(time.Now().Add(time.Minute))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	br := bufio.NewReader(c)
	res, err := http.ReadResponse(br, &http.Request{Method: http.MethodConnect})
	if err != nil {
		t.Fatalf("CONNECT %s: %v", target, err)
	}
	body := ""
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		body = string(b)
	}
	return c, br, res.StatusCode, body
}

func hello(w http.ResponseWriter, r *http.Request) { fmt.Fprintf(w, "hello from %s", r.Host) }

func TestConnectTunnelsToAnAllowedHost(t *testing.T) {
	ts := httptest.NewTLSServer(http.HandlerFunc(hello))
	defer ts.Close()
	_, port, _ := net.SplitHostPort(ts.Listener.Addr().String())
	// httptest's certificate names example.com, so TLS through the tunnel is verified.
	r := newRig(t, Config{Allow: []string{"example.com"}}, map[string]string{"example.com": "127.0.0.1"})
	res, err := r.client(ts).Get("https://example.com:" + port + "/")
	if err != nil {
		t.Fatalf("GET through the tunnel: %v", err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || !strings.HasPrefix(string(b), "hello from example.com") {
		t.Errorf("through the tunnel: %d %q", res.StatusCode, b)
	}
	if !strings.Contains(r.log.String(), "egress allowed") {
		t.Errorf("no allowed decision in the log:\n%s", r.log)
	}
}

func TestPlainHTTPToAnAllowedHost(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Proxy-Connection") != "" || r.Header.Get("Proxy-Authorization") != "" {
			http.Error(w, "proxy headers reached the host", http.StatusTeapot)
			return
		}
		hello(w, r)
	}))
	defer ts.Close()
	_, port, _ := net.SplitHostPort(ts.Listener.Addr().String())
	r := newRig(t, Config{Allow: []string{"*.allowed.test"}}, map[string]string{"api.allowed.test": "127.0.0.1"})
	req, _ := http.NewRequest(http.MethodGet, "http://api.allowed.test:"+port+"/x", nil)
	req.Header.Set("Proxy-Authorization", "Basic eDp5")
	res, err := r.client(ts).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != 200 || string(b) != "hello from api.allowed.test:"+port {
		t.Errorf("forwarded: %d %q", res.StatusCode, b)
	}
}

func TestDenied(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(hello))
	defer ts.Close()
	addr := ts.Listener.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	local := map[string]string{"allowed.test": "127.0.0.1", "denied.test": "127.0.0.1", "a.allowed.test": "127.0.0.1"}
	r := newRig(t, Config{Allow: []string{"*.allowed.test"}}, local)
	for _, target := range []string{
		"denied.test:" + port,  // not listed
		"allowed.test:" + port, // *.allowed.test is its subdomains only
		addr,                   // an IP literal, though the server is there
		"[::1]:" + port,
	} {
		_, _, code, body := r.connect(t, target)
		if code != http.StatusForbidden || strings.Count(body, "\n") != 1 || !strings.Contains(body, "allowed_hosts") {
			t.Errorf("CONNECT %s: %d %q, want 403 and a one-line reason", target, code, body)
		}
	}
	res, err := r.client(ts).Get("http://denied.test:" + port + "/")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "host denied.test is not in the task's allowed_hosts") {
		t.Errorf("GET http://denied.test: %d %q, want 403", res.StatusCode, b)
	}
	// A request for the proxy itself, not through it.
	res, err = http.Get(r.url.String() + "/")
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusBadRequest {
		t.Errorf("GET / of the proxy: %d, want 400", res.StatusCode)
	}
	if got := strings.Count(r.log.String(), "egress denied"); got != 5 {
		t.Errorf("%d denied decisions in the log, want 5:\n%s", got, r.log)
	}
	// The subdomain still passes: the denials were the list's, not the rig's.
	c, br, code, _ := r.connect(t, "a.allowed.test:"+port)
	if code != http.StatusOK {
		t.Fatalf("CONNECT a.allowed.test: %d", code)
	}
	fmt.Fprintf(c, "GET / HTTP/1.1\r\nHost: a.allowed.test\r\nConnection: close\r\n\r\n")
	res, err = http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ = io.ReadAll(res.Body)
	if string(b) != "hello from a.allowed.test" {
		t.Errorf("through the tunnel: %q", b)
	}
}

func TestListedAddress(t *testing.T) {
	ts := httptest.NewServer(http.HandlerFunc(hello))
	defer ts.Close()
	r := newRig(t, Config{Allow: []string{"127.0.0.1"}}, nil)
	if _, _, code, body := r.connect(t, ts.Listener.Addr().String()); code != http.StatusOK {
		t.Errorf("CONNECT to a listed address: %d %q", code, body)
	}
}

func TestDialFailureIsBadGateway(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	_, port, _ := net.SplitHostPort(addr)
	r := newRig(t, Config{Allow: []string{"gone.test"}}, map[string]string{"gone.test": "127.0.0.1"})
	if _, _, code, body := r.connect(t, "gone.test:"+port); code != http.StatusBadGateway || !strings.Contains(body, "dial gone.test") {
		t.Errorf("CONNECT to a closed port: %d %q, want 502", code, body)
	}
}

// TestIdleTunnelIsClosed: a tunnel silent for the idle timeout ends, and so does every tunnel
// when the proxy stops.
func TestIdleTunnelIsClosed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() { // a host that accepts and never speaks
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(ln.Addr().String())
	r := newRig(t, Config{Allow: []string{"quiet.test"}, IdleTimeout: 100 * time.Millisecond}, map[string]string{"quiet.test": "127.0.0.1"})
	c, br, code, _ := r.connect(t, "quiet.test:"+port)
	if code != http.StatusOK {
		t.Fatalf("CONNECT: %d", code)
	}
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("read from an idle tunnel: %v, want EOF once the proxy closed it", err)
	}

	r2 := newRig(t, Config{Allow: []string{"quiet.test"}}, map[string]string{"quiet.test": "127.0.0.1"})
	c, br, code, _ = r2.connect(t, "quiet.test:"+port)
	if code != http.StatusOK {
		t.Fatalf("CONNECT: %d", code)
	}
	r2.stop()
	_ = c.SetReadDeadline(time.Now().Add(time.Minute))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("read from a tunnel after the proxy stopped: %v, want EOF", err)
	}
}

func TestNewRefusesABadList(t *testing.T) {
	if _, err := New(Config{Allow: []string{"ok.test", "https://bad.test"}}, nil); err == nil || !strings.Contains(err.Error(), "allow[1]") {
		t.Errorf("New with a URL in the list: %v, want an error naming allow[1]", err)
	}
}
