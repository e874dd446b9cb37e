package egressproxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPolicySwitch: a proxy with a policy file applies each policy WritePolicy writes before
// WritePolicy returns: the tunnels and the forwarded requests to a host it no longer allows are
// closed, and new requests are decided by it (a list, any host, none). A policy with a bad
// entry is refused before it is written; a file that cannot be read lets nothing through.
func TestPolicySwitch(t *testing.T) {
	quiet, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer quiet.Close()
	go func() { // a host that accepts and never speaks
		for {
			c, err := quiet.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	_, port, _ := net.SplitHostPort(quiet.Addr().String())
	streaming := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("first\n"))
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the rest never comes
	}))
	defer streaming.Close()
	_, sport, _ := net.SplitHostPort(streaming.Listener.Addr().String())

	file := filepath.Join(t.TempDir(), "policy.json")
	r := newRig(t, Config{Allow: []string{"a.test"}, PolicyFile: file}, map[string]string{"a.test": "127.0.0.1", "b.test": "127.0.0.1"})
	status := func(target string) int {
		t.Helper()
		c, _, code, _ := r.connect(t, target)
		c.Close()
		return code
	}
	write := func(pol Policy) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if err := WritePolicy(ctx, file, pol); err != nil {
			t.Fatalf("WritePolicy(%+v): %v", pol, err)
		}
	}

	tunnel, br, code, _ := r.connect(t, "a.test:"+port)
	if code != http.StatusOK || status("b.test:"+port) != http.StatusForbidden {
		t.Fatalf("before any policy: CONNECT a.test %d, b.test %d; want 200 and 403", code, status("b.test:"+port))
	}
	res, err := r.client(streaming).Get("http://a.test:" + sport + "/")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	first := make([]byte, len("first\n"))
	if _, err := io.ReadFull(res.Body, first); err != nil {
		t.Fatalf("the forwarded request's first line: %v", err)
	}

	write(Policy{Allow: []string{"b.test"}})
	_ = tunnel.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := br.ReadByte(); err != io.EOF {
		t.Errorf("read from a tunnel to a host the new policy does not allow: %v, want EOF", err)
	}
	done := make(chan error, 1)
	go func() { _, err := io.ReadAll(res.Body); done <- err }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Error("a forwarded request to a host the new policy does not allow still runs 5 s after it")
	}
	if a, b := status("a.test:"+port), status("b.test:"+port); a != http.StatusForbidden || b != http.StatusOK {
		t.Errorf("after the policy [b.test]: CONNECT a.test %d, b.test %d; want 403 and 200", a, b)
	}

	write(Policy{Any: true})
	if a, ip := status("a.test:"+port), status("127.0.0.1:"+port); a != http.StatusOK || ip != http.StatusOK {
		t.Errorf("with any host: CONNECT a.test %d, 127.0.0.1 %d; want 200", a, ip)
	}
	write(Policy{})
	if a, ip := status("a.test:"+port), status("127.0.0.1:"+port); a != http.StatusForbidden || ip != http.StatusForbidden {
		t.Errorf("with no host: CONNECT a.test %d, 127.0.0.1 %d; want 403", a, ip)
	}

	if err := WritePolicy(t.Context(), file, Policy{Allow: []string{"ok.test", "https://bad.test"}}); err == nil || !strings.Contains(err.Error(), "allow[1]") {
		t.Errorf("WritePolicy with a URL: %v, want an error naming allow[1]", err)
	}
	write(Policy{Allow: []string{"a.test"}})
	if err := writeAtomic(file, []byte("{not json")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(PolicyPoll) {
		if ack, _ := os.ReadFile(ackFile(file)); strings.Contains(string(ack), " error: ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("an unreadable policy was not refused within a minute")
		}
	}
	if a := status("a.test:" + port); a != http.StatusForbidden {
		t.Errorf("after an unreadable policy: CONNECT a.test %d, want 403", a)
	}
}
