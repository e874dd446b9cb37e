package termtools

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/httpserve"
)

// CloseTimeout bounds Endpoint.Close: calls still running after it are cut.
const CloseTimeout = 5 * time.Second

// Endpoint is an MCP server of the terminal tools, as Serve started it.
type Endpoint struct {
	URL   string       // the streamable HTTP MCP endpoint (http://host:port/mcp)
	Token string       // the bearer token every request must carry
	Close func() error // ends the server's sessions and calls within CloseTimeout
}

// Serve serves the terminal tools over t as a streamable HTTP MCP server on addr (such as
// "127.0.0.1:0"), refusing with 401 every request without Authorization: Bearer and the
// Endpoint's fresh random token, and writes each call and its result to tr (if not nil) as
// tool_call and tool_result lines. Calls run under ctx: they end when it ends; the server runs
// until Close.
func Serve(ctx context.Context, t agent.Terminal, tr *agent.Trajectory, addr string) (Endpoint, error) {
	if t == nil {
		return Endpoint{}, errors.New("termtools: no terminal")
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Endpoint{}, fmt.Errorf("termtools: token: %w", err)
	}
	token := hex.EncodeToString(b[:])

	base, cancel := context.WithCancel(ctx)
	srv := mcp.NewServer(&mcp.Implementation{Name: "agentenv-terminal", Version: "1"}, nil)
	var seq atomic.Int64
	for _, tool := range Tools() {
		srv.AddTool(&mcp.Tool{Name: tool.Name, Description: tool.Description, InputSchema: tool.Schema}, handler(base, t, tr, tool, &seq))
	}
	mh := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{JSONResponse: true})
	h := httpserve.SessionCap(mh, httpserve.DefaultMaxSessions, func() int {
		n := 0
		for range srv.Sessions() {
			n++
		}
		return n
	})

	ln, err := httpserve.Listen(ctx, addr, 0)
	if err != nil {
		cancel()
		return Endpoint{}, fmt.Errorf("termtools: %w", err)
	}
	hs := httpserve.New(bearer(token, h), httpserve.Limits{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(ln) // ends with ErrServerClosed on Close
	}()
	var once sync.Once
	var closeErr error
	closeFn := func() error {
		once.Do(func() {
			cancel() // running calls end
			for ss := range srv.Sessions() {
				_ = ss.Close()
			}
			sctx, scancel := cleanup.Context(ctx, CloseTimeout)
			defer scancel()
			err := hs.Shutdown(sctx)
			if err != nil {
				_ = hs.Close()
				if !errors.Is(err, context.DeadlineExceeded) {
					closeErr = fmt.Errorf("termtools: close: %w", err)
				}
			}
			select {
			case <-done:
			case <-time.After(CloseTimeout):
				closeErr = errors.New("termtools: close: the server did not stop")
			}
		})
		return closeErr
	}
	return Endpoint{URL: "http://" + ln.Addr().String() + "/mcp", Token: token, Close: closeFn}, nil
}

// bearer passes on only requests whose Authorization is "Bearer token"; others get 401.
func bearer(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agentenv-terminal"`)
			http.Error(w, "unauthorized: send Authorization: Bearer with the token agentenv handed over", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// handler is the MCP handler of tool over t: it decodes the arguments, makes the call and
// writes the call and its result to tr. A failed call is a tool error (isError), not a
// protocol error, so the agent reads why. The call ends when its request's or base ends.
func handler(base context.Context, t agent.Terminal, tr *agent.Trajectory, tool Tool, seq *atomic.Int64) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		defer context.AfterFunc(base, cancel)()
		id := "term-" + strconv.FormatInt(seq.Add(1), 10)
		raw := json.RawMessage(nil)
		if req != nil && req.Params != nil {
			raw = req.Params.Arguments
		}
		write(tr, agent.Line{Kind: agent.KindToolCall, Tool: tool.Name, CallID: id, Arguments: raw})
		start := time.Now()
		text, isError, err := call(ctx, t, tool, raw)
		if err != nil {
			text, isError = "error: "+err.Error(), true
		}
		write(tr, agent.Line{Kind: agent.KindToolResult, Tool: tool.Name, CallID: id, Text: text, IsError: isError, DurationMS: time.Since(start).Milliseconds()})
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, IsError: isError}, nil
	}
}

// call decodes raw as the arguments' JSON object and calls tool over t.
func call(ctx context.Context, t agent.Terminal, tool Tool, raw json.RawMessage) (string, bool, error) {
	args := map[string]any{}
	if a := strings.TrimSpace(string(raw)); a != "" && a != "null" {
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			return "", false, fmt.Errorf("arguments are not a JSON object: %w", err)
		}
	}
	return tool.Call(ctx, t, args)
}

func write(tr *agent.Trajectory, l agent.Line) {
	if tr != nil {
		tr.Write(l)
	}
}
