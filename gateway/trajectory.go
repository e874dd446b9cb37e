package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strconv"
	"sync"
	"time"

	"github.com/agentenv/agentenv/envproto"
)

// Bounds of the trajectory kept in memory; the oldest calls are dropped beyond either, and
// /state counts them.
const (
	maxTrajectory          = 100_000
	DefaultTrajectoryBytes = 64 << 20
)

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
	queued  []envproto.CallRecord
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
func (t *trajectory) add(r envproto.CallRecord) {
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
		line := appendCall(nil, &r)
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

// appendCall appends r as one line of JSON, as json.Marshal would encode it (the raw
// arguments and result compacted onto the line), and a newline.
func appendCall(b []byte, r *envproto.CallRecord) []byte {
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
