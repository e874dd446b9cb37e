// Package gateway is the MCP gateway of a deployment: one process in front of an env's MCP
// servers (the backends). It serves the union of their tools over MCP streamable HTTP at /mcp,
// the composed env card, /state, /step (a tool call without an MCP client), /trajectory (NDJSON
// of every tool call), per-role tool gating and the env data plane, all behind the deployment's
// bearer tokens.
//
// Tokens: the admin token ([Config.Token]) opens every route and may name any role with the
// AgentEnv-Role header. A role token ([Config.RoleTokens]) fixes its role: a request bearing one
// whose header names another role gets 403 (rather than being silently re-roled, so a forged
// header shows), it cannot use an MCP session another role opened, and it reaches /mcp and
// /step only; /tools/enable|disable, /state, /trajectory, the card and the data plane answer it
// 403. No token or an unknown one is 401. Tokens are compared as SHA-256 hashes in constant
// time, against every known token.
//
// Naming: a backend's tool keeps its name when no other backend has one of that name and is
// exposed as <server>__<tool> otherwise (policy "auto"); "prefix" always prefixes and "never"
// refuses a clash at start. A tool is never silently shadowed.
//
// Sessions: the gateway owns its MCP sessions (the go-sdk StreamableHTTPHandler serves them, so
// session ids, 404 after a session ends, DELETE and the protocol-version header follow the
// spec). It holds one client session per backend, shared by all of its own sessions, and stamps
// each forwarded call with the caller's role and session in _meta ("agentenv.io/role",
// "agentenv.io/session") and the AgentEnv-Role header.
//
// The fast path: a tools/call or tools/list of an initialized session is answered without the
// SDK's per-message decode and encode. The gateway reads the JSON-RPC envelope, the tool name
// and the session's role, forwards the raw arguments over the backend's kept-alive connections
// on the backend session it already holds, and relays the raw result (from a JSON body or an
// event stream); tools/list answers come from a per-role encoding cached until the tools or the
// role rules change. Everything else (initialize, notifications, batches, GET streams, DELETE,
// pagination, the sessionless protocol, anything unexpected) goes to the SDK unchanged. Role
// rules, naming, the call timeout, consistent mode and the trajectory are one path for both
// (dispatch).
//
// Consistent mode runs one call at a time per backend ([SerializeServer], the default) or
// across the gateway ([SerializeEnv]).
//
// A backend that dies makes its tools fail fast with [ErrBackendUnavailable]; a monitor pings it
// and reconnects when it comes back.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/httpserve"
)

// Error kinds of the gateway, tested with errors.Is.
var (
	// ErrBackendUnavailable means the backend serving a tool cannot be reached: it refused the
	// connection, closed its session or failed its health check.
	ErrBackendUnavailable = errors.New("backend unavailable")
	// ErrToolNotFound means no backend serves a tool of that name.
	ErrToolNotFound = errors.New("tool not found")
	// ErrToolDisabled means the tool is disabled for the caller's role.
	ErrToolDisabled = errors.New("tool disabled")
	// ErrNameClash means two backends serve a tool of the same name under policy "never", or a
	// prefixed name collides with another tool.
	ErrNameClash = errors.New("tool name clash")
)

// Naming policies of [Config.ToolNames].
const (
	NamesAuto   = "auto"
	NamesPrefix = "prefix"
	NamesNever  = "never"
)

// Modes of [Config.Mode].
const (
	ModePerformance = "performance"
	ModeConsistent  = "consistent"
)

// RoleHeader is the request header in which an admin-token caller names its role; absent means
// DefaultRole. With a role token the token's role holds, and a header naming another is 403.
const RoleHeader = "AgentEnv-Role"

// SessionHeader optionally names the caller's session on /step calls, for the trajectory.
const SessionHeader = "AgentEnv-Session"

// DefaultRole is the role of a caller that names none.
const DefaultRole = "default"

// Meta keys the gateway stamps on every forwarded tool call.
const (
	MetaRole    = "agentenv.io/role"
	MetaSession = "agentenv.io/session"
)

// Defaults of the zero Config.
const (
	DefaultCallTimeout    = 600 * time.Second
	DefaultConnectTimeout = 60 * time.Second
	DefaultSessionTimeout = time.Hour
)

