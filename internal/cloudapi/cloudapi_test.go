package cloudapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/apierr"
	"github.com/agentenv/agentenv/provider/fake"
)

func TestClientSendsTheKeyAndDecodesAnswers(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer k" {
			http.Error(w, "no key", http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/echo":
			if r.Header.Get("Content-Type") != "application/json" {
				http.Error(w, "want json", http.StatusBadRequest)
				return
			}
			w.Header().Set("X-Next-Token", "t2")
			io.Copy(w, r.Body)
		case "/empty":
			w.WriteHeader(http.StatusNoContent)
		case "/json-error":
			w.WriteHeader(http.StatusConflict)
			io.WriteString(w, `{"code": 409, "message": "taken"}`)
		default:
			http.Error(w, "nothing here", http.StatusNotFound)
		}
	}))
	defer srv.Close()
	c := &Client{Name: "acme", Key: "k", KeyHint: "set acme.key", Auth: Bearer, HTTP: srv.Client()}
	ctx := context.Background()

	var out struct{ A int }
	h, err := c.JSON(ctx, http.MethodPost, srv.URL+"/echo", map[string]int{"a": 7}, &out)
	if err != nil || out.A != 7 || h.Get("X-Next-Token") != "t2" {
		t.Fatalf("JSON echo = %+v, %v, header %v; want A 7 and the next token", out, err, h)
	}
	if _, err := c.JSON(ctx, http.MethodDelete, srv.URL+"/empty", nil, &out); err != nil {
		t.Fatalf("JSON of an empty answer: %v", err)
	}
	_, err = c.JSON(ctx, http.MethodGet, srv.URL+"/json-error", nil, nil)
	if apierr.Status(err) != 409 || !strings.Contains(err.Error(), "taken") || !errors.Is(apierr.Kind(err), agentenv.ErrConflict) {
		t.Fatalf("JSON of a 409 = %v, want the API's message and ErrConflict", err)
	}
	_, err = c.Do(ctx, http.MethodGet, srv.URL+"/gone", nil, "")
	if apierr.Status(err) != 404 || !strings.Contains(err.Error(), "nothing here") {
		t.Fatalf("Do of a 404 = %v, want the plain-text message", err)
	}
	c.Key = ""
	_, err = c.JSON(ctx, http.MethodGet, srv.URL+"/echo", nil, nil)
	if !errors.Is(err, agentenv.ErrInvalid) || !errors.Is(err, agentenv.ErrUnavailable) || !strings.Contains(err.Error(), "acme: no API key: set acme.key") {
		t.Fatalf("JSON with no key = %v, want ErrInvalid and ErrUnavailable naming the setting", err)
	}
	if got := Header("X-API-Key"); got == nil {
		t.Fatal("Header returned nil")
	}
}

// TestClientWithoutAuth: an API with no authentication (a local server) needs no key and gets
// no Authorization header.
func TestClientWithoutAuth(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "" {
			http.Error(w, "a key was sent", http.StatusBadRequest)
			return
		}
		w.Write([]byte(`{"A": 1}`))
	}))
	defer srv.Close()
	c := &Client{Name: "local", HTTP: srv.Client()}
	var out struct{ A int }
	if _, err := c.JSON(context.Background(), http.MethodGet, srv.URL, nil, &out); err != nil || out.A != 1 {
		t.Errorf("JSON without Auth = %+v, %v; want the answer, no key asked for or sent", out, err)
	}
}

func TestMessage(t *testing.T) {
	for body, want := range map[string]string{
		`{"code": 404, "message": "not found"}`:        "not found",
		`{"error": "no such process", "code": "E_NP"}`: "no such process (E_NP)",
		`{"error": "no such process"}`:                 "no such process",
		"  plain text\n":                               "plain text",
		strings.Repeat("x", 400):                       strings.Repeat("x", 300),
	} {
		if got := Message([]byte(body)); got != want {
			t.Errorf("Message(%.40q) = %q, want %q", body, got, want)
		}
	}
}

func TestBackstopSeconds(t *testing.T) {
	b := Backstop{Default: time.Hour, Margin: 10 * time.Minute, Max: 2 * time.Hour}
	for _, c := range []struct {
		spec agentenv.SandboxSpec
		want int64
	}{
		{agentenv.SandboxSpec{Timeout: 90 * time.Second}, 91},
		{agentenv.SandboxSpec{}, 3601},
		{agentenv.SandboxSpec{Timeout: 5 * time.Hour}, 7200},
		{agentenv.SandboxSpec{Expires: time.Now().Add(20 * time.Minute)}, 30*60 + 1},
		{agentenv.SandboxSpec{Timeout: time.Millisecond}, 1},
	} {
		got := b.Seconds(c.spec)
		if d := got - c.want; d < -1 || d > 1 { // Expires is read against the clock
			t.Errorf("Seconds(%+v) = %d, want %d", c.spec, got, c.want)
		}
	}
}

