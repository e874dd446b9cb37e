package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/agentenv/agentenv/envproto"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	sjson "github.com/segmentio/encoding/json"
)

// The fast path of /mcp. A POST of an initialized session carrying one tools/call or
// tools/list request is answered here: the gateway reads the JSON-RPC envelope and the tool
// name, applies the role rules, forwards the raw arguments to the backend on the backend
// session it holds, and relays the raw result. Whatever else /mcp receives (initialize,
// notifications, batches, GET streams, DELETE, requests with headers or fields the fast path
// does not know) goes to the SDK's handler untouched, so the MCP streamable HTTP rules stay
// the SDK's.

// Method names the fast path reads.
const (
	methodListTools  = "tools/list"
	methodInitialize = "initialize"
	methodDiscover   = "server/discover"
	methodCancelled  = "notifications/cancelled"
)

// metaProtocolPrefix starts the _meta keys of the sessionless protocol, left to the SDK.
const metaProtocolPrefix = "io.modelcontextprotocol/"

// fastCallParams are the tools/call params the fast path serves; any other field sends the
// request to the SDK.
type fastCallParams struct {
	Name      string          `json:"name"`
	Arguments json.RawMessage `json:"arguments"`
	Meta      json.RawMessage `json:"_meta"`
}

// fastListParams are the tools/list params the fast path serves: no cursor.
type fastListParams struct {
	Cursor string          `json:"cursor"`
	Meta   json.RawMessage `json:"_meta"`
}

// ServeHTTP serves /mcp: the fast path for what it can answer, the SDK for the rest.
func (m *mcpServers) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sid := r.Header.Get(headerSessionID)
	if sid == "" {
		m.opening.ServeHTTP(w, r)
		return
	}
	s := m.sessions.get(sid)
	if s == nil {
		m.handler.ServeHTTP(w, r) // unknown or ended: the SDK answers 404
		return
	}
	if role := boundRole(r); role != "" && role != s.role {
		// A role token cannot ride a session another role opened.
		writeError(w, http.StatusForbidden, "session "+sid+" belongs to another role")
		return
	}
	switch r.Method {
	case http.MethodDelete:
		// Once the SDK ended the session, and before the client hears so, every request of s
		// goes to the SDK (which answers 404). A DELETE the SDK refuses leaves s as it was.
		sw := &statusWriter{ResponseWriter: w}
		m.handler.ServeHTTP(sw, r)
		if sw.status < 300 {
			m.sessions.remove(s)
		}
		return
	case http.MethodPost:
	default:
		m.handler.ServeHTTP(w, r)
		return
	}
	s.begin()
	defer s.end(m.sessions.timeout)
	if !fastHeaders(r, s) {
		m.handler.ServeHTTP(w, r)
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, mcp.DefaultMaxRequestBodyBytes+1))
	if err != nil || len(body) > mcp.DefaultMaxRequestBodyBytes {
		// Let the SDK answer what it reads of the rest (413 for a body over its limit).
		r.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), r.Body), r.Body}
		m.handler.ServeHTTP(w, r)
		return
	}
	if !m.g.serveFast(w, r, s, body) {
		r.Body = io.NopCloser(bytes.NewReader(body))
		m.handler.ServeHTTP(w, r)
	}
}

// statusWriter records the status a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.status == 0 {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// fastHeaders reports whether r's headers are those of a request the fast path may answer
// for s: the SDK's content type, Accept and protocol-version rules hold, no header of the
// sessionless protocol, and no Host the SDK's DNS-rebinding check would refuse.
func fastHeaders(r *http.Request, s *session) bool {
	if !s.ready.Load() || r.Header.Get(headerMethod) != "" || reboundHost(r) {
		return false
	}
	if v := r.Header.Get(headerProtocolVersion); v == "" || v != s.protocol() || v >= sessionlessProtocol {
		return false
	}
	if ct, _, _ := strings.Cut(r.Header.Get("Content-Type"), ";"); !strings.EqualFold(strings.TrimSpace(ct), "application/json") {
		return false
	}
	jsonOK, streamOK := accepts(r.Header.Values("Accept"))
	return jsonOK && streamOK
}

// accepts reads an Accept header as the SDK does: whether it takes JSON and event streams.
func accepts(values []string) (jsonOK, streamOK bool) {
	for _, v := range values {
		for raw := range strings.SplitSeq(v, ",") {
			base, _, _ := strings.Cut(raw, ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				streamOK = true
			case "*/*":
				jsonOK, streamOK = true, true
			}
		}
	}
	return jsonOK, streamOK
}

