// Package envsdk makes a Go env server a few lines. A [Server] speaks the anchor's env protocol
// (see package envproto): typed MCP tools at /mcp (streamable HTTP), the env card at
// /.well-known/agent-env.json, the JSON-RPC 2.0 data plane at POST /agentenv and a liveness
// probe at /healthz:
//
//	s := envsdk.New(envsdk.Options{Name: "echo"})
//	envsdk.AddTool(s, "echo", "Echo the text back.",
//		func(ctx context.Context, in struct{ Text string `json:"text"` }) (struct{ Text string `json:"text"` }, error) {
//			return struct{ Text string `json:"text"` }{in.Text}, nil
//		})
//	s.HandleReset(func(ctx context.Context) error { return nil })
//	err := s.Serve(ctx, ":8080") // returns when ctx ends, after a bounded graceful shutdown
//
// The same tools can be served over stdin/stdout with [Server.ServeStdio].
//
// Register tools and handlers before serving: the card is computed on every request, but the
// data plane handlers are not guarded for concurrent registration and serving.
package envsdk

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"slices"
	"sync"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/internal/httpserve"
)

// HealthPath is where a [Server] answers liveness probes.
const HealthPath = "/healthz"

// Options configure a [Server]. Zero values are defaults.
type Options struct {
	// Name is the env's name, on the card and as the MCP implementation name.
	Name string
	// Description is a one-line description for the card.
	Description string
	// Logger receives the server's logs; nil discards them. Over stdio it must not write to
	// stdout.
	Logger *slog.Logger
	// MaxSessions caps the MCP sessions open at once on [Server.Handler]: an initialize beyond
	// it gets 503 and a JSON-RPC error; a session that closes, or idles for SessionTimeout,
	// frees its slot. Default 256, negative for no cap.
	MaxSessions int
	// SessionTimeout closes an MCP session idle this long; default 1 h, negative for never.
	SessionTimeout time.Duration
}

// DefaultSessionTimeout is the default of [Options.SessionTimeout].
const DefaultSessionTimeout = time.Hour

// Server is an env server: MCP tools, the card and the data plane. Create it with [New]; it is
// safe for concurrent use once serving.
type Server struct {
	name string
	desc string
	log  *slog.Logger
	mcp  *mcp.Server

	maxSessions    int
	sessionTimeout time.Duration

	mu    sync.Mutex
	tools []envproto.Tool

	reset func(context.Context) error
	add   func(context.Context, []envproto.Part) error
	get   func(context.Context, envproto.GetParams) ([]envproto.Part, error)
}

// New returns a server with no tools and no data plane handlers.
func New(opts Options) *Server {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	name := opts.Name
	if name == "" {
		name = "env"
	}
	return &Server{
		name: name,
		desc: opts.Description,
		log:  log.With("env", name),

		maxSessions:    opts.MaxSessions,
		sessionTimeout: opts.SessionTimeout,
		mcp: mcp.NewServer(&mcp.Implementation{Name: name, Version: envproto.Version},
			&mcp.ServerOptions{Logger: log, Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}}}),
	}
}

// AddTool registers a typed tool. Its input schema is inferred from In (a struct, whose fields
// take descriptions from `jsonschema` tags) and its output schema from Out; both are served over
// MCP and the input schema is also listed on the card. An error h returns is reported to the
// caller as a tool error (isError), not a protocol error. AddTool panics if In has no object
// schema, as registering such a tool is a programming error.
func AddTool[In, Out any](s *Server, name, description string, h func(ctx context.Context, in In) (Out, error)) {
	rt := reflect.TypeFor[In]()
	if rt.Kind() == reflect.Pointer {
		rt = rt.Elem()
	}
	schema, err := jsonschema.ForType(rt, &jsonschema.ForOptions{})
	if err != nil {
		panic(fmt.Sprintf("envsdk: tool %q: input schema: %v", name, err))
	}
	raw, err := json.Marshal(schema)
	if err != nil {
		panic(fmt.Sprintf("envsdk: tool %q: marshal input schema: %v", name, err))
	}
	tool := &mcp.Tool{Name: name, Description: description, InputSchema: schema}
	mcp.AddTool(s.mcp, tool, func(ctx context.Context, _ *mcp.CallToolRequest, in In) (*mcp.CallToolResult, Out, error) {
		out, err := h(ctx, in)
		return nil, out, err
	})

	s.mu.Lock()
	defer s.mu.Unlock()
	s.tools = slices.DeleteFunc(s.tools, func(t envproto.Tool) bool { return t.Name == name })
	s.tools = append(s.tools, envproto.Tool{Name: name, Description: description, InputSchema: raw})
	slices.SortFunc(s.tools, func(a, b envproto.Tool) int { return cmp.Compare(a.Name, b.Name) })
}

