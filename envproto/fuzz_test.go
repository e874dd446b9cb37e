package envproto_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentenv/agentenv/envproto"
)

// FuzzCard: any JSON decodes into a card without panicking, and a decoded card encodes to
// the anchor's names only and decodes back to the same methods, MCP endpoint and tools.
func FuzzCard(f *testing.F) {
	files, _ := filepath.Glob("testdata/*card*.json")
	for _, p := range files {
		if b, err := os.ReadFile(p); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(`{"name":"x","url":"","capabilities":{"operations":null}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var c envproto.Card
		if json.Unmarshal(b, &c) != nil {
			return
		}
		_ = c.HasDataPlane()
		out, err := json.Marshal(c)
		if err != nil {
			t.Fatalf("encode %+v: %v", c, err)
		}
		var back envproto.Card
		if err := json.Unmarshal(out, &back); err != nil {
			t.Fatalf("decode own encoding %s: %v", out, err)
		}
		if len(back.Deprecated) != 0 {
			t.Errorf("own encoding %s uses deprecated %v", out, back.Deprecated)
		}
		if back.MCPURL() != c.MCPURL() || back.HasDataPlane() != c.HasDataPlane() || len(back.Capabilities.Tools) != len(c.Capabilities.Tools) {
			t.Errorf("round trip of %s changed the card: %s", b, out)
		}
	})
}
