// Package envproto holds the wire types of the agentenv env protocol: the card an env server
// publishes at /.well-known/agent-env.json and the JSON-RPC 2.0 data plane it serves at
// POST /agentenv. Servers (package envsdk), the gateway and clients share these types.
package envproto

import "encoding/json"

// Version is the env protocol version this module speaks.
const Version = "2026-11-01"

// Well-known paths of an env server and of the gateway.
const (
	CardPath = "/.well-known/agent-env.json"
	MCPPath  = "/mcp"
	DataPath = "/agentenv"
)

// Card describes an env server: what it is, the tools it serves and where.
type Card struct {
	Name            string                     `json:"name"`
	Description     string                     `json:"description,omitempty"`
	ProtocolVersion string                     `json:"protocol_version"`
	Tools           []Tool                     `json:"tools"`
	Extensions      map[string]json.RawMessage `json:"extensions,omitempty"`
	// Endpoints maps an endpoint name ("mcp", "data", "card", and for the gateway "state",
	// "step", "trajectory") to its path or URL.
	Endpoints map[string]string `json:"endpoints"`
	// Servers is set on a gateway's composed card: each backend's card, endpoints rewritten to
	// the gateway's.
	Servers map[string]Card `json:"servers,omitempty"`
}

// Tool is one tool as a card lists it.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"input_schema,omitempty"`
	Server      string          `json:"server,omitempty"` // on a gateway card: the backend serving it
}

// Data plane methods.
const (
	MethodReset = "data/reset"
	MethodAdd   = "data/add"
	MethodGet   = "data/get"
)

// JSON-RPC 2.0 error codes used by the data plane.
const (
	CodeParseError     = -32700
	CodeInvalidRequest = -32600
	CodeMethodNotFound = -32601
	CodeInvalidParams  = -32602
	CodeInternalError  = -32603
)

// Request is a JSON-RPC 2.0 request to the data plane.
type Request struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method"`
	Params  json.RawMessage `json:"params,omitempty"`
}

// Response is a JSON-RPC 2.0 response from the data plane.
type Response struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *Error          `json:"error,omitempty"`
}

// Error is a JSON-RPC 2.0 error object.
type Error struct {
	Code    int             `json:"code"`
	Message string          `json:"message"`
	Data    json.RawMessage `json:"data,omitempty"`
}

func (e *Error) Error() string { return e.Message }

// Part is one item of data: exactly one of Text, File or Data is set.
type Part struct {
	Kind string          `json:"kind"` // "text", "file" or "data"
	Text string          `json:"text,omitempty"`
	File *FilePart       `json:"file,omitempty"`
	Data json.RawMessage `json:"data,omitempty"`
}

// FilePart is a file carried inline.
type FilePart struct {
	Name     string `json:"name"`
	MimeType string `json:"mime_type,omitempty"`
	Bytes    []byte `json:"bytes"` // base64 in JSON
}

// AddParams are the params of data/add.
type AddParams struct {
	Parts []Part `json:"parts"`
}

// GetParams are the params of data/get; Query is server-defined (empty means everything).
type GetParams struct {
	Query json.RawMessage `json:"query,omitempty"`
}

// GetResult is the result of data/get.
type GetResult struct {
	Parts []Part `json:"parts"`
}
