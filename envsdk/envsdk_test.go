package envsdk_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/envsdk"
)

type echoIn struct {
	Text  string `json:"text" jsonschema:"what to echo"`
	Times int    `json:"times,omitempty" jsonschema:"how many times; default 1"`
}

type echoOut struct {
	Echo string `json:"echo"`
}

// testServer returns a server with an echo tool, a failing tool and all three data plane
// handlers over an in-memory list; resets counts data/reset calls.
func testServer(tb testing.TB) (s *envsdk.Server, resets *atomic.Int64) {
	tb.Helper()
	s = envsdk.New(envsdk.Options{Name: "test", Description: "a test env"})
	envsdk.AddTool(s, "echo", "Echo text.", func(ctx context.Context, in echoIn) (echoOut, error) {
		n := max(in.Times, 1)
		return echoOut{Echo: strings.Repeat(in.Text, n)}, nil
	})
	envsdk.AddTool(s, "fail", "Always fails.", func(ctx context.Context, in struct{}) (echoOut, error) {
		return echoOut{}, errors.New("boom")
	})
	resets = new(atomic.Int64)
	var stored []envproto.Part
	s.HandleReset(func(ctx context.Context) error {
		resets.Add(1)
		stored = nil
		return nil
	})
	s.HandleAdd(func(ctx context.Context, parts []envproto.Part) error {
		for _, p := range parts {
			switch p.Text {
			case "explode":
				return errors.New("disk full")
			case "refuse":
				return &envproto.Error{Code: envproto.CodeInvalidParams, Message: "refused"}
			case "panic":
				panic("handler panic")
			}
		}
		stored = append(stored, parts...)
		return nil
	})
	s.HandleGet(func(ctx context.Context, p envproto.GetParams) ([]envproto.Part, error) {
		return stored, nil
	})
	return s, resets
}

