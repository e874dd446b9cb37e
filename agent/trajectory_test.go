package agent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
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

// Images of a tool result are saved beside the trajectory file, one file each, and refused
// past their bounds or of a type a viewer cannot show.
func TestKeepImages(t *testing.T) {
	dir := t.TempDir()
	tr, err := Create(filepath.Join(dir, "agent.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	png := []byte("\x89PNG\r\n\x1a\nfake")
	imgs := func(yield func(string, []byte) bool) {
		_ = yield("image/png", png) && yield("image/jpeg", []byte("jpg")) && yield("image/bmp", []byte("bmp")) &&
			yield("image/png", make([]byte, MaxImageBytes+1))
	}
	kept, err := tr.KeepImages(imgs)
	want := []Image{{Path: "agent.images/0001.png", MediaType: "image/png"}, {Path: "agent.images/0002.jpg", MediaType: "image/jpeg"}}
	if !slices.Equal(kept, want) {
		t.Errorf("kept %v, want %v", kept, want)
	}
	if err == nil || !strings.Contains(err.Error(), `"image/bmp" not kept`) || !strings.Contains(err.Error(), "bytes not kept") {
		t.Errorf("KeepImages error = %v, want the bmp and the oversized image named", err)
	}
	if got, err := os.ReadFile(filepath.Join(dir, kept[0].Path)); err != nil || !bytes.Equal(got, png) {
		t.Errorf("saved image = %q, %v; want the PNG's bytes", got, err)
	}
	if ImagesDir(tr.Path()) != filepath.Join(dir, "agent.images") {
		t.Errorf("ImagesDir = %s", ImagesDir(tr.Path()))
	}
}
