package gateway

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/agentenv/agentenv/envproto"
)

// A trajectory line is one line of JSON with the value json.Marshal makes of the record (the
// raw arguments and result kept as they came, without json's HTML escaping).
func TestCallRecordLine(t *testing.T) {
	started := time.Date(2026, 12, 1, 18, 0, 0, 123456789, time.UTC)
	for _, r := range []envproto.CallRecord{
		{ID: 1, Via: "mcp", Role: "default", Tool: "echo", Started: started},
		{ID: 42, Via: "step", Session: "s-1", Role: "agent", Server: "a", Tool: "a__x", ServerTool: "x",
			Arguments: json.RawMessage(`{"text":"a \"q\" <b> é"}`), Result: json.RawMessage(`{"content":[]}`),
			Error: "line\nbreak & <tag>", Started: started, DurationMS: 0.125},
		{ID: 3, Via: "mcp", Role: "r", Tool: "t", Arguments: json.RawMessage("{\n  \"a\": [1, 2]\n}"), Started: started, DurationMS: 1500},
	} {
		got := appendCall(nil, &r)
		want, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var g, w any
		if bytes.Count(got, []byte("\n")) != 1 || got[len(got)-1] != '\n' || json.Unmarshal(got, &g) != nil {
			t.Fatalf("not one line of JSON: %q", got)
		}
		_ = json.Unmarshal(want, &w)
		if !reflect.DeepEqual(g, w) {
			t.Errorf("line\n got %s\nwant %s", got, want)
		}
	}
}
