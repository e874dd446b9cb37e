package kv_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/envproto/envtest"
	"github.com/agentenv/agentenv/examples/kv"
)

func TestKV(t *testing.T) {
	ts := httptest.NewServer(kv.New(nil).Handler())
	defer ts.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v0"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: ts.URL + envproto.MCPPath}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()

	var set kv.SetResult
	envtest.CallJSON(t, ctx, cs, "set", map[string]any{"key": "a/1", "value": "x"}, &set)
	envtest.CallJSON(t, ctx, cs, "set", map[string]any{"key": "a/2", "value": "y"}, &set)
	envtest.CallJSON(t, ctx, cs, "set", map[string]any{"key": "b", "value": "z"}, &set)
	var got kv.GetResult
	envtest.CallJSON(t, ctx, cs, "get", map[string]any{"key": "a/2"}, &got)
	if got != (kv.GetResult{Value: "y", Found: true}) {
		t.Errorf("get a/2 = %+v, want y found", got)
	}
	var list kv.ListResult
	envtest.CallJSON(t, ctx, cs, "list", map[string]any{"prefix": "a/"}, &list)
	if len(list.Entries) != 2 || list.Entries[0] != (kv.Entry{Key: "a/1", Value: "x"}) {
		t.Errorf("list a/ = %+v, want a/1 and a/2", list)
	}
	var del kv.DeleteResult
	envtest.CallJSON(t, ctx, cs, "delete", map[string]any{"key": "b"}, &del)
	if !del.Deleted {
		t.Error("delete b: deleted = false, want true")
	}
	envtest.CallJSON(t, ctx, cs, "delete", map[string]any{"key": "b"}, &del)
	if del.Deleted {
		t.Error("delete b again: deleted = true, want false")
	}

	// Data plane: export, reset, re-import, and the tools see the same state.
	var exported envproto.GetResult
	if err := json.Unmarshal(envtest.Data(t, ts.URL, envproto.MethodGet, nil), &exported); err != nil {
		t.Fatal(err)
	}
	if len(exported.Parts) != 2 || string(exported.Parts[0].Data) != `{"key":"a/1","value":"x"}` {
		t.Fatalf("data/get = %+v, want a/1 and a/2 as data parts", exported)
	}
	envtest.Data(t, ts.URL, envproto.MethodReset, nil)
	envtest.CallJSON(t, ctx, cs, "list", map[string]any{}, &list)
	if len(list.Entries) != 0 {
		t.Errorf("list after reset = %+v, want empty", list)
	}
	envtest.Data(t, ts.URL, envproto.MethodAdd, envproto.AddParams(exported))
	envtest.CallJSON(t, ctx, cs, "get", map[string]any{"key": "a/1"}, &got)
	if got != (kv.GetResult{Value: "x", Found: true}) {
		t.Errorf("get a/1 after re-import = %+v, want x found", got)
	}
	var filtered envproto.GetResult
	if err := json.Unmarshal(envtest.Data(t, ts.URL, envproto.MethodGet, envproto.GetParams{Query: json.RawMessage(`{"prefix":"a/2"}`)}), &filtered); err != nil {
		t.Fatal(err)
	}
	if len(filtered.Parts) != 1 {
		t.Errorf("data/get prefix a/2 = %+v, want one part", filtered)
	}

	bad := envtest.DataResponse(t, ts.URL, envproto.MethodAdd, envproto.AddParams{Parts: []envproto.Part{
		{Kind: "data", Data: json.RawMessage(`{"key":"ok","value":"1"}`)}, {Kind: "text", Text: "k=v"}}})
	if bad.Error == nil || bad.Error.Code != envproto.CodeInvalidParams {
		t.Errorf("data/add with a text part = %+v, want invalid params", bad)
	}
	envtest.CallJSON(t, ctx, cs, "get", map[string]any{"key": "ok"}, &got)
	if got.Found {
		t.Error("a refused data/add stored part of its parts, want all or nothing")
	}
}
