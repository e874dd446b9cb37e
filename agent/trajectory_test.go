package agent

import (
	"bufio"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestTrajectoryWritesNumberedLines(t *testing.T) {
	path := filepath.Join(t.TempDir(), "t.ndjson")
	tr, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	tr.Write(Line{Kind: KindPrompt, Text: "hi"})
	tr.Write(Line{Kind: KindToolCall, Tool: "add", Arguments: json.RawMessage(`{not json`)})
	tr.Write(Line{Kind: KindStop, Text: StopAnswer, Usage: &Usage{InputTokens: 3}})
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	tr.Write(Line{Kind: KindError}) // dropped after Close, no panic

	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var got []Line
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		got = append(got, l)
	}
	if len(got) != 3 {
		t.Fatalf("got %d lines, want 3", len(got))
	}
	for i, l := range got {
		if l.Seq != i+1 || l.Time.IsZero() {
			t.Errorf("line %d: seq %d time %v", i, l.Seq, l.Time)
		}
	}
	var s string
	if err := json.Unmarshal(got[1].Arguments, &s); err != nil || s != "{not json" {
		t.Errorf("invalid arguments kept as %s, want the JSON string", got[1].Arguments)
	}
	if got[2].Usage == nil || got[2].Usage.InputTokens != 3 {
		t.Errorf("usage lost: %+v", got[2].Usage)
	}
}
