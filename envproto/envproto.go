// Package envproto holds the wire types of the env protocol, the one AgentEnv's protocol package
// (agentenv_protocol/types.py, protocol version "1.0") defines: the env card an env server
// publishes at /.well-known/agent-env.json and the JSON-RPC 2.0 data plane it serves at the
// card's url (POST /agentenv by default). Servers (package envsdk), the gateway and clients
// share these types, so an agentenv env server and one written to the anchor's protocol are
// interchangeable.
//
// # Deprecated names
//
// Before protocol "1.0" agentenv had names of its own: on the card protocol_version, tools,
// endpoints {mcp, data, ...}, extensions as a map (data_plane {methods}) and servers; on a tool
// input_schema; on a file part mime_type. Decoding still accepts them, for one release, and maps
// them onto the anchor's fields ([Card.Deprecated] names those it met); encoding writes only the
// anchor's names.
package envproto

import (
	"bytes"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// Version is the env protocol version this module speaks: the anchor's protocolVersion.
const Version = "1.0"

// LegacyVersion is the protocol version agentenv's own card carried before it spoke the
// anchor's protocol. Deprecated: cards with it are still read, for one release.
const LegacyVersion = "2026-11-01"

// Well-known paths of an env server and of the gateway.
const (
	CardPath = "/.well-known/agent-env.json"
	MCPPath  = "/mcp"
	DataPath = "/agentenv"
)

// Transports named on a card.
const (
	// TransportJSONRPC is a card's preferredTransport: the data plane is JSON-RPC 2.0.
	TransportJSONRPC = "JSONRPC"
	// TransportMCP marks the additionalInterfaces entry of the MCP endpoint (streamable HTTP).
	TransportMCP = "mcp"
)

// Declaration-only extensions the anchor defines.
const (
	// IntakeExtension declares what data/add accepts and data/get returns.
	IntakeExtension = "urn:agentenv:intake/v1"
	// DataObjectsExtension says data/get takes a write_namespace grant.
	DataObjectsExtension = "urn:agentenv:data-objects/v1"
)

// Card describes an env server: its name, where its data plane and MCP endpoint are, and its
// capabilities. Paths are relative to the URL the card was fetched from.
type Card struct {
	Name string `json:"name"`
	// Description is agentenv's addition (the anchor's card has none); readers ignore it.
	Description     string `json:"description,omitempty"`
	ProtocolVersion string `json:"protocolVersion"`
	// URL is the data plane's endpoint (JSON-RPC 2.0), DataPath by default.
	URL                  string       `json:"url"`
	PreferredTransport   string       `json:"preferredTransport"`
	AdditionalInterfaces []Interface  `json:"additionalInterfaces"`
	Capabilities         Capabilities `json:"capabilities"`
	// Children are the cards of the envs a composed env (a gateway) fronts, their url and
	// interfaces rewritten to the composer's.
	Children []Card `json:"children_environments,omitempty"`

	// Deprecated lists the pre-1.0 agentenv field names the decoded card used (see the
	// package doc); never encoded.
	Deprecated []string `json:"-"`
}

// Interface is another endpoint of an env server, by URL and transport.
type Interface struct {
	URL       string `json:"url"`
	Transport string `json:"transport"`
}

// Capabilities are what a card advertises.
type Capabilities struct {
	Extensions []Extension `json:"extensions"`
	// Tools are advertisement only: invocation is always MCP.
	Tools []Tool `json:"tools"`
	// Operations are the data plane methods served at the card's url. Nil (encoded null, or
	// absent) marks a card from before operations were advertised, which serves all three;
	// an empty list means no data plane.
	Operations []string `json:"operations"`
}

// Extension is a card extension, A2A-shaped. An invocable one's Params are
// {"endpoint": PATH, "methods": {OP: {"method": VERB, "request": SCHEMA, "endpoint"?: PATH}}}.
type Extension struct {
	URI         string          `json:"uri"`
	Description string          `json:"description,omitempty"`
	Params      json.RawMessage `json:"params,omitempty"`
	Required    *bool           `json:"required,omitempty"`
}

// Tool is one tool as a card lists it.
type Tool struct {
	Name        string          `json:"name"`
	Description string          `json:"description,omitempty"`
	InputSchema json.RawMessage `json:"inputSchema,omitempty"`
	// Server is agentenv's addition on a gateway's card: the backend serving the tool.
	Server string `json:"server,omitempty"`
}

// UnmarshalJSON reads a tool, also under its deprecated input_schema.
func (t *Tool) UnmarshalJSON(b []byte) error {
	type plain Tool
	var v struct {
		plain
		Legacy json.RawMessage `json:"input_schema"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*t = Tool(v.plain)
	if len(t.InputSchema) == 0 && len(v.Legacy) > 0 {
		t.InputSchema = v.Legacy
	}
	return nil
}

// legacyDataPlane is the pre-1.0 card extension key listing the data plane methods.
const legacyDataPlane = "data_plane"

// UnmarshalJSON reads a card in the anchor's shape, and one in agentenv's pre-1.0 shape (see
// the package doc). An anchor card without url gets DataPath, as the anchor's model defaults it.
func (c *Card) UnmarshalJSON(b []byte) error {
	type plain Card
	var v struct {
		plain
		LegacyVersion    string                     `json:"protocol_version"`
		LegacyTools      []Tool                     `json:"tools"`
		LegacyEndpoints  map[string]string          `json:"endpoints"`
		LegacyExtensions map[string]json.RawMessage `json:"extensions"`
		LegacyServers    map[string]Card            `json:"servers"`
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		return err
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*c = Card(v.plain)
	c.Deprecated = nil
	for _, k := range []string{"protocol_version", "tools", "endpoints", "extensions", "servers"} {
		if _, ok := keys[k]; ok {
			c.Deprecated = append(c.Deprecated, k)
		}
	}
	if c.ProtocolVersion == "" {
		c.ProtocolVersion = v.LegacyVersion
	}
	if c.Capabilities.Tools == nil && v.LegacyTools != nil {
		c.Capabilities.Tools = v.LegacyTools
	}
	_, hasURL := keys["url"]
	if v.LegacyEndpoints != nil {
		if !hasURL {
			c.URL = v.LegacyEndpoints["data"]
		}
		if p := v.LegacyEndpoints["mcp"]; p != "" && c.interfaceURL(TransportMCP) == "" {
			c.AdditionalInterfaces = append(c.AdditionalInterfaces, Interface{URL: p, Transport: TransportMCP})
		}
	} else if !hasURL {
		c.URL = DataPath
	}
	if len(v.LegacyExtensions) > 0 {
		for _, uri := range sortedKeys(v.LegacyExtensions) {
			raw := v.LegacyExtensions[uri]
			if uri == legacyDataPlane {
				var dp struct {
					Methods []string `json:"methods"`
				}
				if json.Unmarshal(raw, &dp) == nil && c.Capabilities.Operations == nil {
					c.Capabilities.Operations = dp.Methods
				}
				continue
			}
			c.Capabilities.Extensions = append(c.Capabilities.Extensions, Extension{URI: uri, Params: raw})
		}
	}
	if c.Children == nil && len(v.LegacyServers) > 0 {
		for _, name := range sortedKeys(v.LegacyServers) {
			c.Children = append(c.Children, v.LegacyServers[name])
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

func (c *Card) interfaceURL(transport string) string {
	for _, i := range c.AdditionalInterfaces {
		if i.Transport == transport && i.URL != "" {
			return i.URL
		}
	}
	return ""
}

// MCPURL returns the path (or URL) of the card's MCP endpoint: its additionalInterfaces entry
// with transport mcp, else MCPPath by convention.
func (c *Card) MCPURL() string {
	if u := c.interfaceURL(TransportMCP); u != "" {
		return u
	}
	return MCPPath
}

// Methods returns the data plane methods the card's server serves: its operations, or all
// three for a card from before operations were advertised; none when it has no url.
func (c *Card) Methods() []string {
	if c.URL == "" {
		return []string{}
	}
	if c.Capabilities.Operations == nil {
		return []string{MethodReset, MethodAdd, MethodGet}
	}
	return c.Capabilities.Operations
}

// HasDataPlane reports whether the card's server serves any data plane method.
func (c *Card) HasDataPlane() bool { return len(c.Methods()) > 0 }

// Extension returns the extension advertised under uri, or nil.
func (c *Card) Extension(uri string) *Extension {
	for i := range c.Capabilities.Extensions {
		if c.Capabilities.Extensions[i].URI == uri {
			return &c.Capabilities.Extensions[i]
		}
	}
	return nil
}

// Child returns the child card named name, or nil.
func (c *Card) Child(name string) *Card {
	for i := range c.Children {
		if c.Children[i].Name == name {
			return &c.Children[i]
		}
	}
	return nil
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
	// CodeServerError is the code of a handler's failure; the error's data is
	// {"code": FailReset|FailAdd|FailGet}.
	CodeServerError = -32000
)

// What a failed data plane handler's error data names, as {"code": ...}.
const (
	FailReset = "reset_failed"
	FailAdd   = "add_failed"
	FailGet   = "get_failed"
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

// Part kinds.
const (
	KindText = "text"
	KindFile = "file"
	KindData = "data"
)

// Part is one item of data, A2A-shaped: exactly one of Text, File or Data is set, as Kind
// names. The anchor requires a data part's Data to be a JSON object; agentenv servers still
// take any other non-null value, deprecated, for one release.
type Part struct {
	Kind     string          `json:"kind"`
	Text     string          `json:"text,omitempty"`
	File     *FilePart       `json:"file,omitempty"`
	Data     json.RawMessage `json:"data,omitempty"`
	Metadata json.RawMessage `json:"metadata,omitempty"`
}

// FilePart is the file of a file part: inline Bytes, or a URI (file:// on the server's own
// filesystem, or an http(s) URL such as a signed one), not both.
type FilePart struct {
	Name     string `json:"name,omitempty"`
	MimeType string `json:"mimeType,omitempty"`
	Bytes    []byte `json:"bytes,omitempty"` // base64 in JSON
	URI      string `json:"uri,omitempty"`
}

// MarshalJSON writes the anchor's FileWithBytes (bytes always present, even empty) or
// FileWithUri.
func (f FilePart) MarshalJSON() ([]byte, error) {
	type withURI struct {
		URI      string `json:"uri"`
		MimeType string `json:"mimeType,omitempty"`
		Name     string `json:"name,omitempty"`
	}
	type withBytes struct {
		Bytes    []byte `json:"bytes"`
		MimeType string `json:"mimeType,omitempty"`
		Name     string `json:"name,omitempty"`
	}
	if f.URI != "" && len(f.Bytes) == 0 {
		return json.Marshal(withURI{f.URI, f.MimeType, f.Name})
	}
	b := f.Bytes
	if b == nil {
		b = []byte{}
	}
	if f.URI != "" {
		// Both set is invalid; encode it so that a validating reader refuses it.
		return json.Marshal(struct {
			withBytes
			URI string `json:"uri"`
		}{withBytes{b, f.MimeType, f.Name}, f.URI})
	}
	return json.Marshal(withBytes{b, f.MimeType, f.Name})
}

// UnmarshalJSON reads a file, also with its deprecated mime_type.
func (f *FilePart) UnmarshalJSON(b []byte) error {
	var v struct {
		Name     string `json:"name"`
		MimeType string `json:"mimeType"`
		Legacy   string `json:"mime_type"`
		Bytes    []byte `json:"bytes"`
		URI      string `json:"uri"`
	}
	if err := json.Unmarshal(b, &v); err != nil {
		return err
	}
	*f = FilePart{Name: v.Name, MimeType: v.MimeType, Bytes: v.Bytes, URI: v.URI}
	if f.MimeType == "" {
		f.MimeType = v.Legacy
	}
	return nil
}

// URIScheme returns the lower-case scheme of the file's URI ("file", "https", "http"), or ""
// for an inline file.
func (f *FilePart) URIScheme() string {
	scheme, _, ok := strings.Cut(f.URI, "://")
	if !ok {
		return ""
	}
	return strings.ToLower(scheme)
}

// AddParams are the params of data/add.
type AddParams struct {
	Parts []Part `json:"parts"`
}

// GetParams are the params of data/get; Query is agentenv's server-defined filter (empty
// means everything). WriteNamespace is the anchor's grant (DataObjectsExtension), passed
// through as it came.
type GetParams struct {
	Query          json.RawMessage `json:"query,omitempty"`
	WriteNamespace json.RawMessage `json:"write_namespace,omitempty"`
}

// GetResult is the result of data/get.
type GetResult struct {
	Parts []Part `json:"parts"`
}

// Validate reports what is wrong with the part, or nil: it has exactly the field its kind
// names, and a file has inline bytes or a file://, http:// or https:// URI, not both.
func (p *Part) Validate() error {
	var ok bool
	switch p.Kind {
	case KindText:
		ok = p.File == nil && len(p.Data) == 0
	case KindFile:
		ok = p.File != nil && p.Text == "" && len(p.Data) == 0
		if ok && p.File.URI != "" {
			if len(p.File.Bytes) > 0 {
				return fmt.Errorf("file: bytes and uri are both set")
			}
			switch p.File.URIScheme() {
			case "file", "http", "https":
			default:
				return fmt.Errorf("file: uri %q: want file://, http:// or https://", p.File.URI)
			}
		}
	case KindData:
		d := bytes.TrimSpace(p.Data)
		ok = len(d) > 0 && !bytes.Equal(d, []byte("null")) && p.Text == "" && p.File == nil
	default:
		return fmt.Errorf("unknown kind %q", p.Kind)
	}
	if !ok {
		return fmt.Errorf("a %s part needs exactly its %s field", p.Kind, p.Kind)
	}
	return nil
}
