package envproto

import (
	"encoding/json"
	"time"
)

// CallRecord is one tool call as an agentenv gateway's GET /trajectory reports it, one JSON
// object per line (agentenv's own route: the anchor's protocol has no trajectory). The gateway
// writes it; the runner keeps it before a teardown, and the explorer reads it.
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
