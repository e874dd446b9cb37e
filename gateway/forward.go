package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"time"

	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The backend half of the fast path: a tools/call forwarded as bytes over the backend's pooled
// HTTP connections, on the MCP session the SDK client opened, and its answer read back without
// decoding the result.

// Bounds of the fast path's backend side.
const (
	maxBackendAnswer = 64 << 20 // bytes of one backend answer, JSON body or event stream
	cancelTimeout    = 2 * time.Second
)

// MCP streamable HTTP header names and the first protocol version without sessions, whose
// requests the fast path leaves to the SDK.
const (
	headerSessionID       = "Mcp-Session-Id"
	headerProtocolVersion = "Mcp-Protocol-Version"
	headerMethod          = "Mcp-Method"
	sessionlessProtocol   = "2026-07-28"
)

// errAnswerTooLarge is a backend answer over maxBackendAnswer.
var errAnswerTooLarge = fmt.Errorf("answer larger than %d bytes", maxBackendAnswer)

// backendError is the JSON-RPC error a backend answered a forwarded call with, kept as its
// bytes so that the fast path relays it unchanged.
type backendError struct {
	raw json.RawMessage
	err *jsonrpc.Error
}

func (e *backendError) Error() string { return e.err.Error() }
func (e *backendError) Unwrap() error { return e.err }

// rpcMessage is any JSON-RPC message a backend sends on a forwarded call's answer.
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Result  json.RawMessage `json:"result"`
	Error   json.RawMessage `json:"error"`
}

// forward sends tools/call of r's tool with the raw arguments (a JSON object or nil) and the
// raw _meta object to the backend, and returns the raw CallToolResult. It keeps call's rules:
// a backend that cannot be reached fails at once with ErrBackendUnavailable naming it, a
// backend that forgot the session is reconnected once and the call sent again, and a JSON-RPC
// error of the backend is returned as a *backendError. A backend session the fast path cannot
// address (none, or the sessionless protocol) goes through the SDK client instead.
func (b *backend) forward(ctx context.Context, r *route, role string, args, meta json.RawMessage) (json.RawMessage, error) {
	for retried := false; ; retried = true {
		cs, err := b.live()
		if err != nil {
			signal(b.pokec)
			return nil, err
		}
		sid, version := cs.ID(), ""
		if ir := cs.InitializeResult(); ir != nil {
			version = ir.ProtocolVersion
		}
		if sid == "" || version == "" || version >= sessionlessProtocol {
			return b.forwardSDK(ctx, r, args, meta)
		}
		id := b.nextID()
		b.inflight.Add(1)
		res, err := b.post(ctx, sid, version, role, id, callBody(id, r.toolJSON, args, meta))
		b.inflight.Add(-1)
		switch {
		case err == nil:
			b.answered()
			return res, nil
		case ctx.Err() != nil:
			b.cancelAsync(ctx, sid, version, id)
			return nil, fmt.Errorf("server %s: call %s: %w", b.name, r.tool.Name, ctx.Err())
		case errors.As(err, new(*backendError)):
			b.answered()
			return nil, err
		case errors.Is(err, mcp.ErrSessionMissing) && !retried:
			// The backend restarted and forgot our session before handling the call: reconnect
			// once, bounded, and send it again.
			b.drop(cs, err)
			if rerr := b.reconnect(ctx); rerr == nil {
				continue
			}
		}
		b.markDown(cs, err)
		return nil, fmt.Errorf("server %s: %w: %v", b.name, ErrBackendUnavailable, err)
	}
}

// forwardSDK is forward through the SDK client session.
func (b *backend) forwardSDK(ctx context.Context, r *route, args, meta json.RawMessage) (json.RawMessage, error) {
	var m mcp.Meta
	if err := json.Unmarshal(meta, &m); err != nil {
		return nil, fmt.Errorf("server %s: _meta: %w", b.name, err)
	}
	res, err := b.call(ctx, r.tool.Name, args, m)
	if err != nil {
		var werr *jsonrpc.Error
		if errors.As(err, &werr) {
			raw, _ := json.Marshal(werr)
			return nil, &backendError{raw: raw, err: werr}
		}
		return nil, err
	}
	if res.Content == nil {
		res.Content = []mcp.Content{}
	}
	return json.Marshal(res)
}

// nextID returns a fresh JSON-RPC id (as JSON) for a forwarded call. Strings keep it apart
// from the SDK client's numeric ids on the same session.
func (b *backend) nextID() []byte {
	return append(strconv.AppendUint([]byte(`"agentenv-`), b.ids.Add(1), 10), '"')
}

// callBody is the tools/call request of the backend tool named by toolJSON.
func callBody(id, toolJSON, args, meta []byte) []byte {
	if len(args) == 0 {
		args = []byte("{}")
	}
	n := len(id) + len(toolJSON) + len(args) + len(meta) + 96
	buf := make([]byte, 0, n)
	buf = append(buf, `{"jsonrpc":"2.0","id":`...)
	buf = append(buf, id...)
	buf = append(buf, `,"method":"tools/call","params":{"name":`...)
	buf = append(buf, toolJSON...)
	buf = append(buf, `,"arguments":`...)
	buf = append(buf, args...)
	buf = append(buf, `,"_meta":`...)
	buf = append(buf, meta...)
	buf = append(buf, `}}`...)
	return buf
}

