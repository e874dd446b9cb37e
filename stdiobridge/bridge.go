// Package stdiobridge serves one stdio MCP server over streamable HTTP. It lists the server's
// tools and serves them at /mcp, forwarding every call over its one stdio session (concurrent
// HTTP clients are multiplexed onto it). It follows the server's tools/list_changed
// notifications, publishes an env card and answers /healthz.
//
// The server is any [Process]: [Run] starts a child process of its own (the `agentenv
// stdio-bridge` command, in a deployment's container); [Serve] bridges one given to it, such as
// a process attached in a sandbox through the lifecycle manager, and serves it on this host
// behind a bearer token of its own.
//
// A server that exits is reported and not restarted: /healthz answers 503 and every call,
// pending or later, fails at once with an error wrapping [ErrExited]. When the bridge ends, the
// server is stopped (a child: end of stdin, then SIGTERM, then SIGKILL to its process group,
// each after a bound, so nothing it started is left running; any other Process: its Close).
package stdiobridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/envsdk"
	"github.com/agentenv/agentenv/internal/httpserve"
)

// Default bounds of [Options].
const (
	DefaultStartTimeout = 60 * time.Second
	DefaultStopTimeout  = 5 * time.Second
)

// exitGrace bounds how long a call whose session broke waits to learn that the child exited.
const exitGrace = 2 * time.Second

// relistTimeout bounds one tools/list round after a list_changed notification.
const relistTimeout = 30 * time.Second

// Options configure [Run]. Zero values are documented defaults.
type Options struct {
	// Listen is the HTTP address (host:port) to serve on; port 0 picks one (see Ready).
	Listen string
	// Command is the stdio server to run: the program and its arguments.
	Command []string
	// Env holds KEY=VALUE pairs added to the bridge's own environment for the child.
	Env []string
	// Logger receives the bridge's logs, including the child's stderr at Debug; nil discards.
	Logger *slog.Logger
	// Ready, if set, is called with the bound address once the bridge serves.
	Ready func(addr string)
	// StartTimeout bounds starting the child, its initialize and its first tools/list;
	// zero means DefaultStartTimeout.
	StartTimeout time.Duration
	// StopTimeout bounds each step of stopping the child; zero means DefaultStopTimeout.
	StopTimeout time.Duration
}

// Run starts the child, serves its tools until ctx ends, then stops the child. It returns an
// error if the child cannot be started or initialized, or the address cannot be served; after
// the child has been served, it returns nil when ctx ends (a child that exited meanwhile was
// reported in the log).
func Run(ctx context.Context, opts Options) error {
	if len(opts.Command) == 0 {
		return errors.New("stdiobridge: no command")
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "stdio-bridge")
	startTimeout := orDefault(opts.StartTimeout, DefaultStartTimeout)

	ch, err := startChild(opts.Command, opts.Env, log, orDefault(opts.StopTimeout, DefaultStopTimeout))
	if err != nil {
		return fmt.Errorf("stdiobridge: %w", err)
	}
	b, err := start(ctx, ch, log, startTimeout)
	if err != nil {
		return err
	}
	defer b.close()

	ln, err := httpserve.Listen(ctx, opts.Listen, 0)
	if err != nil {
		return fmt.Errorf("stdiobridge: %w", err)
	}
	defer b.followUntil(ctx)()
	if opts.Ready != nil {
		opts.Ready(ln.Addr().String())
	}
	return envsdk.ServeHandler(ctx, ln, b.handler(), b.server, log)
}

// start connects to p's MCP server and lists its tools within startTimeout. On error p is
// closed.
func start(ctx context.Context, p Process, log *slog.Logger, startTimeout time.Duration) (*bridge, error) {
	b := &bridge{proc: newProc(p, log), log: log, changed: make(chan struct{}, 1)}
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	stopOnExit := b.proc.afterExit(cancel)
	defer stopOnExit()
	if err := b.connect(sctx); err != nil {
		if b.proc.waitExit(100 * time.Millisecond) {
			err = fmt.Errorf("initialize stdio server: %w", b.proc.exitErr())
		}
		b.close()
		return nil, fmt.Errorf("stdiobridge: %w", err)
	}
	if err := b.sync(sctx); err != nil {
		b.close()
		return nil, fmt.Errorf("stdiobridge: %w", err)
	}
	return b, nil
}

// followUntil follows the server's list_changed notifications until ctx ends or the returned
// function is called, which waits for the follower to end (bounded: a re-list in flight ends
// with its context).
func (b *bridge) followUntil(ctx context.Context) func() {
	followCtx, stopFollow := context.WithCancel(ctx)
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		b.follow(followCtx)
	}()
	return func() {
		stopFollow()
		<-followed
	}
}

// orDefault returns d, or def if d is not positive.
func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// bridge is one stdio server, its client session and the HTTP-facing MCP server mirroring its
// tools.
type bridge struct {
	proc    *proc
	log     *slog.Logger
	session *mcp.ClientSession
	server  *mcp.Server
	changed chan struct{} // signalled by the child's tools/list_changed

	mu    sync.Mutex
	tools []*mcp.Tool // what the child listed last, sorted by name
}

