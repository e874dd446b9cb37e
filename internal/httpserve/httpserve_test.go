package httpserve

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestWithDefaults(t *testing.T) {
	l := Limits{ReadTimeout: -1, MaxConns: 7}.WithDefaults()
	if l.ReadHeaderTimeout != DefaultReadHeaderTimeout || l.WriteTimeout != DefaultWriteTimeout ||
		l.IdleTimeout != DefaultIdleTimeout || l.MaxSessions != DefaultMaxSessions {
		t.Fatalf("defaults not applied: %+v", l)
	}
	if l.ReadTimeout != 0 || l.MaxConns != 7 {
		t.Fatalf("explicit values changed: %+v", l)
	}
}

func TestLongLived(t *testing.T) {
	for path, want := range map[string]bool{"/mcp": true, "/servers/a/mcp": true, "/state": false, "/mcpx": false, "/": false} {
		r, _ := http.NewRequest(http.MethodGet, "http://x"+path, nil)
		if got := LongLived(r); got != want {
			t.Errorf("LongLived(%s) = %v, want %v", path, got, want)
		}
	}
}

// serve serves h bounded by l on loopback until the test ends and returns its address.
func serve(t *testing.T, h http.Handler, l Limits) string {
	t.Helper()
	ln, err := Listen(context.Background(), "127.0.0.1:0", l.MaxConns)
	if err != nil {
		t.Fatal(err)
	}
	srv := New(h, l)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

func TestWriteTimeoutExemptsMCP(t *testing.T) {
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		select {
		case <-time.After(600 * time.Millisecond):
		case <-r.Context().Done():
			return // a cancelled context would mean the read deadline was not lifted
		}
		_, _ = io.WriteString(w, "done")
	})
	addr := serve(t, slow, Limits{ReadTimeout: 200 * time.Millisecond, WriteTimeout: 200 * time.Millisecond})
	get := func(path string) (string, error) {
		resp, err := http.Post("http://"+addr+path, "application/json", strings.NewReader(`{}`))
		if err != nil {
			return "", err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		return string(b), err
	}
	if body, err := get("/mcp"); err != nil || body != "done" {
		t.Fatalf("/mcp past the write timeout: %q, %v; want done", body, err)
	}
	if body, err := get("/state"); err == nil && body == "done" {
		t.Fatalf("/state past the write timeout answered %q; want the connection cut", body)
	}
}

func TestReadHeaderTimeoutCutsSlowloris(t *testing.T) {
	addr := serve(t, http.NotFoundHandler(), Limits{ReadHeaderTimeout: 300 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 512)
	for {
		// Dribble a header line now and then; the server must still cut the connection.
		_, _ = io.WriteString(c, "X-A: b\r\n")
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := c.Read(buf)
		if err == nil || !isTimeout(err) {
			break // closed (EOF or reset), or an error response before the close
		}
		if time.Since(start) > 5*time.Second {
			t.Fatal("slowloris connection still open after 5s; ReadHeaderTimeout is 300ms")
		}
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("cut after %v, want about 300ms", d)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

func TestCapHoldsConnections(t *testing.T) {
	addr := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "ok") }),
		Limits{MaxConns: 2, IdleTimeout: time.Minute})
	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	time.Sleep(100 * time.Millisecond)
	client := &http.Client{Timeout: 300 * time.Millisecond}
	if _, err := client.Get("http://" + addr + "/"); err == nil {
		t.Fatal("third connection served while two are held at a cap of 2")
	}
	held[0].Close()
	client.Timeout = 5 * time.Second
	resp, err := client.Get("http://" + addr + "/")
	if err != nil {
		t.Fatalf("after one held connection closed: %v", err)
	}
	resp.Body.Close()
}

func TestSessionCap(t *testing.T) {
	var open atomic.Int64
	var served atomic.Int64
	h := SessionCap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		if strings.Contains(string(b), "initialize") {
			open.Add(1)
		}
		served.Add(1)
	}), 2, func() int { return int(open.Load()) })
	addr := serve(t, h, Limits{})
	post := func(body, sid string) int {
		req, _ := http.NewRequest(http.MethodPost, "http://"+addr+"/mcp", strings.NewReader(body))
		if sid != "" {
			req.Header.Set(SessionHeader, sid)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if resp.StatusCode == http.StatusServiceUnavailable {
			var m struct {
				Error struct {
					Code    int    `json:"code"`
					Message string `json:"message"`
				} `json:"error"`
			}
			if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || m.Error.Code != ErrCodeTooManySessions ||
				!strings.Contains(m.Error.Message, "too many MCP sessions") {
				t.Fatalf("503 body: %+v, %v", m, err)
			}
		}
		return resp.StatusCode
	}
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`
	for i := range 2 {
		if c := post(init, ""); c != http.StatusOK {
			t.Fatalf("initialize %d: status %d", i+1, c)
		}
	}
	if c := post(init, ""); c != http.StatusServiceUnavailable {
		t.Fatalf("initialize past the cap: status %d, want 503", c)
	}
	if c := post(`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`, "s1"); c != http.StatusOK {
		t.Fatalf("request of an open session at the cap: status %d", c)
	}
	if c := post(`{"jsonrpc":"2.0","id":3,"method":"ping"}`, ""); c != http.StatusOK {
		t.Fatalf("sessionless non-initialize at the cap: status %d", c)
	}
	open.Add(-1) // a session closed
	if c := post(init, ""); c != http.StatusOK {
		t.Fatalf("initialize after a session closed: status %d", c)
	}
	if served.Load() != 5 {
		t.Fatalf("handler served %d requests, want 5", served.Load())
	}
}

// TestSessionCapCountsAnAnsweredOpeningOnce: an initialize whose answer the client has, while
// its handler has not returned yet, counts once (as the open session it made), so the next
// initialize up to the cap is let in. Counted twice, it was refused short of the cap.
func TestSessionCapCountsAnAnsweredOpeningOnce(t *testing.T) {
	var open atomic.Int64
	release := make(chan struct{})
	h := SessionCap(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		open.Add(1)
		w.WriteHeader(http.StatusOK)
		http.NewResponseController(w).Flush()
		<-release // the handler's own end comes after the client has its answer
	}), 2, func() int { return int(open.Load()) })
	addr := serve(t, h, Limits{})
	defer close(release)
	init := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}`
	for i := range 2 {
		resp, err := http.Post("http://"+addr+"/mcp", "application/json", strings.NewReader(init))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close() // the headers are here; the handler still runs
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("initialize %d of a cap of 2, the one before answered: status %d", i+1, resp.StatusCode)
		}
	}
}
