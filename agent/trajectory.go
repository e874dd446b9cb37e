package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"sync"
	"time"
)

// Kinds of trajectory line.
const (
	KindPrompt     = "prompt"      // the prompt given (Text), with the agent kind (Agent)
	KindModel      = "model"       // one model turn or agent message (Text, ToolCalls, Usage)
	KindToolCall   = "tool_call"   // a tool call (Tool, CallID, Arguments)
	KindToolResult = "tool_result" // its result (Text, JSON, IsError)
	KindResponse   = "response"    // the final answer (Text, JSON)
	KindError      = "error"       // what ended the prompt in error (Error)
	KindStop       = "stop"        // why the loop ended (Text: a Stop* value), with the total Usage
)

// Line is one line of an agent's trajectory file (JSON Lines, in the run's folder). Every
// agent kind writes this one shape, so that an export or a viewer reads one format.
type Line struct {
	Seq        int             `json:"seq"`
	Time       time.Time       `json:"time"`
	Kind       string          `json:"kind"` // one of the Kind* values
	Agent      string          `json:"agent,omitempty"`
	Turn       int             `json:"turn,omitempty"`
	Model      string          `json:"model,omitempty"`
	Tool       string          `json:"tool,omitempty"`
	CallID     string          `json:"call_id,omitempty"`
	Arguments  json.RawMessage `json:"arguments,omitempty"`
	Text       string          `json:"text,omitempty"`
	JSON       json.RawMessage `json:"json,omitempty"`
	IsError    bool            `json:"is_error,omitempty"`
	ToolCalls  int             `json:"tool_calls,omitempty"`
	DurationMS int64           `json:"duration_ms,omitempty"` // a model turn's or tool call's wall time
	Usage      *Usage          `json:"usage,omitempty"`
	Error      string          `json:"error,omitempty"`
}

// Trajectory writes Lines to a file as they happen. Safe for concurrent use.
type Trajectory struct {
	path string
	mu   sync.Mutex
	f    *os.File
	enc  *json.Encoder
	seq  int
	werr error
}

// Create makes (or truncates) the trajectory file at path.
func Create(path string) (*Trajectory, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("trajectory: %w", err)
	}
	return &Trajectory{path: path, f: f, enc: json.NewEncoder(f)}, nil
}

// Path is the file's path.
func (t *Trajectory) Path() string { return t.path }

// Write appends l, numbering and timing it. Arguments that are not valid JSON are kept as a
// JSON string. A write error is kept for Err.
func (t *Trajectory) Write(l Line) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.seq++
	l.Seq, l.Time = t.seq, time.Now().UTC()
	if len(l.Arguments) > 0 && !json.Valid(l.Arguments) {
		b, _ := json.Marshal(string(l.Arguments))
		l.Arguments = b
	}
	if len(l.JSON) > 0 && !json.Valid(l.JSON) {
		b, _ := json.Marshal(string(l.JSON))
		l.JSON = b
	}
	if t.f == nil {
		return
	}
	if err := t.enc.Encode(l); err != nil && t.werr == nil {
		t.werr = fmt.Errorf("trajectory: %w", err)
	}
}

// Err is the first error writing or closing the file.
func (t *Trajectory) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.werr
}

// Close closes the file; later writes are dropped.
func (t *Trajectory) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.f == nil {
		return t.werr
	}
	if err := t.f.Close(); err != nil && t.werr == nil {
		t.werr = fmt.Errorf("trajectory: %w", err)
	}
	t.f = nil
	return t.werr
}

// Finish writes the end of a prompt's trajectory from what the agent gave back: the response
// line (or, with err, the error line), then the stop line with ans.Stop (StopError if the agent
// set none and err is not nil, StopAnswer if neither) and the total usage. Whoever drives an
// agent calls it once, after Prompt, so every kind of agent ends its trajectory the same way.
// It returns the stop it wrote.
func Finish(tr *Trajectory, ans Answer, err error) string {
	stop := ans.Stop
	if err != nil {
		tr.Write(Line{Kind: KindError, Error: err.Error()})
		if stop == "" {
			stop = StopError
		}
	} else {
		var structured json.RawMessage
		if len(ans.Structured) > 0 {
			structured = ans.Structured
		}
		tr.Write(Line{Kind: KindResponse, Text: ans.Text, JSON: structured})
		if stop == "" {
			stop = StopAnswer
		}
	}
	u := ans.Usage
	tr.Write(Line{Kind: KindStop, Text: stop, Turn: ans.Turns, ToolCalls: ans.ToolCalls, Usage: &u})
	return stop
}
