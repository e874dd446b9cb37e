package envsdk

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"

	"github.com/agentenv/agentenv/envproto"
)

// MaxDataBodyBytes bounds the body of one data plane request; parts carry files inline.
const MaxDataBodyBytes = 64 << 20

// serveData serves POST /agentenv: one JSON-RPC 2.0 request per body. Errors are sent with
// HTTP 200 and a JSON-RPC error; a notification (no id) gets 204 and no body.
func (s *Server) serveData(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "the data plane takes POST", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxDataBodyBytes))
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeJSON(w, http.StatusOK, errorResponse(nil, envproto.CodeInvalidRequest, "request body too large"))
			return
		}
		writeJSON(w, http.StatusOK, errorResponse(nil, envproto.CodeParseError, "read request body"))
		return
	}
	resp, ok := s.handleData(r.Context(), body)
	if !ok {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// handleData runs one JSON-RPC request and returns its response, or false for a notification.
func (s *Server) handleData(ctx context.Context, body []byte) (envproto.Response, bool) {
	if !json.Valid(body) {
		return errorResponse(nil, envproto.CodeParseError, "parse error: body is not JSON"), true
	}
	trimmed := bytes.TrimLeft(body, " \t\r\n")
	switch trimmed[0] {
	case '{':
	case '[':
		return errorResponse(nil, envproto.CodeInvalidRequest, "batch requests are not supported"), true
	default:
		return errorResponse(nil, envproto.CodeInvalidRequest, "request must be a JSON object"), true
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(body, &fields); err != nil {
		return errorResponse(nil, envproto.CodeParseError, "parse error: "+err.Error()), true
	}
	id, hasID := fields["id"]
	if hasID {
		if !validID(id) {
			return errorResponse(nil, envproto.CodeInvalidRequest, "id must be a string, a number or null"), true
		}
		id = compact(id)
	}
	var version, method string
	if err := json.Unmarshal(fields["jsonrpc"], &version); err != nil || version != "2.0" {
		return errorResponse(id, envproto.CodeInvalidRequest, `jsonrpc must be "2.0"`), true
	}
	if err := json.Unmarshal(fields["method"], &method); err != nil || method == "" {
		return errorResponse(id, envproto.CodeInvalidRequest, "method must be a non-empty string"), true
	}
	params := fields["params"]
	if p := bytes.TrimSpace(params); len(p) > 0 && p[0] != '{' && p[0] != '[' && !bytes.Equal(p, []byte("null")) {
		return errorResponse(id, envproto.CodeInvalidRequest, "params must be an object or an array"), true
	}

	result, rpcErr := s.dispatch(ctx, method, params)
	if !hasID {
		return envproto.Response{}, false
	}
	if rpcErr != nil {
		return envproto.Response{JSONRPC: "2.0", ID: id, Error: rpcErr}, true
	}
	raw, err := json.Marshal(result)
	if err != nil {
		return errorResponse(id, envproto.CodeInternalError, "encode result: "+err.Error()), true
	}
	return envproto.Response{JSONRPC: "2.0", ID: id, Result: raw}, true
}

// dispatch calls the handler of method. A panicking handler is reported as an internal error.
func (s *Server) dispatch(ctx context.Context, method string, params json.RawMessage) (result any, rpcErr *envproto.Error) {
	log := s.log.With("op", method)
	defer func() {
		if v := recover(); v != nil {
			log.Error("data plane handler panicked", "panic", fmt.Sprint(v))
			result, rpcErr = nil, &envproto.Error{Code: envproto.CodeInternalError, Message: method + ": internal error"}
		}
	}()
	var err error
	switch method {
	case envproto.MethodReset:
		if s.reset == nil {
			break
		}
		if err = s.reset(ctx); err == nil {
			result = struct{}{}
		}
	case envproto.MethodAdd:
		if s.add == nil {
			break
		}
		var p envproto.AddParams
		if e := decodeParams(params, &p); e != nil {
			return nil, e
		}
		if e := validateParts(p.Parts); e != nil {
			return nil, e
		}
		if err = s.add(ctx, p.Parts); err == nil {
			result = struct{}{}
		}
	case envproto.MethodGet:
		if s.get == nil {
			break
		}
		var p envproto.GetParams
		if e := decodeParams(params, &p); e != nil {
			return nil, e
		}
		var parts []envproto.Part
		if parts, err = s.get(ctx, p); err == nil {
			if parts == nil {
				parts = []envproto.Part{}
			}
			result = envproto.GetResult{Parts: parts}
		}
	}
	if result == nil && err == nil {
		return nil, &envproto.Error{Code: envproto.CodeMethodNotFound, Message: fmt.Sprintf("method not found: %q", method)}
	}
	if err != nil {
		var e *envproto.Error
		if errors.As(err, &e) {
			log.Debug("data plane request refused", "err", err)
			return nil, e
		}
		log.Warn("data plane handler failed", "err", err)
		reason, _ := json.Marshal(map[string]string{"code": failReason(method)})
		return nil, &envproto.Error{Code: envproto.CodeServerError, Message: fmt.Sprintf("%s: %v", method, err), Data: reason}
	}
	log.Debug("data plane request served")
	return result, nil
}

// failReason names a failed method the way the env protocol's callers expect.
func failReason(method string) string {
	switch method {
	case envproto.MethodReset:
		return envproto.FailReset
	case envproto.MethodAdd:
		return envproto.FailAdd
	}
	return envproto.FailGet
}

// decodeParams decodes params into v; absent or null params leave v zero. Only objects fit.
func decodeParams(params json.RawMessage, v any) *envproto.Error {
	p := bytes.TrimSpace(params)
	if len(p) == 0 || bytes.Equal(p, []byte("null")) {
		return nil
	}
	if p[0] != '{' {
		return &envproto.Error{Code: envproto.CodeInvalidParams, Message: "params must be an object"}
	}
	if err := json.Unmarshal(p, v); err != nil {
		return &envproto.Error{Code: envproto.CodeInvalidParams, Message: "invalid params: " + err.Error()}
	}
	return nil
}

// validateParts checks that there is at least one part and that each is well formed
// ([envproto.Part.Validate]).
func validateParts(parts []envproto.Part) *envproto.Error {
	if len(parts) == 0 {
		return &envproto.Error{Code: envproto.CodeInvalidParams, Message: "parts: at least one part is required"}
	}
	for i := range parts {
		if err := parts[i].Validate(); err != nil {
			return &envproto.Error{Code: envproto.CodeInvalidParams, Message: fmt.Sprintf("parts[%d]: %v", i, err)}
		}
	}
	return nil
}

// validID reports whether raw is a JSON-RPC id: a string, a number or null.
func validID(raw json.RawMessage) bool {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return false
	}
	switch v.(type) {
	case string, float64, nil:
		return true
	}
	return false
}

// compact returns raw without insignificant whitespace.
func compact(raw json.RawMessage) json.RawMessage {
	var buf bytes.Buffer
	if err := json.Compact(&buf, raw); err != nil {
		return raw
	}
	return buf.Bytes()
}

// errorResponse returns a JSON-RPC error response; a nil id is sent as null.
func errorResponse(id json.RawMessage, code int, msg string) envproto.Response {
	return envproto.Response{JSONRPC: "2.0", ID: id, Error: &envproto.Error{Code: code, Message: msg}}
}
