package envsdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/envsdk"
)

func TestWithExtensions(t *testing.T) {
	s := envsdk.New(envsdk.Options{Name: "ext"})
	level := "info"
	h, err := envsdk.WithExtensions(s, envsdk.Extension{
		URI: "urn:test:config/v1", Name: "set_level", Request: map[string]any{"type": "object"},
		Handle: func(_ context.Context, body json.RawMessage) (any, error) {
			var in struct{ Level string }
			if err := json.Unmarshal(body, &in); err != nil || in.Level == "" {
				return nil, errors.New("want {level}")
			}
			level = in.Level
			return map[string]string{"level": level}, nil
		},
	}, envsdk.Extension{
		URI: "urn:test:config/v1", Name: "get_level", HTTPMethod: http.MethodGet,
		Handle: func(_ context.Context, q json.RawMessage) (any, error) {
			return map[string]string{"level": level, "query": string(q)}, nil
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	get := func(method, path, body string) (int, string) {
		t.Helper()
		req, _ := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}

	_, card := get("GET", envproto.CardPath, "")
	var c struct {
		Name         string
		Capabilities struct {
			Extensions []struct {
				URI    string
				Params struct {
					Endpoint string
					Methods  map[string]struct{ Method, Endpoint string }
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(card), &c); err != nil || c.Name != "ext" || len(c.Capabilities.Extensions) != 1 {
		t.Fatalf("card %s: %v", card, err)
	}
	ext := c.Capabilities.Extensions[0]
	if ext.URI != "urn:test:config/v1" || ext.Params.Methods["get_level"].Method != "GET" || ext.Params.Methods["set_level"].Endpoint != "/agentenv/ext/set_level" {
		t.Errorf("advertised extension: %+v", ext)
	}
	if code, body := get("POST", "/agentenv/ext/set_level", `{"level":"debug"}`); code != 200 || !strings.Contains(body, "debug") {
		t.Errorf("set_level: %d %s", code, body)
	}
	if code, body := get("POST", "/agentenv/ext/set_level", `{}`); code != 400 || !strings.Contains(body, "want {level}") {
		t.Errorf("set_level without a level: %d %s", code, body)
	}
	if code, body := get("GET", "/agentenv/ext/get_level?x=1", ""); code != 200 || !strings.Contains(body, `"level":"debug"`) || !strings.Contains(body, `x`) {
		t.Errorf("get_level: %d %s", code, body)
	}
	if code, _ := get("POST", "/agentenv/ext/get_level", ""); code != http.StatusMethodNotAllowed {
		t.Errorf("POST to a GET method: %d", code)
	}
	if code, _ := get("POST", "/agentenv/ext/nope", ""); code != http.StatusNotFound {
		t.Errorf("unknown method: %d", code)
	}
	if code, _ := get("GET", envsdk.HealthPath, ""); code != 200 {
		t.Errorf("the server's own routes are still served: healthz %d", code)
	}
	if _, err := envsdk.WithExtensions(s, envsdk.Extension{URI: "u", Name: "a/b", Handle: func(context.Context, json.RawMessage) (any, error) { return nil, nil }}); err == nil {
		t.Error("a name with a slash was accepted")
	}
}
