package soak

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
)

const textLog = `time=2026-01-01T00:00:00Z level=WARN msg="sandbox was not terminated" record_id=gateway-1 provider=docker err="terminate: boom"
time=2026-01-01T00:00:00Z level=INFO msg="episode done"
time=2026-01-01T00:00:01Z level=WARN msg="sandbox may still be up" record_id=notes-2 provider=docker sandbox_id=abc
{"time":"2026-01-01T00:00:02Z","level":"WARN","msg":"sandbox was not terminated after a failed or cancelled create; gc will retry","record_id":"db-3","provider":"docker"}
teardown: 1 may still be up
`

func TestParseWarnings(t *testing.T) {
	ws, err := ParseWarnings("run", strings.NewReader(textLog))
	if err != nil {
		t.Fatal(err)
	}
	want := []struct{ phrase, record string }{
		{PhraseNotTerminated, "gateway-1"},
		{PhraseMayStillBeUp, "notes-2"},
		{PhraseNotTerminated, "db-3"},
		{PhraseMayStillBeUp, ""},
	}
	if len(ws) != len(want) {
		t.Fatalf("ParseWarnings found %d warnings, want %d: %+v", len(ws), len(want), ws)
	}
	for i, w := range want {
		if ws[i].Phrase != w.phrase || ws[i].Record != w.record || ws[i].Source != "run" {
			t.Errorf("warning %d = %q on %q (%s), want %q on %q", i, ws[i].Phrase, ws[i].Record, ws[i].Source, w.phrase, w.record)
		}
	}
}

func TestClassify(t *testing.T) {
	e := &fakeEngine{res: []Resource{
		fakeContainer("notes-2", map[string]string{agentenv.LabelRecord: "notes-2"}),
		{Kind: "network", ID: "n", Name: "net-4", Labels: map[string]string{agentenv.LabelRecord: "net-4"}},
	}}
	ws := []Warning{{Record: "gateway-1"}, {Record: "notes-2"}, {Record: ""}, {Record: "net-4"}}
	if err := Classify(t.Context(), e, ws); err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, true, false, true} {
		if ws[i].True != want {
			t.Errorf("Classify(%q).True = %v, want %v (listed %v)", ws[i].Record, ws[i].True, want, ws[i].Listed)
		}
	}
	if got := ws[3].Listed; len(got) != 1 || got[0] != "network net-4" {
		t.Errorf("Listed = %v, want [network net-4]", got)
	}
	if truthful, wrong := countWarnings(ws); truthful != 2 || wrong != 2 {
		t.Errorf("countWarnings = %d, %d, want 2, 2", truthful, wrong)
	}
	e.err = errors.New("engine down")
	if err := Classify(t.Context(), e, ws); err == nil {
		t.Error("Classify with an engine that fails: nil error")
	}
}

// TestLiveClassifier: a warning is judged when it is written, so a sandbox removed by a later
// retry still counts as a true warning; bytes reach the log unchanged, split lines included.
func TestLiveClassifier(t *testing.T) {
	e := &fakeEngine{res: []Resource{fakeContainer("gateway-1", map[string]string{agentenv.LabelRecord: "gateway-1"})}}
	var log bytes.Buffer
	c := newLiveClassifier("run", e, &log)
	first, rest, _ := strings.Cut(textLog, "boom")
	for _, part := range []string{first, "boom", rest[:10]} {
		if _, err := io.WriteString(c, part); err != nil {
			t.Fatal(err)
		}
	}
	// Wait until the first line was judged, then let a "retry" remove the container.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		c.mu.Lock()
		n := len(c.warnings)
		c.mu.Unlock()
		if n == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the first warning was not judged within 10s")
		}
	}
	e.remove(func(Resource) bool { return true })
	if _, err := io.WriteString(c, rest[10:]); err != nil {
		t.Fatal(err)
	}
	ws, err := c.wait()
	if err != nil {
		t.Fatal(err)
	}
	if log.String() != textLog {
		t.Errorf("log got %q, want %q", log.String(), textLog)
	}
	if len(ws) != 4 || !ws[0].True || ws[1].True {
		t.Fatalf("warnings = %+v, want 4, the first true and the second false", ws)
	}
}