func TestGateCapsCreatesInFlight(t *testing.T) {
	g := NewGate(1000, 1)
	leave, err := g.Enter(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := g.Enter(ctx); !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "create slot") {
		t.Fatalf("Enter with the one slot taken = %v, want the slot wait cut by the deadline", err)
	}
	leave()
	leave2, err := g.Enter(context.Background())
	if err != nil {
		t.Fatalf("Enter after leave: %v", err)
	}
	leave2()
	slow := NewGate(0.001, 1)
	if l, err := slow.Enter(context.Background()); err == nil { // the burst of 1
		l()
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel2()
	if _, err := slow.Enter(ctx2); err == nil || !strings.Contains(err.Error(), "rate limit") {
		t.Fatalf("Enter past the rate = %v, want a rate limit error", err)
	}
}

func TestPages(t *testing.T) {
	var seen []string
	err := Pages(func(token string) (string, error) {
		seen = append(seen, token)
		if len(seen) == 3 {
			return "", nil
		}
		return "t" + string(rune('0'+len(seen))), nil
	})
	if err != nil || strings.Join(seen, ",") != ",t1,t2" {
		t.Fatalf("Pages saw %q, %v; want the three tokens", seen, err)
	}
	n := 0
	err = Pages(func(string) (string, error) { n++; return "again", nil })
	if !errors.Is(err, agentenv.ErrUnavailable) || n != MaxPages {
		t.Fatalf("endless Pages = %v after %d pages, want ErrUnavailable after %d", err, n, MaxPages)
	}
	boom := errors.New("boom")
	if err := Pages(func(string) (string, error) { return "x", boom }); err != boom {
		t.Fatalf("Pages = %v, want the page's error", err)
	}
}

func TestEnvelopes(t *testing.T) {
	var b bytes.Buffer
	if err := WriteEnvelope(&b, []byte(`{"a":1}`)); err != nil {
		t.Fatal(err)
	}
	b.Write([]byte{FlagEndStream, 0, 0, 0, 47})
	b.WriteString(`{"error":{"code":"not_found","message":"gone"}}`)
	r := bufio.NewReader(&b)
	flags, msg, err := ReadEnvelope(r)
	if err != nil || flags != 0 || string(msg) != `{"a":1}` {
		t.Fatalf("ReadEnvelope = %d %q %v", flags, msg, err)
	}
	flags, msg, err = ReadEnvelope(r)
	if err != nil || flags&FlagEndStream == 0 {
		t.Fatalf("ReadEnvelope of the end = %d %q %v", flags, msg, err)
	}
	if err := EndStream(msg); err == nil || err.Error() != "not_found: gone" {
		t.Fatalf("EndStream = %v, want not_found: gone", err)
	}
	if err := EndStream([]byte(`{}`)); err != nil {
		t.Fatalf("EndStream of a clean end = %v", err)
	}
	if _, _, err := ReadEnvelope(bufio.NewReader(bytes.NewReader([]byte{0, 0xff, 0, 0, 0}))); err == nil {
		t.Fatal("ReadEnvelope of a 4 GiB message: no error")
	}
}

func TestReleaserTerminatesByIDAndByRecord(t *testing.T) {
	ctx := context.Background()
	p := fake.New("fake")
	rel := Releaser{Provider: p, Log: slog.New(slog.DiscardHandler), Timeout: time.Second}
	mk := func(name string) agentenv.Sandbox {
		sb, err := p.Create(ctx, agentenv.SandboxSpec{Name: name, Image: "img", Labels: map[string]string{agentenv.LabelRecord: name}})
		if err != nil {
			t.Fatal(err)
		}
		return sb
	}
	a, _ := mk("rec-a"), mk("rec-b")
	cctx, cancel := context.WithCancel(ctx)
	cancel() // a cancelled caller still gets its sandbox released
	rel.Release(cctx, a.ID, "rec-a")
	rel.Record(cctx, "rec-b")
	if left, err := p.List(ctx, nil); err != nil || len(left) != 0 {
		t.Fatalf("left after Release and Record: %v, %v", left, err)
	}
}