// connect initializes the MCP session with the child and creates the server that mirrors it.
func (b *bridge) connect(ctx context.Context) error {
	client := mcp.NewClient(&mcp.Implementation{Name: "agentenv-stdio-bridge", Version: envproto.Version},
		&mcp.ClientOptions{
			Logger: b.log,
			ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) {
				select {
				case b.changed <- struct{}{}:
				default: // a re-list is already due
				}
			},
		})
	cs, err := client.Connect(ctx, &mcp.IOTransport{Reader: b.proc.reader(), Writer: b.proc.writer()}, nil)
	if err != nil {
		return fmt.Errorf("initialize stdio server: %w", err)
	}
	b.session = cs
	impl := &mcp.Implementation{Name: "stdio-server", Version: "unknown"}
	var instructions string
	if res := cs.InitializeResult(); res != nil {
		if res.ServerInfo != nil {
			impl = res.ServerInfo
		}
		instructions = res.Instructions
	}
	b.server = mcp.NewServer(impl, &mcp.ServerOptions{
		Logger:       b.log,
		Instructions: instructions,
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	return nil
}

// sync lists the child's tools and makes the server's tools the same.
func (b *bridge) sync(ctx context.Context) error {
	var tools []*mcp.Tool
	for t, err := range b.session.Tools(ctx, nil) {
		if err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		tools = append(tools, t)
	}
	slices.SortFunc(tools, func(a, b *mcp.Tool) int { return strings.Compare(a.Name, b.Name) })

	b.mu.Lock()
	defer b.mu.Unlock()
	var gone []string
	for _, old := range b.tools {
		if !slices.ContainsFunc(tools, func(t *mcp.Tool) bool { return t.Name == old.Name }) {
			gone = append(gone, old.Name)
		}
	}
	b.server.RemoveTools(gone...)
	kept := tools[:0]
	for _, t := range tools {
		if err := b.addTool(t); err != nil {
			b.log.Warn("stdio server tool not served", "tool", t.Name, "err", err)
			continue
		}
		kept = append(kept, t)
	}
	b.tools = kept
	b.log.Info("tools listed", "count", len(kept))
	return nil
}

// addTool serves t, forwarding its calls. The SDK panics on a tool it cannot serve (an input
// schema that is not an object); a child's bad tool is skipped rather than taking the bridge down.
func (b *bridge) addTool(t *mcp.Tool) (err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%v", v)
		}
	}()
	b.server.AddTool(t, b.forward(t.Name))
	return nil
}

// forward returns the handler that calls tool name on the child.
func (b *bridge) forward(name string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if err := b.proc.exitErr(); err != nil {
			return nil, err
		}
		cctx, cancel := context.WithCancel(ctx)
		defer cancel()
		stop := b.proc.afterExit(cancel)
		defer stop()
		params := &mcp.CallToolParams{Meta: req.Params.Meta, Name: name}
		if len(req.Params.Arguments) > 0 {
			params.Arguments = req.Params.Arguments
		}
		res, err := b.session.CallTool(cctx, params)
		if err == nil {
			return res, nil
		}
		// A JSON-RPC error the child sent is its answer, passed on with its code; any other
		// error means the session broke, most likely because the child is exiting.
		var werr *jsonrpc.Error
		answered := errors.As(err, &werr) && !errors.Is(err, mcp.ErrConnectionClosed)
		if !answered && ctx.Err() == nil {
			b.proc.waitExit(exitGrace)
		}
		if xerr := b.proc.exitErr(); xerr != nil {
			return nil, xerr
		}
		if answered {
			return nil, werr
		}
		return nil, fmt.Errorf("call %s: %w", name, err)
	}
}

// follow re-lists the child's tools after each tools/list_changed until ctx ends or the child
// exits.
func (b *bridge) follow(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-b.proc.p.Done():
			return
		case <-b.changed:
		}
		lctx, cancel := context.WithTimeout(ctx, relistTimeout)
		if err := b.sync(lctx); err != nil && b.proc.exitErr() == nil {
			b.log.Warn("re-list tools after list_changed", "err", err)
		}
		cancel()
	}
}

// close stops the server, then ends the session with it.
func (b *bridge) close() {
	b.proc.stop()
	if b.session != nil {
		_ = b.session.Close()
	}
}

// handler serves /mcp, the card and /healthz.
func (b *bridge) handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(envproto.MCPPath, envsdk.MCPHandler(b.server, b.log, 0, 0, false))
	mux.HandleFunc("GET "+envproto.CardPath, func(w http.ResponseWriter, r *http.Request) {
		body, err := json.Marshal(b.card())
		if err != nil {
			http.Error(w, "encode card", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(body)
	})
	mux.HandleFunc("GET "+envsdk.HealthPath, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := b.proc.exitErr(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = fmt.Fprintln(w, err)
			return
		}
		_, _ = fmt.Fprintln(w, "ok")
	})
	return mux
}

// card describes the child as an env: its tools, no data plane.
func (b *bridge) card() envproto.Card {
	b.mu.Lock()
	defer b.mu.Unlock()
	tools := []envproto.Tool{}
	for _, t := range b.tools {
		schema, err := json.Marshal(t.InputSchema)
		if err != nil {
			schema = nil
		}
		tools = append(tools, envproto.Tool{Name: t.Name, Description: t.Description, InputSchema: schema})
	}
	name := "stdio-server"
	if res := b.session.InitializeResult(); res != nil && res.ServerInfo != nil && res.ServerInfo.Name != "" {
		name = res.ServerInfo.Name
	}
	return envproto.Card{
		Name:                 name,
		ProtocolVersion:      envproto.Version,
		URL:                  envproto.DataPath,
		PreferredTransport:   envproto.TransportJSONRPC,
		AdditionalInterfaces: []envproto.Interface{{URL: envproto.MCPPath, Transport: envproto.TransportMCP}},
		Capabilities:         envproto.Capabilities{Tools: tools, Operations: []string{}},
	}
}
