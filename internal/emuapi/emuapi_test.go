package emuapi

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/emuvm"
)

// machine is a VM whose ports are one HTTP server's; Remove counts.
type machine struct {
	addr    string
	removed atomic.Int32
}

func (m *machine) Run(context.Context, string, io.Reader) (agentenv.ExecResult, error) {
	return agentenv.ExecResult{}, nil
}
func (m *machine) Addr(int) string { return m.addr }
func (m *machine) Remove(context.Context) error {
	m.removed.Add(1)
	return nil
}

type backend struct{ m *machine }

func (b backend) StartVM(context.Context, string, map[string]string) (emuvm.Machine, error) {
	return b.m, nil
}

func TestBaseChecksCountsAndProxies(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "vm saw "+r.URL.Path)
	}))
	defer up.Close()
	m := &machine{addr: up.Listener.Addr().String()}

	b := New(Header("X-Key", "k"), func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "who", http.StatusUnauthorized)
	})
	b.Handle("POST /things", "create", func(w http.ResponseWriter, r *http.Request) {
		vm, err := b.StartVM(r, backend{m}, "vm-1", nil)
		if err != nil {
			t.Error(err)
		}
		b.SetVM("s1", vm)
		WriteJSON(w, http.StatusCreated, map[string]string{"id": "s1"})
	})
	b.Open("/port/{id}/{port}/{rest...}", func(w http.ResponseWriter, r *http.Request) {
		vm, ok := b.VM(r.PathValue("id"))
		if !ok {
			http.Error(w, "no vm", http.StatusNotFound)
			return
		}
		Proxy(w, r, vm, 80, func(w http.ResponseWriter, msg string) { http.Error(w, msg, http.StatusBadGateway) })
	})
	b.Serve()

	post := func(key string) int {
		req, _ := http.NewRequest(http.MethodPost, b.URL()+"/things", nil)
		req.Header.Set("X-Key", key)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post("wrong"); got != http.StatusUnauthorized {
		t.Fatalf("wrong key: %d, want 401", got)
	}
	if got := post("k"); got != http.StatusCreated {
		t.Fatalf("right key: %d, want 201", got)
	}
	if n := b.Calls("create"); n != 2 {
		t.Fatalf("Calls(create) = %d, want 2 (refused ones count)", n)
	}
	resp, err := http.Get(b.URL() + "/port/s1/80/a/b")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "vm saw /a/b" {
		t.Fatalf("proxied answer %q, want the VM's with the prefix stripped", body)
	}
	if b.DirectAddr("s1", 80) != m.addr || b.DirectAddr("nope", 80) != "" {
		t.Fatal("DirectAddr does not follow the recorded VM")
	}

	b.RemoveVMLater("s1")
	b.RemoveVMLater("s1") // a second end of the same sandbox removes nothing more
	ended := false
	b.Close(func() { ended = true })
	select {
	case <-b.Closed():
	default:
		t.Fatal("Closed not closed after Close")
	}
	if !ended || m.removed.Load() < 1 || m.removed.Load() > 2 {
		t.Fatalf("after Close: end called %v, VM removed %d times", ended, m.removed.Load())
	}
	if _, ok := b.VM("s1"); ok || len(b.VMErrors()) != 0 {
		t.Fatalf("VM still recorded or removal errors %v", b.VMErrors())
	}
}

func TestProxyAnswersAClosedPort(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/x", nil)
	Proxy(rec, req, &machine{addr: addr}, 8080, func(w http.ResponseWriter, msg string) { http.Error(w, msg, http.StatusBadGateway) })
	if rec.Code != http.StatusBadGateway || !strings.Contains(rec.Body.String(), "port 8080 of the sandbox is not open") {
		t.Fatalf("closed port: %d %q", rec.Code, rec.Body.String())
	}
}

func TestWhileAliveEndsWithTheSandbox(t *testing.T) {
	var alive atomic.Bool
	alive.Store(true)
	ctx, cancel := WhileAlive(context.Background(), nil, alive.Load)
	defer cancel()
	alive.Store(false)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("context not ended 5 s after the sandbox")
	}
	stop := make(chan struct{})
	ctx2, cancel2 := WhileAlive(context.Background(), stop, func() bool { return true })
	defer cancel2()
	close(stop)
	select {
	case <-ctx2.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("context not ended 5 s after stop")
	}
	if !errors.Is(ctx2.Err(), context.Canceled) {
		t.Fatalf("ctx2.Err() = %v", ctx2.Err())
	}
}

func TestRunningAndRandHex(t *testing.T) {
	type sb struct{ up bool }
	m := map[string]*sb{"b": {true}, "a": {true}, "c": {false}}
	if got := Running(m, func(s *sb) bool { return s.up }); strings.Join(got, ",") != "a,b" {
		t.Fatalf("Running = %v, want a,b", got)
	}
	for _, n := range []int{1, 10, 15, 20} {
		if h := RandHex(n); len(h) != n || strings.Trim(h, "0123456789abcdef") != "" {
			t.Errorf("RandHex(%d) = %q", n, h)
		}
	}
}

func TestServeOnAUnixSocket(t *testing.T) {
	sock := t.TempDir() + "/api.sock"
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	b := New(func(*http.Request) bool { return true }, nil)
	b.Handle("GET /ping", "ping", func(w http.ResponseWriter, _ *http.Request) { w.Write([]byte("pong")) })
	b.ServeOn(l)
	defer b.Close(func() {})
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}}
	resp, err := hc.Get("http://unix/ping")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(body) != "pong" || b.Calls("ping") != 1 {
		t.Errorf("GET /ping over the socket = %q, %d calls; want pong, 1", body, b.Calls("ping"))
	}
}