func TestServer_Card(t *testing.T) {
	s, _ := testServer(t)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()

	res, err := http.Get(ts.URL + envproto.CardPath)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET card: status %d", res.StatusCode)
	}
	var card envproto.Card
	if err := json.NewDecoder(res.Body).Decode(&card); err != nil {
		t.Fatalf("decode card: %v", err)
	}
	if card.Name != "test" || card.Description != "a test env" || card.ProtocolVersion != envproto.Version {
		t.Errorf("card header = %q %q %q, want test, a test env, %s", card.Name, card.Description, card.ProtocolVersion, envproto.Version)
	}
	var names []string
	for _, tool := range card.Capabilities.Tools {
		names = append(names, tool.Name)
	}
	if !slices.Equal(names, []string{"echo", "fail"}) {
		t.Errorf("card tools = %v, want [echo fail]", names)
	}
	var schema struct {
		Type       string                     `json:"type"`
		Properties map[string]json.RawMessage `json:"properties"`
		Required   []string                   `json:"required"`
	}
	if err := json.Unmarshal(card.Capabilities.Tools[0].InputSchema, &schema); err != nil {
		t.Fatalf("echo input schema %s: %v", card.Capabilities.Tools[0].InputSchema, err)
	}
	if schema.Type != "object" || schema.Properties["text"] == nil || !slices.Equal(schema.Required, []string{"text"}) {
		t.Errorf("echo input schema = %s, want object with text required", card.Capabilities.Tools[0].InputSchema)
	}
	if want := []string{envproto.MethodReset, envproto.MethodAdd, envproto.MethodGet}; !slices.Equal(card.Capabilities.Operations, want) {
		t.Errorf("operations = %v, want %v", card.Capabilities.Operations, want)
	}
	if card.URL != envproto.DataPath || card.MCPURL() != envproto.MCPPath || card.ProtocolVersion != envproto.Version || card.PreferredTransport != "JSONRPC" {
		t.Errorf("card url %q, mcp %q, version %q, transport %q", card.URL, card.MCPURL(), card.ProtocolVersion, card.PreferredTransport)
	}

	bare := envsdk.New(envsdk.Options{Name: "bare"}).Card()
	if bare.HasDataPlane() || bare.Capabilities.Operations == nil || bare.Capabilities.Tools == nil {
		t.Errorf("bare card: operations %v, tools %v; want an empty operations list (no data plane) and an empty tool list", bare.Capabilities.Operations, bare.Capabilities.Tools)
	}
	raw, err := json.Marshal(bare)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"operations":[]`) {
		t.Errorf("bare card %s: want operations [] on the wire (absent means all three)", raw)
	}
}

// post sends body to the data plane and returns the status and the decoded response.
func post(tb testing.TB, url, body string) (int, envproto.Response, string) {
	tb.Helper()
	res, err := http.Post(url+envproto.DataPath, "application/json", strings.NewReader(body))
	if err != nil {
		tb.Fatal(err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	if err != nil {
		tb.Fatal(err)
	}
	var resp envproto.Response
	if len(raw) > 0 {
		if err := json.Unmarshal(raw, &resp); err != nil {
			tb.Fatalf("decode response %q: %v", raw, err)
		}
	}
	return res.StatusCode, resp, string(raw)
}

func TestServer_DataPlaneErrors(t *testing.T) {
	s, _ := testServer(t)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	onlyReset := envsdk.New(envsdk.Options{Name: "r"})
	onlyReset.HandleReset(func(context.Context) error { return nil })
	ts2 := httptest.NewServer(onlyReset.Handler())
	defer ts2.Close()

	tests := []struct {
		name   string
		url    string
		body   string
		code   int    // 0 means success
		wantID string // the id the response must carry
	}{
		{"malformed JSON", ts.URL, `{"jsonrpc":"2.0","method":`, envproto.CodeParseError, "null"},
		{"empty body", ts.URL, ``, envproto.CodeParseError, "null"},
		{"batch", ts.URL, `[{"jsonrpc":"2.0","id":1,"method":"data/reset"}]`, envproto.CodeInvalidRequest, "null"},
		{"not an object", ts.URL, `"data/reset"`, envproto.CodeInvalidRequest, "null"},
		{"wrong version", ts.URL, `{"jsonrpc":"1.0","id":1,"method":"data/reset"}`, envproto.CodeInvalidRequest, "1"},
		{"no method", ts.URL, `{"jsonrpc":"2.0","id":1}`, envproto.CodeInvalidRequest, "1"},
		{"method not a string", ts.URL, `{"jsonrpc":"2.0","id":1,"method":7}`, envproto.CodeInvalidRequest, "1"},
		{"object id", ts.URL, `{"jsonrpc":"2.0","id":{},"method":"data/reset"}`, envproto.CodeInvalidRequest, "null"},
		{"scalar params", ts.URL, `{"jsonrpc":"2.0","id":1,"method":"data/add","params":"x"}`, envproto.CodeInvalidRequest, "1"},
		{"unknown method", ts.URL, `{"jsonrpc":"2.0","id":"a","method":"data/frobnicate"}`, envproto.CodeMethodNotFound, `"a"`},
		{"method without handler", ts2.URL, `{"jsonrpc":"2.0","id":2,"method":"data/get"}`, envproto.CodeMethodNotFound, "2"},
		{"add without parts", ts.URL, `{"jsonrpc":"2.0","id":3,"method":"data/add","params":{"parts":[]}}`, envproto.CodeInvalidParams, "3"},
		{"add no params", ts.URL, `{"jsonrpc":"2.0","id":3,"method":"data/add"}`, envproto.CodeInvalidParams, "3"},
		{"add array params", ts.URL, `{"jsonrpc":"2.0","id":3,"method":"data/add","params":[1]}`, envproto.CodeInvalidParams, "3"},
		{"add unknown kind", ts.URL, `{"jsonrpc":"2.0","id":3,"method":"data/add","params":{"parts":[{"kind":"video"}]}}`, envproto.CodeInvalidParams, "3"},
		{"add data part without data", ts.URL, `{"jsonrpc":"2.0","id":3,"method":"data/add","params":{"parts":[{"kind":"data"}]}}`, envproto.CodeInvalidParams, "3"},
		{"add bad base64", ts.URL, `{"jsonrpc":"2.0","id":3,"method":"data/add","params":{"parts":[{"kind":"file","file":{"name":"a","bytes":"!!"}}]}}`, envproto.CodeInvalidParams, "3"},
		{"handler refuses", ts.URL, `{"jsonrpc":"2.0","id":4,"method":"data/add","params":{"parts":[{"kind":"text","text":"refuse"}]}}`, envproto.CodeInvalidParams, "4"},
		{"handler error", ts.URL, `{"jsonrpc":"2.0","id":4,"method":"data/add","params":{"parts":[{"kind":"text","text":"explode"}]}}`, envproto.CodeServerError, "4"},
		{"handler panic", ts.URL, `{"jsonrpc":"2.0","id":4,"method":"data/add","params":{"parts":[{"kind":"text","text":"panic"}]}}`, envproto.CodeInternalError, "4"},
		{"get bad params", ts.URL, `{"jsonrpc":"2.0","id":5,"method":"data/get","params":{"query":}`, envproto.CodeParseError, "null"},
		{"reset", ts.URL, `{"jsonrpc":"2.0","id":6,"method":"data/reset"}`, 0, "6"},
		{"add", ts.URL, ` {"jsonrpc":"2.0","id":"x y","method":"data/add","params":{"parts":[{"kind":"text","text":"hi"}]}}`, 0, `"x y"`},
		{"null id", ts.URL, `{"jsonrpc":"2.0","id":null,"method":"data/get","params":null}`, 0, "null"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, resp, raw := post(t, tt.url, tt.body)
			if status != http.StatusOK {
				t.Fatalf("status = %d, want 200 (body %s)", status, raw)
			}
			if resp.JSONRPC != "2.0" || string(resp.ID) != tt.wantID {
				t.Errorf("response %s: want jsonrpc 2.0 and id %s", raw, tt.wantID)
			}
			switch {
			case tt.code == 0 && resp.Error != nil:
				t.Errorf("response %s: want success", raw)
			case tt.code == 0 && resp.Result == nil:
				t.Errorf("response %s: want a result", raw)
			case tt.code != 0 && (resp.Error == nil || resp.Error.Code != tt.code):
				t.Errorf("response %s: want error code %d", raw, tt.code)
			case tt.code != 0 && resp.Result != nil:
				t.Errorf("response %s: has both result and error", raw)
			}
		})
	}

	t.Run("handler error reason", func(t *testing.T) {
		_, resp, raw := post(t, ts.URL, `{"jsonrpc":"2.0","id":1,"method":"data/add","params":{"parts":[{"kind":"text","text":"explode"}]}}`)
		if resp.Error == nil || !strings.Contains(resp.Error.Message, "disk full") || !strings.Contains(string(resp.Error.Data), "add_failed") {
			t.Errorf("response %s: want the handler's error and reason add_failed", raw)
		}
	})
}

func TestServer_DataPlaneRoundTrip(t *testing.T) {
	s, resets := testServer(t)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()

	status, _, raw := post(t, ts.URL, `{"jsonrpc":"2.0","method":"data/reset"}`)
	if status != http.StatusNoContent || raw != "" || resets.Load() != 1 {
		t.Fatalf("notification: status %d body %q resets %d; want 204, no body, 1 reset", status, raw, resets.Load())
	}
	status, _, raw = post(t, ts.URL, `{"jsonrpc":"2.0","method":"data/nope"}`)
	if status != http.StatusNoContent || raw != "" {
		t.Errorf("unknown-method notification: status %d body %q; want 204 and no body", status, raw)
	}

	add := `{"jsonrpc":"2.0","id":1,"method":"data/add","params":{"parts":[` +
		`{"kind":"text","text":"hello"},{"kind":"data","data":{"k":"v"}},{"kind":"file","file":{"name":"f.txt","bytes":"aGk="}}]}}`
	if _, resp, raw := post(t, ts.URL, add); resp.Error != nil {
		t.Fatalf("add: %s", raw)
	}
	_, resp, raw := post(t, ts.URL, `{"jsonrpc":"2.0","id":2,"method":"data/get"}`)
	var got envproto.GetResult
	if err := json.Unmarshal(resp.Result, &got); err != nil {
		t.Fatalf("get %s: %v", raw, err)
	}
	if len(got.Parts) != 3 || got.Parts[0].Text != "hello" || string(got.Parts[1].Data) != `{"k":"v"}` || string(got.Parts[2].File.Bytes) != "hi" {
		t.Errorf("get = %s, want the three parts added", raw)
	}

	res, err := http.Get(ts.URL + envproto.DataPath)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("GET %s: status %d, want 405", envproto.DataPath, res.StatusCode)
	}
	res, err = http.Get(ts.URL + envsdk.HealthPath)
	if err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	if res.StatusCode != http.StatusOK {
		t.Errorf("GET %s: status %d, want 200", envsdk.HealthPath, res.StatusCode)
	}
}

// connect opens an MCP session to url over streamable HTTP.
func connect(tb testing.TB, ctx context.Context, url string) *mcp.ClientSession {
	tb.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "test-client", Version: "v0"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url}, nil)
	if err != nil {
		tb.Fatalf("connect %s: %v", url, err)
	}
	return cs
}

func TestServer_MCP(t *testing.T) {
	s, _ := testServer(t)
	ts := httptest.NewServer(s.Handler())
	defer ts.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()

	cs := connect(t, ctx, ts.URL+envproto.MCPPath)
	defer cs.Close()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatalf("ListTools: %v", err)
	}
	var names []string
	for _, tool := range lt.Tools {
		names = append(names, tool.Name)
	}
	if !slices.Equal(names, []string{"echo", "fail"}) {
		t.Errorf("tools = %v, want [echo fail]", names)
	}

	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"text": "ab", "times": 2}})
	if err != nil {
		t.Fatalf("CallTool echo: %v", err)
	}
	var out echoOut
	if b, err := json.Marshal(res.StructuredContent); err != nil || json.Unmarshal(b, &out) != nil || out.Echo != "abab" || res.IsError {
		t.Errorf("echo result = %+v (structured %v), want echo abab", res, res.StructuredContent)
	}

	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "echo", Arguments: map[string]any{"times": 2}})
	if err != nil || !res.IsError {
		t.Errorf("echo without required text: result %+v, err %v; want a tool error", res, err)
	}
	res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: "fail", Arguments: map[string]any{}})
	if err != nil || !res.IsError {
		t.Fatalf("fail: result %+v, err %v; want a tool error", res, err)
	}
	if tc, ok := res.Content[0].(*mcp.TextContent); !ok || !strings.Contains(tc.Text, "boom") {
		t.Errorf("fail content = %v, want the handler's error", res.Content)
	}
}

func TestServer_ServeListenerShutdown(t *testing.T) {
	s, _ := testServer(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.ServeListener(ctx, ln) }()

	cctx, ccancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer ccancel()
	cs := connect(t, cctx, "http://"+ln.Addr().String()+envproto.MCPPath)
	defer cs.Close()
	if _, err := cs.ListTools(cctx, nil); err != nil {
		t.Fatalf("ListTools: %v", err)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("ServeListener after cancel = %v, want nil", err)
		}
	case <-time.After(envsdk.ShutdownTimeout + 3*time.Second):
		t.Fatal("ServeListener did not return after its context ended")
	}
	if _, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		t.Error("listener still accepts connections after shutdown")
	}
}

func TestServe_ListenError(t *testing.T) {
	s, _ := testServer(t)
	if err := s.Serve(t.Context(), "256.0.0.1:1"); err == nil {
		t.Error("Serve on an invalid address = nil, want an error")
	}
}