// reboundHost reports whether r reached a loopback listener under a host name that is not
// loopback, which the SDK refuses as DNS rebinding.
func reboundHost(r *http.Request) bool {
	switch la := r.Context().Value(http.LocalAddrContextKey).(type) {
	case *net.TCPAddr:
		return la.IP.IsLoopback() && !loopback(r.Host)
	case net.Addr:
		return loopback(la.String()) && !loopback(r.Host)
	}
	return false
}

func loopback(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// serveFast answers body for session s when it is one tools/call or tools/list the fast path
// serves, and reports whether it did; it writes nothing when it did not.
func (g *Gateway) serveFast(w http.ResponseWriter, r *http.Request, s *session, body []byte) bool {
	env, ok := parseEnvelope(body)
	if !ok {
		return false
	}
	if env.Method == methodCancelled {
		g.cancelFast(s, env.Params)
		return false // the SDK still sees it, for the calls it serves
	}
	req, ok := parseFast(env)
	if !ok {
		return false
	}
	switch req.method {
	case methodCallTool:
		meta, ok := fastMeta(s, req.meta)
		if !ok {
			return false
		}
		g.fastCall(w, r, s, req.id, req.name, req.args, meta)
		return true
	case methodListTools:
		list, ok := g.lists.forRole(g, s.role)
		if !ok {
			return false
		}
		writeAnswer(w, req.id, "result", list)
		return true
	}
	return false
}

// fastRequest is one request the fast path may answer: a tools/call or a tools/list.
type fastRequest struct {
	id     json.RawMessage // as the caller wrote it, echoed in the answer
	method string          // methodCallTool or methodListTools
	name   string          // tools/call: the tool
	args   json.RawMessage // tools/call: the arguments object; nil for none
	meta   json.RawMessage // tools/call: the caller's _meta, before the session's is stamped
}

// parseEnvelope reads body as one JSON-RPC 2.0 message with only the envelope's fields.
func parseEnvelope(body []byte) (envproto.Request, bool) {
	var env envproto.Request // the JSON-RPC request, as the data plane reads it too
	if decodeKnown(body, &env) != nil || env.JSONRPC != "2.0" {
		return env, false
	}
	return env, true
}

// parseFast reports whether env is a request the fast path serves, and reads it. Anything it
// does not know for sure (a notification, a cursor, an unknown field, non-object arguments,
// the sessionless protocol's _meta) is left to the SDK.
func parseFast(env envproto.Request) (fastRequest, bool) {
	if !validID(env.ID) {
		return fastRequest{}, false
	}
	switch env.Method {
	case methodCallTool:
		var p fastCallParams
		if decodeKnown(env.Params, &p) != nil || p.Name == "" {
			return fastRequest{}, false
		}
		args := rawArgs(p.Arguments)
		if args != nil && args[0] != '{' {
			return fastRequest{}, false
		}
		return fastRequest{id: env.ID, method: env.Method, name: p.Name, args: args, meta: p.Meta}, true
	case methodListTools:
		if len(env.Params) > 0 && string(env.Params) != "null" {
			var p fastListParams
			if decodeKnown(env.Params, &p) != nil || p.Cursor != "" || hasProtocolMeta(p.Meta) {
				return fastRequest{}, false
			}
		}
		return fastRequest{id: env.ID, method: env.Method}, true
	}
	return fastRequest{}, false
}

// fastCall runs one tools/call through dispatch and writes its answer as the SDK path would.
func (g *Gateway) fastCall(w http.ResponseWriter, r *http.Request, s *session, id json.RawMessage, tool string, args, meta json.RawMessage) {
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	defer s.track(string(id), cancel)()
	ci := callInfo{via: "mcp", role: s.role, session: s.id, tool: tool, args: args}
	out, err := g.dispatch(ctx, &ci, func(ctx context.Context, rt *route) (json.RawMessage, error) {
		return rt.backend.forward(ctx, rt, ci.role, args, stampClock(ctx, meta))
	})
	result := out.raw
	var berr *backendError
	switch {
	case err == nil:
		writeAnswer(w, id, "result", result)
	case errors.Is(err, ErrToolDisabled):
		res, _ := json.Marshal(errorResult(err))
		writeAnswer(w, id, "result", res)
	case errors.As(err, &berr):
		writeAnswer(w, id, "error", berr.raw)
	case errors.Is(err, ErrToolNotFound):
		writeAnswer(w, id, "error", rpcError(jsonrpc.CodeInvalidParams, err))
	default:
		writeAnswer(w, id, "error", rpcError(jsonrpc.CodeInternalError, err))
	}
}

// cancelFast cancels the fast-path call a notifications/cancelled names.
func (g *Gateway) cancelFast(s *session, params json.RawMessage) {
	var p struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(params, &p) == nil && len(p.RequestID) > 0 {
		s.cancel(string(p.RequestID))
	}
}

// fastMeta returns the _meta object of a forwarded call: the caller's, without a progress
// token, with the session's role and id stamped over whatever the caller set. It reports false
// for a _meta of the sessionless protocol.
func fastMeta(s *session, raw json.RawMessage) (json.RawMessage, bool) {
	if len(raw) == 0 || string(raw) == "null" {
		return append(append([]byte{'{'}, s.meta...), '}'), true
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(raw, &m) != nil || hasProtocolKey(m) {
		return nil, false
	}
	delete(m, "progressToken")
	delete(m, MetaRole)
	delete(m, MetaSession)
	if len(m) == 0 {
		return append(append([]byte{'{'}, s.meta...), '}'), true
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, false
	}
	b = append(b[:len(b)-1], ',')
	return append(append(b, s.meta...), '}'), true
}

func hasProtocolMeta(raw json.RawMessage) bool {
	if len(raw) == 0 || string(raw) == "null" {
		return false
	}
	var m map[string]json.RawMessage
	return json.Unmarshal(raw, &m) != nil || hasProtocolKey(m)
}

func hasProtocolKey(m map[string]json.RawMessage) bool {
	for k := range m {
		if strings.HasPrefix(k, metaProtocolPrefix) {
			return true
		}
	}
	return false
}

// validID reports whether id is a JSON-RPC request id: a string or a number.
func validID(id json.RawMessage) bool {
	if len(id) == 0 {
		return false
	}
	c := id[0]
	return c == '"' || c == '-' || (c >= '0' && c <= '9')
}

// decodeKnown decodes one JSON value into v, refusing fields v does not have, as the SDK reads
// a message: with the same decoder (github.com/segmentio/encoding/json), keys matched case
// for case (encoding/json would take "Method" for "method", which the SDK refuses), nothing
// after the value, and nesting bounded. The fast path must never take what the SDK refuses.
func decodeKnown(data []byte, v any) error {
	if tooDeep(data, maxDepth) {
		return errors.New("nested too deep")
	}
	rest, err := sjson.Parse(data, v, sjson.DisallowUnknownFields|sjson.DontMatchCaseInsensitiveStructFields)
	if err != nil {
		return err
	}
	if len(bytes.TrimLeft(rest, " \t\r\n")) > 0 {
		return errors.New("trailing data")
	}
	return nil
}

// maxDepth is the nesting of JSON objects and arrays the SDK accepts in a message.
const maxDepth = 1000

// tooDeep reports whether data nests objects and arrays deeper than max, outside strings.
func tooDeep(data []byte, max int) bool {
	depth, inString, escaped := 0, false, false
	for _, c := range data {
		switch {
		case inString && escaped:
			escaped = false
		case inString && c == '\\':
			escaped = true
		case inString && c == '"':
			inString = false
		case inString:
		case c == '"':
			inString = true
		case c == '{' || c == '[':
			if depth++; depth > max {
				return true
			}
		case c == '}' || c == ']':
			depth--
		}
	}
	return false
}

// rpcError is the JSON of a JSON-RPC error object.
func rpcError(code int64, err error) json.RawMessage {
	b, _ := json.Marshal(&jsonrpc.Error{Code: code, Message: err.Error()})
	return b
}

// writeAnswer writes the JSON-RPC response with id whose member key ("result" or "error") is
// value, as one JSON body, the way the SDK answers with JSONResponse.
func writeAnswer(w http.ResponseWriter, id json.RawMessage, key string, value json.RawMessage) {
	buf := make([]byte, 0, len(id)+len(value)+40)
	buf = append(buf, `{"jsonrpc":"2.0","id":`...)
	buf = append(buf, id...)
	buf = append(buf, `,"`...)
	buf = append(buf, key...)
	buf = append(buf, `":`...)
	buf = append(buf, value...)
	buf = append(buf, '}')
	h := w.Header()
	h["Content-Type"] = []string{"application/json"}
	h["Cache-Control"] = []string{"no-cache, no-transform"}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(buf)
}
