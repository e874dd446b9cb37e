package envcheck_test

import (
	"context"
	"encoding/json"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentenv/agentenv/envcheck"
	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/envsdk"
	"github.com/agentenv/agentenv/gateway"
)

// memEnv is an envsdk server keeping its data in memory.
func memEnv(t *testing.T, seed ...envproto.Part) (*httptest.Server, func() []envproto.Part) {
	t.Helper()
	var mu sync.Mutex
	data := slices.Clone(seed)
	s := envsdk.New(envsdk.Options{Name: "mem"})
	envsdk.AddTool(s, "count", "Count the parts.", func(ctx context.Context, _ struct{}) (struct{ N int }, error) {
		mu.Lock()
		defer mu.Unlock()
		return struct{ N int }{len(data)}, nil
	})
	s.HandleReset(func(context.Context) error { mu.Lock(); data = nil; mu.Unlock(); return nil })
	s.HandleAdd(func(_ context.Context, parts []envproto.Part) error {
		mu.Lock()
		data = append(data, parts...)
		mu.Unlock()
		return nil
	})
	s.HandleGet(func(context.Context, envproto.GetParams) ([]envproto.Part, error) {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(data), nil
	})
	ts := httptest.NewServer(s.Handler())
	t.Cleanup(ts.Close)
	return ts, func() []envproto.Part { mu.Lock(); defer mu.Unlock(); return slices.Clone(data) }
}

func statuses(rep envcheck.Report) map[string]string {
	m := map[string]string{}
	for _, c := range rep.Checks {
		m[c.Name] = c.Status
	}
	return m
}

func TestConformingServer(t *testing.T) {
	seed := envproto.Part{Kind: "data", Data: json.RawMessage(`{"k":"v"}`)}
	ts, data := memEnv(t, seed)
	rep, err := envcheck.Run(t.Context(), ts.URL+"/mcp", envcheck.Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"card": "pass", "card.shape": "pass", "mcp": "pass", "card.tools": "pass", "data.errors": "pass",
		"data.get": "pass", "data.reset": "pass", "data.add": "pass", "data.roundtrip": "pass", "data.restore": "pass"}
	if got := statuses(rep); !maps.Equal(got, want) || !rep.OK {
		t.Errorf("checks = %v (ok %v), want %v\n%+v", got, rep.OK, want, rep.Checks)
	}
	if got := data(); len(got) != 1 || string(got[0].Data) != `{"k":"v"}` {
		t.Errorf("data after validate = %+v, want the seed loaded back", got)
	}
}

func TestReadOnly(t *testing.T) {
	ts, data := memEnv(t, envproto.Part{Kind: "text", Text: "keep"})
	rep, _ := envcheck.Run(t.Context(), ts.URL, envcheck.Options{ReadOnly: true})
	got := statuses(rep)
	if !rep.OK || got["data.reset"] != "skip" || got["data.add"] != "skip" || got["data.get"] != "pass" {
		t.Errorf("checks = %v", got)
	}
	if len(data()) != 1 {
		t.Errorf("read-only changed the data: %+v", data())
	}
}

// cardServer serves card as the card, and an envsdk server's /mcp and data plane.
func cardServer(t *testing.T, card string) *httptest.Server {
	t.Helper()
	inner, _ := memEnv(t)
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+envproto.CardPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(card))
	})
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, inner.URL+r.URL.Path, http.StatusTemporaryRedirect)
	})
	ts := httptest.NewServer(mux)
	t.Cleanup(ts.Close)
	return ts
}