// Backend is one MCP server behind the gateway.
type Backend struct {
	Name string // unique; letters, digits, '_', '-' and '.'
	URL  string // its MCP endpoint, e.g. http://notes:8080/mcp
	// Token, if set, is sent as Authorization: Bearer on every request to the backend: one
	// served on the gateway's own host behind a token of its own (a stdio server bridged in
	// the process, the terminal tools of a sandbox). A caller's token is never passed on.
	Token string
}

// Config configures a Gateway. Zero values are the documented defaults.
type Config struct {
	Name string // env name, the composed card's name
	// Token is the admin bearer token: every route but /healthz accepts it, and its holder
	// may name any role with the AgentEnv-Role header. Must not be empty.
	Token string
	// RoleTokens maps a role to its bearer token. A role token fixes its role: a request
	// bearing one acts as that role, one whose AgentEnv-Role header names another role gets
	// 403, and it may use /mcp, /step and /website/ only (403 elsewhere). Tokens must be distinct and
	// differ from Token.
	RoleTokens map[string]string
	Servers    []Backend // at least one, unless there are Websites
	// Services are HTTP services that are not MCP servers (the DB web UI), proxied at
	// /svc/<name>/ to their base URL with the admin token; names differ from the servers'.
	Services []Backend
	// Websites are the env's web apps, served at /website/<name>/ (website.go) to their base
	// URL; names differ from the servers' and services'. While there are any, the gateway
	// lists its own list_website_urls tool.
	Websites []Backend
	// PublicURL is the gateway's base URL as the env's components reach it (such as
	// http://gateway:8080), under which list_website_urls and /state give each website's URL;
	// without it they give the path alone.
	PublicURL string
	// Screenshots names servers of Servers that are Playwright MCP servers (the env's browser):
	// after each call to one of their [ScreenshotTools] the gateway calls their
	// [ScreenshotTool] and appends its image parts to the call's result (a text part saying why
	// when it fails; the call's own outcome stands), as the caller and the trajectory see it:
	// the screenshot is no call record of its own, and the call's duration includes it.
	Screenshots []string
	// ToolNames is the naming policy: "auto" (default), "prefix" or "never".
	ToolNames string
	// Mode is "performance" (default: tool calls run concurrently) or "consistent" (tool calls
	// are serialized within the scope of Serialize).
	Mode string
	// Serialize is the scope of consistent mode: "server" (default: one call at a time per
	// backend) or "env" (one call at a time across the gateway). See [SerializeServer].
	Serialize string
	// Roles maps a role to the tool patterns disabled for it; '*' matches any run of
	// characters. A pattern matches a tool's public name, its <server>__<tool> name or
	// the backend's own (bare) name, so a rule on a bare name still holds once a clash prefixes it.
	Roles map[string][]string
	// CallTimeout bounds one forwarded tool call; default 600 s.
	CallTimeout time.Duration
	// ConnectTimeout is the wall-clock deadline to reach every backend at start; default 60 s.
	ConnectTimeout time.Duration
	// SessionTimeout closes a gateway MCP session idle this long; default 1 h.
	SessionTimeout time.Duration
	// MaxConns caps the connections open at once on ListenAndServe's listener; default 4096,
	// negative for no cap.
	MaxConns int
	// MaxSessions caps the gateway MCP sessions open at once: an initialize beyond it gets 503
	// and a JSON-RPC error, and a session that closes (or idles out) frees its slot. Default
	// 256, negative for no cap.
	MaxSessions int
	// ReadTimeout, WriteTimeout and IdleTimeout bound ListenAndServe's server (defaults 60 s,
	// 60 s, 120 s; negative for none). Requests on /mcp are exempt from the read deadline once
	// their body is read and from the write deadline: its event stream and long tool calls
	// are bounded by SessionTimeout and CallTimeout instead.
	ReadTimeout, WriteTimeout, IdleTimeout time.Duration
	// TrajectoryBytes bounds the encoded calls /trajectory keeps in memory (at most 100 000
	// calls either way); the oldest are dropped beyond it and /state counts them. Default
	// 64 MiB.
	TrajectoryBytes int
	// AllowedOrigins lists the browser origins (scheme://host[:port]) allowed besides
	// localhost ones; a request with another Origin header gets 403.
	AllowedOrigins []string
	// Logger receives the gateway's logs; nil discards them.
	Logger *slog.Logger
}

var serverNameRE = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)