// HandleReset sets the handler of data/reset, which clears all of the env's state.
func (s *Server) HandleReset(h func(ctx context.Context) error) { s.reset = h }

// HandleAdd sets the handler of data/add, which adds parts to the env's state. The parts are
// validated before h is called: there is at least one and each has exactly the field its kind
// names. If h returns an error wrapping an *envproto.Error, that error's code and message are
// sent (use [envproto.CodeInvalidParams] for parts the env cannot take); any other error is sent
// as an internal error.
func (s *Server) HandleAdd(h func(ctx context.Context, parts []envproto.Part) error) { s.add = h }

// HandleGet sets the handler of data/get, which exports the env's state as parts. Errors are
// sent as for [Server.HandleAdd].
func (s *Server) HandleGet(h func(ctx context.Context, p envproto.GetParams) ([]envproto.Part, error)) {
	s.get = h
}

// MCPServer returns the underlying MCP server, for what envsdk does not wrap (prompts,
// resources, untyped tools). Tools added through it are not listed on the card.
func (s *Server) MCPServer() *mcp.Server { return s.mcp }

// Methods returns the data plane methods that have a handler, in protocol order.
func (s *Server) Methods() []string {
	methods := []string{}
	if s.reset != nil {
		methods = append(methods, envproto.MethodReset)
	}
	if s.add != nil {
		methods = append(methods, envproto.MethodAdd)
	}
	if s.get != nil {
		methods = append(methods, envproto.MethodGet)
	}
	return methods
}

// Card returns the env card in the anchor's shape: name, protocolVersion, the data plane's url,
// the MCP endpoint as an additionalInterfaces entry, and capabilities: tools with their input
// schemas and operations, the data plane methods that have a handler. A server without any
// (db-mcp) advertises operations [], no data plane, so that a gateway in front of it and one
// env server still has exactly one.
func (s *Server) Card() envproto.Card {
	s.mu.Lock()
	tools := slices.Clone(s.tools)
	s.mu.Unlock()
	if tools == nil {
		tools = []envproto.Tool{}
	}
	return envproto.Card{
		Name:                 s.name,
		Description:          s.desc,
		ProtocolVersion:      envproto.Version,
		URL:                  envproto.DataPath,
		PreferredTransport:   envproto.TransportJSONRPC,
		AdditionalInterfaces: []envproto.Interface{{URL: envproto.MCPPath, Transport: envproto.TransportMCP}},
		Capabilities:         envproto.Capabilities{Tools: tools, Operations: s.Methods()},
	}
}

// Handler returns the HTTP handler serving the card, /mcp, the data plane and /healthz.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+envproto.CardPath, func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, s.Card())
	})
	mux.Handle(envproto.MCPPath, MCPHandler(s.mcp, s.log, s.maxSessions, s.sessionTimeout, true))
	mux.HandleFunc(envproto.DataPath, s.serveData)
	mux.HandleFunc("GET "+HealthPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}

// writeJSON writes v as a JSON response with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	body, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "encode response", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(body, '\n'))
}

// MCPHandler serves srv over streamable HTTP with at most maxSessions sessions open at once
// (0 takes the default 256, negative means no cap) and closes a session idle for
// sessionTimeout (0 takes [DefaultSessionTimeout], negative means never). jsonResponse answers
// a request with one JSON body rather than an event stream. A nil logger discards.
func MCPHandler(srv *mcp.Server, log *slog.Logger, maxSessions int, sessionTimeout time.Duration, jsonResponse bool) http.Handler {
	if maxSessions == 0 {
		maxSessions = httpserve.DefaultMaxSessions
	}
	if sessionTimeout == 0 {
		sessionTimeout = DefaultSessionTimeout
	}
	if sessionTimeout < 0 {
		sessionTimeout = 0
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
		&mcp.StreamableHTTPOptions{Logger: log, JSONResponse: jsonResponse, SessionTimeout: sessionTimeout})
	return httpserve.SessionCap(h, maxSessions, func() int {
		n := 0
		for range srv.Sessions() {
			n++
		}
		return n
	})
}