func TestBrokenCards(t *testing.T) {
	for _, tt := range []struct {
		name, card, failed, detail string
	}{
		{"no name", `{"protocolVersion":"1.0","capabilities":{}}`, "card", "name is missing"},
		{"not json", `{"name":`, "card", "not a JSON object"},
		{"capabilities not an object", `{"name":"x","capabilities":[]}`, "card", "decode"},
		{"unknown operation", `{"name":"x","capabilities":{"operations":["data/drop"]}}`, "card", `unknown method "data/drop"`},
		{"tool not served", `{"name":"x","protocolVersion":"1.0","url":"/agentenv","additionalInterfaces":[{"url":"/mcp","transport":"mcp"}],
			"capabilities":{"tools":[{"name":"count"},{"name":"ghost"}],"operations":["data/get"]}}`, "card.tools", "ghost"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ts := cardServer(t, tt.card)
			rep, _ := envcheck.Run(t.Context(), ts.URL, envcheck.Options{ReadOnly: true})
			if rep.OK || !slices.Contains(rep.Failed(), tt.failed) {
				t.Fatalf("failed = %v, want %s among them\n%+v", rep.Failed(), tt.failed, rep.Checks)
			}
			for _, c := range rep.Checks {
				if c.Name == tt.failed && !strings.Contains(c.Detail, tt.detail) {
					t.Errorf("%s detail %q, want it to say %q", c.Name, c.Detail, tt.detail)
				}
			}
			var text strings.Builder
			_ = rep.Text(&text)
			if !strings.Contains(text.String(), "does not conform: ") || !strings.Contains(text.String(), "FAIL  "+tt.failed) {
				t.Errorf("text report:\n%s", text.String())
			}
		})
	}
}

func TestLegacyCardWarns(t *testing.T) {
	ts := cardServer(t, `{"name":"old","protocol_version":"2026-11-01","tools":[{"name":"count"}],
		"endpoints":{"mcp":"/mcp","data":"/agentenv"},"extensions":{"data_plane":{"methods":["data/get"]}}}`)
	rep, _ := envcheck.Run(t.Context(), ts.URL, envcheck.Options{ReadOnly: true})
	got := statuses(rep)
	if !rep.OK || got["card.shape"] != "warn" || got["data.get"] != "pass" {
		t.Errorf("checks = %v\n%+v", got, rep.Checks)
	}
}

func TestNoCard(t *testing.T) {
	ts := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(ts.Close)
	rep, _ := envcheck.Run(t.Context(), ts.URL, envcheck.Options{})
	if rep.OK || !slices.Equal(rep.Failed(), []string{"card", "mcp"}) {
		t.Errorf("failed = %v\n%+v", rep.Failed(), rep.Checks)
	}
}

func TestBaseURL(t *testing.T) {
	for in, want := range map[string]string{
		"http://h:1":     "http://h:1",
		"http://h:1/":    "http://h:1",
		"http://h:1/mcp": "http://h:1",
		"http://h:1/p/.well-known/agent-env.json": "http://h:1/p",
	} {
		if got, err := envcheck.BaseURL(in); err != nil || got != want {
			t.Errorf("BaseURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := envcheck.BaseURL("h:1"); err == nil {
		t.Error("BaseURL(h:1): want an error")
	}
}

// TestGatewayWithTwoDataPlanes: a gateway fronting two servers with a data plane has none of
// its own; each is checked at its child's url on the gateway.
func TestGatewayWithTwoDataPlanes(t *testing.T) {
	a, dataA := memEnv(t, envproto.Part{Kind: "text", Text: "a's"})
	b, _ := memEnv(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	g, err := gateway.New(ctx, gateway.Config{Name: "two", Token: "tok", ConnectTimeout: 10 * time.Second, ToolNames: "prefix",
		Servers: []gateway.Backend{{Name: "a", URL: a.URL + "/mcp"}, {Name: "b", URL: b.URL + "/mcp"}}})
	if err != nil {
		t.Fatal(err)
	}
	gw := httptest.NewServer(g.Handler())
	t.Cleanup(func() { gw.Close(); _ = g.Close() })

	rep, _ := envcheck.Run(t.Context(), gw.URL+"/mcp", envcheck.Options{Token: "tok"})
	got := statuses(rep)
	for _, name := range []string{"card", "mcp", "card.tools", "a/data.roundtrip", "a/data.restore", "b/data.roundtrip", "b/data.restore"} {
		if got[name] != envcheck.Pass {
			t.Errorf("%s = %q, want pass\n%+v", name, got[name], rep.Checks)
		}
	}
	if !rep.OK {
		t.Errorf("failed %v", rep.Failed())
	}
	if d := dataA(); len(d) != 1 || d[0].Text != "a's" {
		t.Errorf("a's data after validate = %+v, want it loaded back", d)
	}
}
