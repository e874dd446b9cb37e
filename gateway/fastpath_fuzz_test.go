package gateway

import (
	"bytes"
	"encoding/json"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	sjson "github.com/segmentio/encoding/json"
)

// FuzzFastPathEnvelope feeds arbitrary bodies to the fast path's parser. Whatever it takes for
// itself must be a request the SDK would take too, read the same way: a call (not a
// notification) of the same method and id, the same tool name and arguments; and the answer
// it writes must be one JSON-RPC response echoing that id. A body the fast path leaves goes to
// the SDK, so leaving one is always allowed.
func FuzzFastPathEnvelope(f *testing.F) {
	for _, s := range []string{
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":{"text":"x"}}}`,
		`{"jsonrpc":"2.0","id":"a","method":"tools/call","params":{"name":"echo","arguments":null,"_meta":{"k":1}}}`,
		`{"jsonrpc":"2.0","id":-7,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list","params":{"cursor":"x"}}`,
		`{"jsonrpc":"2.0","method":"tools/call","params":{"name":"echo"}}`,
		`{"jsonrpc":"2.0","id":1.5,"method":"tools/call","params":{"name":"echo"}}`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo","arguments":[1]}}`,
		`{"jsonrpc":"2.0","id":1,"method":"notifications/cancelled","params":{"requestId":1}}`,
		`[{"jsonrpc":"2.0","id":1,"method":"tools/list"}]`,
		`{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"e","arguments":{}},"extra":1}`,
	} {
		f.Add([]byte(s))
	}
	s := &session{id: "s1", meta: []byte(`"agentenv.io/role":"default","agentenv.io/session":"s1"`)}
	f.Fuzz(func(t *testing.T, body []byte) {
		env, ok := parseEnvelope(body)
		if !ok {
			return
		}
		req, ok := parseFast(env)
		if !ok {
			return
		}
		if req.method == methodCallTool {
			meta, ok := fastMeta(s, req.meta)
			if !ok {
				return
			}
			var m map[string]json.RawMessage
			if err := json.Unmarshal(meta, &m); err != nil || string(m[MetaSession]) != `"s1"` {
				t.Fatalf("%s: stamped _meta %s: %v", body, meta, err)
			}
		}
		msg, err := jsonrpc.DecodeMessage(body)
		if err != nil {
			t.Fatalf("fast path took %s, which the SDK refuses: %v", body, err)
		}
		sdk, ok := msg.(*jsonrpc.Request)
		if !ok || !sdk.IsCall() {
			t.Fatalf("fast path took %s, which the SDK reads as %T (call %v)", body, msg, ok && sdk.IsCall())
		}
		if sdk.Method != req.method {
			t.Fatalf("%s: method %q, the SDK reads %q", body, req.method, sdk.Method)
		}
		var id any
		if err := json.Unmarshal(req.id, &id); err != nil || !reflect.DeepEqual(mustID(t, id), sdk.ID) {
			t.Fatalf("%s: id %s (%v), the SDK reads %v", body, req.id, err, sdk.ID.Raw())
		}
		if req.method == methodCallTool {
			var p mcp.CallToolParamsRaw // decoded as the SDK's server decodes params: case for case
			if _, err := sjson.Parse(sdk.Params, &p, sjson.DontMatchCaseInsensitiveStructFields); err != nil {
				t.Fatalf("%s: the SDK cannot read the params the fast path took: %v", body, err)
			}
			if p.Name != req.name {
				t.Fatalf("%s: tool %q, the SDK reads %q", body, req.name, p.Name)
			}
			if !sameJSON(rawArgs(p.Arguments), req.args) {
				t.Fatalf("%s: arguments %s, the SDK reads %s", body, req.args, p.Arguments)
			}
		}
		// The answer echoes the id in one well-formed response the SDK's client would read.
		rec := httptest.NewRecorder()
		writeAnswer(rec, req.id, "result", json.RawMessage(`{}`))
		ans, err := jsonrpc.DecodeMessage(rec.Body.Bytes())
		if err != nil {
			t.Fatalf("%s: answer %s does not decode: %v", body, rec.Body, err)
		}
		resp, ok := ans.(*jsonrpc.Response)
		if !ok || !reflect.DeepEqual(resp.ID, sdk.ID) {
			t.Fatalf("%s: answer %s is not a response to id %v", body, rec.Body, sdk.ID.Raw())
		}
	})
}

func mustID(t *testing.T, v any) jsonrpc.ID {
	id, err := jsonrpc.MakeID(v)
	if err != nil {
		t.Fatalf("id %v: %v", v, err)
	}
	return id
}

// sameJSON reports whether a and b are the same JSON value (nil and empty are the same).
func sameJSON(a, b json.RawMessage) bool {
	if len(bytes.TrimSpace(a)) == 0 || len(bytes.TrimSpace(b)) == 0 {
		return len(bytes.TrimSpace(a)) == len(bytes.TrimSpace(b))
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// BenchmarkParseFast measures reading one tools/call envelope as the fast path does.
func BenchmarkParseFast(b *testing.B) {
	body := []byte(`{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"echo","arguments":{"text":"hello world","n":3,"tags":["a","b"]},"_meta":{"progressToken":7}}}`)
	b.ReportAllocs()
	for b.Loop() {
		env, ok := parseEnvelope(body)
		if !ok {
			b.Fatal("envelope")
		}
		if _, ok := parseFast(env); !ok {
			b.Fatal("fast")
		}
	}
}
