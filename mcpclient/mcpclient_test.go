package mcpclient_test

import (
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/mcpclient"
)

func TestBearerSetsTheTokenOnlyWhenThereIsOne(t *testing.T) {
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = append(got, r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	for _, token := range []string{"tok", ""} {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		resp, err := mcpclient.HTTPClient(nil, token).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if req.Header.Get("Authorization") != "" {
			t.Error("the caller's request was changed")
		}
	}
	if len(got) != 2 || got[0] != "Bearer tok" || got[1] != "" {
		t.Errorf("Authorization headers = %q, want [\"Bearer tok\" \"\"]", got)
	}
}

func TestConnectSendsTheToken(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "s", Version: "v1"}, nil)
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer secret" {
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	defer srv.Close()
	if _, err := (mcpclient.Client{}).Connect(t.Context(), srv.URL, "wrong"); err == nil {
		t.Error("Connect with a wrong token succeeded")
	}
	cs, err := (mcpclient.Client{Name: "test", NoStandaloneSSE: true}).Connect(t.Context(), srv.URL, "secret")
	if err != nil {
		t.Fatalf("Connect: %v", err)
	}
	cs.Close()
}

func TestHeadersSetsEveryHeader(t *testing.T) {
	var got http.Header
	rt := mcpclient.Headers(map[string]string{"Authorization": "Bearer t1", "X-Role": "agent"}, roundTripFunc(func(r *http.Request) (*http.Response, error) {
		got = r.Header
		return &http.Response{StatusCode: 200, Body: http.NoBody}, nil
	}))
	req, _ := http.NewRequest(http.MethodGet, "http://x", nil)
	if _, err := rt.RoundTrip(req); err != nil {
		t.Fatal(err)
	}
	if got.Get("Authorization") != "Bearer t1" || got.Get("X-Role") != "agent" {
		t.Errorf("headers sent = %v", got)
	}
	if req.Header.Get("Authorization") != "" {
		t.Errorf("the caller's request was changed: %v", req.Header)
	}
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
