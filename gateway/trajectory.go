package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"sync"
	"time"
)

// Bounds of the trajectory kept in memory; the oldest calls are dropped beyond either, and
// /state counts them.
const (
	maxTrajectory          = 100_000
	DefaultTrajectoryBytes = 64 << 20
)

// CallRecord is one tool call as GET /trajectory reports it, one JSON object per line.
type CallRecord struct {
	ID int64 `json:"id"`
	// Via is how the call came: "mcp", "step", "trigger" (a trigger's tool action) or
	// "control" (a change made through the admin routes: tool gating, the clock, triggers;
	// Tool names the route and Arguments its body).
	Via        string          `json:"via"`
	Session    string          `json:"session,omitempty"`
	Role       string          `json:"role"`
	Server     string          `json:"server,omitempty"`
	Tool       string          `json:"tool"`                  // the gateway's name for it
	ServerTool string          `json:"server_tool,omitempty"` // the backend's name for it
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"` // the CallToolResult
	Error      string          `json:"error,omitempty"`
	// VirtualTime is the virtual clock's time at the call, while it is armed.
	VirtualTime string    `json:"virtual_time,omitempty"`
	Started     time.Time `json:"started"`
	DurationMS  float64   `json:"duration_ms"`
}

// trajectory keeps the calls in order of completion, as NDJSON lines. A call is queued as it
// is on the call's path (an append under a lock) and encoded off it, by a background encoder
// or by the next reader; encoded lines hold no pointers for the garbage collector to scan, and
// a reader writes them out without holding a lock. Safe for concurrent use.
type trajectory struct {
	maxCalls int
	maxBytes int
	kick     chan struct{} // cap 1: calls are queued

	mu      sync.Mutex // guards next and queued
	next    int64
	queued  []CallRecord
	encoded sync.Mutex // guards lines, first, size and dropped; serialises encoding
	lines   [][]byte   // encoded calls, oldest first; elements are never changed once appended
	first   int64      // id of lines[0]
	size    int        // bytes in lines
	dropped int64
}

func newTrajectory(maxCalls, maxBytes int) *trajectory {
	return &trajectory{maxCalls: maxCalls, maxBytes: maxBytes, kick: make(chan struct{}, 1), next: 1, first: 1}
}

// add queues r under the next id.
func (t *trajectory) add(r CallRecord) {
	t.mu.Lock()
	r.ID = t.next
	t.next++
	t.queued = append(t.queued, r)
	t.mu.Unlock()
	signal(t.kick)
}

// run encodes queued calls until ctx ends.
func (t *trajectory) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.kick:
			t.flush()
		}
	}
}

// flush encodes every queued call and drops the oldest beyond the bounds.
func (t *trajectory) flush() {
	t.encoded.Lock()
	defer t.encoded.Unlock()
	t.mu.Lock()
	batch := t.queued
	t.queued = nil
	t.mu.Unlock()
	for _, r := range batch {
		line := r.appendLine(nil)
		t.lines = append(t.lines, line)
		t.size += len(line)
	}
	drop := 0
	for len(t.lines)-drop > 1 && (len(t.lines)-drop > t.maxCalls || t.size > t.maxBytes) {
		t.size -= len(t.lines[drop])
		drop++
	}
	if drop > 0 {
		// A fresh array: readers may still hold the old one.
		t.lines = append([][]byte(nil), t.lines[drop:]...)
		t.first += int64(drop)
		t.dropped += int64(drop)
	}
}

// appendLine appends r as one line of JSON, as json.Marshal would encode it (the raw
// arguments and result compacted onto the line), and a newline.
func (r *CallRecord) appendLine(b []byte) []byte {
	str := func(key, v string, omitEmpty bool) {
		if v == "" && omitEmpty {
			return
		}
		b = append(b, ',', '"')
		b = append(b, key...)
		b = append(b, '"', ':')
		q, _ := json.Marshal(v)
		b = append(b, q...)
	}
	raw := func(key string, v json.RawMessage) {
		if len(v) == 0 {
			return
		}
		b = append(b, ',', '"')
		b = append(b, key...)
		b = append(b, '"', ':')
		if bytes.ContainsAny(v, "\r\n") {
			var c bytes.Buffer
			if json.Compact(&c, v) == nil {
				v = c.Bytes()
			}
		}
		b = append(b, v...)
	}
	b = append(b, `{"id":`...)
	b = strconv.AppendInt(b, r.ID, 10)
	str("via", r.Via, false)
	str("session", r.Session, true)
	str("role", r.Role, false)
	str("server", r.Server, true)
	str("tool", r.Tool, false)
	str("server_tool", r.ServerTool, true)
	raw("arguments", r.Arguments)
	raw("result", r.Result)
	str("error", r.Error, true)
	str("virtual_time", r.VirtualTime, true)
	b = append(b, `,"started":"`...)
	b = r.Started.AppendFormat(b, time.RFC3339Nano)
	b = append(b, `","duration_ms":`...)
	b = strconv.AppendFloat(b, r.DurationMS, 'f', -1, 64)
	return append(b, '}', '\n')
}

// writeSince writes the calls with an id above after to w, one JSON object per line, and
// stops at the first write error.
func (t *trajectory) writeSince(w io.Writer, after int64) error {
	t.flush()
	t.encoded.Lock()
	lines, first := t.lines, t.first
	t.encoded.Unlock()
	skip := max(0, min(int64(len(lines)), after-first+1))
	for _, l := range lines[skip:] {
		if _, err := w.Write(l); err != nil {
			return err
		}
	}
	return nil
}

// counts returns the number of calls recorded and dropped.
func (t *trajectory) counts() (calls, dropped int64) {
	t.flush()
	t.mu.Lock()
	calls = t.next - 1
	t.mu.Unlock()
	t.encoded.Lock()
	defer t.encoded.Unlock()
	return calls, t.dropped
}