// post sends one JSON-RPC request on session sid and returns the raw result of the response
// with the request's id, read from a JSON body or an event stream. A 404 is
// mcp.ErrSessionMissing.
func (b *backend) post(ctx context.Context, sid, version, role string, id, body []byte) (json.RawMessage, error) {
	resp, err := b.send(ctx, sid, version, role, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusNotFound:
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		return nil, fmt.Errorf("session %s: %w", sid, mcp.ErrSessionMissing)
	default:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return nil, fmt.Errorf("status %d: %s", resp.StatusCode, bytes.TrimSpace(msg))
	}
	limited := io.LimitReader(resp.Body, maxBackendAnswer+1)
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		data, err := io.ReadAll(limited)
		if err != nil {
			return nil, fmt.Errorf("read answer: %w", err)
		}
		if len(data) > maxBackendAnswer {
			return nil, errAnswerTooLarge
		}
		var m rpcMessage
		if err := json.Unmarshal(data, &m); err != nil {
			return nil, fmt.Errorf("answer: %w", err)
		}
		if m.Method != "" || !bytes.Equal(m.ID, id) {
			return nil, fmt.Errorf("answer is not the response to request %s", id)
		}
		return answer(m)
	case "text/event-stream":
		return b.readStream(ctx, sid, version, id, limited)
	default:
		return nil, fmt.Errorf("answer of content type %q", ct)
	}
}

// send POSTs one JSON-RPC message on session sid.
func (b *backend) send(ctx context.Context, sid, version, role string, body []byte) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, b.url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header = http.Header{
		"Content-Type":        {"application/json"},
		"Accept":              {"application/json, text/event-stream"},
		headerSessionID:       {sid},
		headerProtocolVersion: {version},
	}
	if role != "" {
		req.Header[RoleHeader] = []string{role}
	}
	if vt := virtualTimeOf(ctx); vt != "" {
		req.Header[VirtualTimeHeader] = []string{vt}
	}
	return b.rawc.Do(req)
}

// answer returns a response's result, or its error as a *backendError.
func answer(m rpcMessage) (json.RawMessage, error) {
	if len(m.Error) > 0 && string(m.Error) != "null" {
		werr := new(jsonrpc.Error)
		if err := json.Unmarshal(m.Error, werr); err != nil {
			return nil, fmt.Errorf("answer error: %w", err)
		}
		return nil, &backendError{raw: m.Error, err: werr}
	}
	if len(m.Result) == 0 {
		return nil, errors.New("answer has neither result nor error")
	}
	return m.Result, nil
}

// readStream reads an event stream until the response with id. Notifications on it are
// dropped, as the SDK client drops them for the gateway (progress is not relayed); a request
// of the backend is answered as the gateway's SDK client would: ping with an empty result, an
// empty roots/list, and "method not found" for anything else (the gateway declares no sampling
// or elicitation).
func (b *backend) readStream(ctx context.Context, sid, version string, id []byte, body io.Reader) (json.RawMessage, error) {
	rd := bufio.NewReaderSize(body, 16<<10)
	var data []byte
	read := 0
	for {
		line, err := rd.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// a long data line: gather it whole
			full := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = rd.ReadSlice('\n')
				full = append(full, line...)
			}
			line = full
		}
		read += len(line)
		if read > maxBackendAnswer {
			return nil, errAnswerTooLarge
		}
		if err != nil && len(line) == 0 {
			if err == io.EOF {
				return nil, errors.New("event stream ended before the answer")
			}
			return nil, fmt.Errorf("read event stream: %w", err)
		}
		line = bytes.TrimRight(line, "\r\n")
		switch {
		case len(line) == 0: // end of an event
			if len(data) == 0 {
				continue
			}
			var m rpcMessage
			if jerr := json.Unmarshal(data, &m); jerr != nil {
				return nil, fmt.Errorf("event: %w", jerr)
			}
			data = data[:0]
			switch {
			case m.Method != "" && len(m.ID) > 0:
				b.replyAsync(ctx, sid, version, m)
			case m.Method != "": // a notification
			case bytes.Equal(m.ID, id):
				return answer(m)
			}
		case bytes.HasPrefix(line, []byte("data:")):
			v := bytes.TrimPrefix(line[5:], []byte(" "))
			if len(data) > 0 {
				data = append(data, '\n')
			}
			data = append(data, v...)
		}
		if err != nil { // the last line had no newline: the stream ended
			return nil, errors.New("event stream ended before the answer")
		}
	}
}

// replyAsync answers a backend's request m on session sid, in the background, bounded.
func (b *backend) replyAsync(ctx context.Context, sid, version string, m rpcMessage) {
	var reply []byte
	switch m.Method {
	case "ping":
		reply = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{}}`, m.ID)
	case "roots/list":
		reply = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"result":{"roots":[]}}`, m.ID)
	default:
		msg, _ := json.Marshal("method not found: " + m.Method)
		reply = fmt.Appendf(nil, `{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":%s}}`, m.ID, jsonrpc.CodeMethodNotFound, msg)
	}
	b.notifyAsync(ctx, sid, version, reply)
}

// cancelAsync tells the backend that the forwarded call id was cancelled.
func (b *backend) cancelAsync(ctx context.Context, sid, version string, id []byte) {
	b.notifyAsync(ctx, sid, version,
		fmt.Appendf(nil, `{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":%s,"reason":"cancelled by the caller"}}`, id))
}

// notifyAsync POSTs msg (a notification or a response) on session sid in the background, on a
// context detached from ctx and bounded.
func (b *backend) notifyAsync(ctx context.Context, sid, version string, msg []byte) {
	b.wg.Go(func() {
		cctx, cancel := cleanup.Context(ctx, cancelTimeout)
		defer cancel()
		resp, err := b.send(cctx, sid, version, "", msg)
		if err != nil {
			b.log.Debug("backend message not sent", "err", err)
			return
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			b.log.Debug("backend refused a message", "status", resp.StatusCode)
		}
	})
}
