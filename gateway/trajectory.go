package gateway

import (
	"encoding/json"
	"sync"
	"time"
)

// maxTrajectory bounds the calls kept in memory; the oldest are dropped beyond it, and /state
// counts them.
const maxTrajectory = 100_000

// CallRecord is one tool call as GET /trajectory reports it, one JSON object per line.
type CallRecord struct {
	ID         int64           `json:"id"`
	Via        string          `json:"via"` // "mcp" or "step"
	Session    string          `json:"session,omitempty"`
	Role       string          `json:"role"`
	Server     string          `json:"server,omitempty"`
	Tool       string          `json:"tool"`                  // the gateway's name for it
	ServerTool string          `json:"server_tool,omitempty"` // the backend's name for it
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Result     json.RawMessage `json:"result,omitempty"` // the CallToolResult
	Error      string          `json:"error,omitempty"`
	Started    time.Time       `json:"started"`
	DurationMS float64         `json:"duration_ms"`
}

// trajectory keeps the calls in order of completion. Safe for concurrent use.
type trajectory struct {
	max     int
	mu      sync.Mutex
	next    int64
	dropped int64
	calls   []CallRecord
}

func newTrajectory(max int) *trajectory { return &trajectory{max: max, next: 1} }

func (t *trajectory) add(r CallRecord) {
	t.mu.Lock()
	defer t.mu.Unlock()
	r.ID = t.next
	t.next++
	if len(t.calls) >= t.max {
		n := max(1, t.max/10)
		t.calls = append(t.calls[:0], t.calls[n:]...)
		t.dropped += int64(n)
	}
	t.calls = append(t.calls, r)
}

// since returns the calls with an id above after.
func (t *trajectory) since(after int64) []CallRecord {
	t.mu.Lock()
	defer t.mu.Unlock()
	i := 0
	for i < len(t.calls) && t.calls[i].ID <= after {
		i++
	}
	out := make([]CallRecord, len(t.calls)-i)
	copy(out, t.calls[i:])
	return out
}

// counts returns the number of calls recorded and dropped.
func (t *trajectory) counts() (calls, dropped int64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.next - 1, t.dropped
}