// withDefaults validates cfg and fills in its defaults.
func (cfg Config) withDefaults() (Config, error) {
	if cfg.Token == "" {
		return cfg, errors.New("empty token")
	}
	if len(cfg.Servers) == 0 && len(cfg.Websites) == 0 {
		return cfg, errors.New("no servers and no websites")
	}
	tokens := map[string]bool{cfg.Token: true}
	for role, tok := range cfg.RoleTokens {
		if err := validRole(role); err != nil {
			return cfg, fmt.Errorf("role token: %w", err)
		}
		if tok == "" {
			return cfg, fmt.Errorf("role %s: empty token", role)
		}
		if tokens[tok] {
			return cfg, fmt.Errorf("role %s: token not distinct from another role's or the admin token", role)
		}
		tokens[tok] = true
	}
	seen := make(map[string]bool)
	for _, s := range cfg.Servers {
		if !serverNameRE.MatchString(s.Name) {
			return cfg, fmt.Errorf("server name %q: want 1-64 of [A-Za-z0-9_.-]", s.Name)
		}
		if seen[s.Name] {
			return cfg, fmt.Errorf("server %q named twice", s.Name)
		}
		seen[s.Name] = true
		if s.URL == "" {
			return cfg, fmt.Errorf("server %q: empty url", s.Name)
		}
	}
	for _, s := range cfg.Services {
		if !serverNameRE.MatchString(s.Name) || seen[s.Name] || s.URL == "" {
			return cfg, fmt.Errorf("service %q: want a unique name of 1-64 of [A-Za-z0-9_.-] and a URL", s.Name)
		}
		seen[s.Name] = true
	}
	for _, s := range cfg.Websites {
		if !serverNameRE.MatchString(s.Name) || seen[s.Name] {
			return cfg, fmt.Errorf("website %q: want a unique name of 1-64 of [A-Za-z0-9_.-]", s.Name)
		}
		if u, err := url.Parse(s.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return cfg, fmt.Errorf("website %q: want an http(s) base URL, got %q", s.Name, s.URL)
		}
		seen[s.Name] = true
	}
	for _, name := range cfg.Screenshots {
		if !slices.ContainsFunc(cfg.Servers, func(b Backend) bool { return b.Name == name }) {
			return cfg, fmt.Errorf("screenshots %q: not a server of the gateway", name)
		}
	}
	switch cfg.ToolNames {
	case "":
		cfg.ToolNames = NamesAuto
	case NamesAuto, NamesPrefix, NamesNever:
	default:
		return cfg, fmt.Errorf("tool names %q: want auto, prefix or never", cfg.ToolNames)
	}
	switch cfg.Mode {
	case "":
		cfg.Mode = ModePerformance
	case ModePerformance, ModeConsistent:
	default:
		return cfg, fmt.Errorf("mode %q: want performance or consistent", cfg.Mode)
	}
	switch cfg.Serialize {
	case "":
		cfg.Serialize = SerializeServer
	case SerializeServer, SerializeEnv:
	default:
		return cfg, fmt.Errorf("serialize %q: want server or env", cfg.Serialize)
	}
	for role, pats := range cfg.Roles {
		if err := validRole(role); err != nil {
			return cfg, err
		}
		if err := validPatterns(pats); err != nil {
			return cfg, fmt.Errorf("role %s: %w", role, err)
		}
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = DefaultCallTimeout
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.MaxSessions == 0 {
		cfg.MaxSessions = httpserve.DefaultMaxSessions
	}
	if cfg.TrajectoryBytes <= 0 {
		cfg.TrajectoryBytes = DefaultTrajectoryBytes
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return cfg, nil
}

// Gateway serves the union of its backends' tools. It is safe for concurrent use.
type Gateway struct {
	cfg      Config
	log      *slog.Logger
	backends []*backend
	byName   map[string]*backend

	mu    sync.RWMutex
	union *union // current tool union, replaced whole on every change

	roles *roles
	mcp   *mcpServers
	lists toolLists // the fast path's tools/list answers
	traj  *trajectory
	lanes *lanes
	clock *virtualClock
	trig  *triggerEngine
	svcs  map[string]*backend // Config.Services, reached only through /svc/
	sites map[string]*website // Config.Websites, reached through /website/
	shots screenshots         // Config.Screenshots

	handler http.Handler
	stop    context.CancelFunc
	wg      sync.WaitGroup
	closed  sync.Once
}

// New connects to every backend (retrying until cfg.ConnectTimeout, since backends may still be
// starting), lists their tools, builds the union under the naming policy and fetches each
// backend's card. The gateway runs a monitor per backend until Close.
func New(ctx context.Context, cfg Config) (*Gateway, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("gateway: %w", err)
	}
	runCtx, stop := context.WithCancel(cleanup.Unbounded(ctx))
	g := &Gateway{
		cfg:    cfg,
		log:    cfg.Logger,
		byName: make(map[string]*backend),
		roles:  newRoles(cfg.Roles),
		traj:   newTrajectory(maxTrajectory, cfg.TrajectoryBytes),
		stop:   stop,
		clock:  newVirtualClock(nil),
		shots:  make(screenshots, len(cfg.Screenshots)),
	}
	for _, name := range cfg.Screenshots {
		g.shots[name] = true
	}
	if g.sites, err = newWebsites(cfg.Websites); err != nil {
		stop()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.svcs = make(map[string]*backend, len(cfg.Services))
	for _, s := range cfg.Services {
		g.svcs[s.Name] = newBackend(s, g.log, nil)
	}
	for _, s := range cfg.Servers {
		b := newBackend(s, g.log, g.backendChanged)
		g.backends = append(g.backends, b)
		g.byName[s.Name] = b
	}
	g.lanes = newLanes(cfg.Mode, cfg.Serialize, g.backends)
	g.mcp = newMCPServers(g)
	g.wg.Go(func() { g.traj.run(runCtx) })

	connectCtx, cancel := context.WithTimeout(ctx, cfg.ConnectTimeout)
	defer cancel()
	errs := make([]error, len(g.backends))
	var wg sync.WaitGroup
	for i, b := range g.backends {
		wg.Go(func() { errs[i] = b.start(connectCtx) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		g.closeBackends()
		stop()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	u, err := buildUnion(cfg.ToolNames, g.backends)
	if err != nil {
		g.closeBackends()
		stop()
		return nil, fmt.Errorf("gateway: %w", err)
	}
	g.union = g.withLocal(u)
	g.trig = newTriggerEngine(runCtx, g.clock, time.Now, gatewayEffects{g}, g.log)
	g.wg.Go(func() { g.trig.drive(runCtx) })
	g.mcp.sync()
	g.handler = g.routes()
	for _, b := range g.backends {
		g.wg.Go(func() { b.monitor(runCtx) })
	}
	g.log.Info("gateway ready", "env", cfg.Name, "servers", len(g.backends), "tools", len(u.tools))
	return g, nil
}

// Handler returns the gateway's HTTP handler with every route.
func (g *Gateway) Handler() http.Handler { return g.handler }

// Close stops the monitors, closes the gateway's MCP sessions and the backend sessions. It is
// bounded: a backend that does not answer the session DELETE is given up on after a few
// seconds. Close is idempotent.
func (g *Gateway) Close() error {
	g.closed.Do(func() {
		g.stop()
		g.mcp.closeSessions()
		g.closeBackends()
		g.wg.Wait()
	})
	return nil
}

// closeBackends closes every backend session in parallel.
func (g *Gateway) closeBackends() {
	var wg sync.WaitGroup
	for _, b := range g.backends {
		wg.Go(b.close)
	}
	wg.Wait()
}

// currentUnion returns the tool union in force.
func (g *Gateway) currentUnion() *union {
	g.mu.RLock()
	defer g.mu.RUnlock()
	return g.union
}

// backendChanged rebuilds the union after b's tool list changed. Under policy "never" a new
// clash keeps the previous union and is recorded as b's error.
func (g *Gateway) backendChanged(b *backend) {
	g.mu.Lock()
	if g.union == nil { // still starting: New builds the first union
		g.mu.Unlock()
		return
	}
	u, err := buildUnion(g.cfg.ToolNames, g.backends)
	if err != nil {
		g.mu.Unlock()
		b.setError(fmt.Errorf("relist: %w", err))
		g.log.Warn("backend tools rejected", "component", b.name, "err", err)
		return
	}
	g.union = g.withLocal(u)
	g.mu.Unlock()
	g.mcp.sync()
	g.log.Info("tools changed", "component", b.name, "tools", len(u.tools))
}
