package spec

import (
	"crypto/sha256"
	"encoding/hex"
	"path/filepath"
	"time"
)

// Defaults applied by [Env.Defaults]. Every image is configurable in the env file; these are the
// images the test setup builds locally, since no registry is reachable on our machines.
const (
	// DefaultImage is the agentenv image: FROM scratch plus the static binary at /agentenv. It
	// serves the gateway, db-mcp and the example servers.
	DefaultImage = "agentenv:dev"
	// DefaultDBImage is the service DB image. It must follow the official postgres image's
	// conventions: POSTGRES_USER, POSTGRES_PASSWORD, POSTGRES_DB and /docker-entrypoint-initdb.d.
	DefaultDBImage = "agentenv-postgres:local"
	// DefaultWebUIImage is the DB web UI image (adminer on Debian).
	DefaultWebUIImage = "agentenv-adminer:local"
	// DefaultDBUser, DefaultDBPassword and DefaultDBName are the service DB's credentials and
	// database when the file names none.
	DefaultDBUser     = "agentenv"
	DefaultDBPassword = "agentenv"
	DefaultDBName     = "agentenv"
	// DefaultPort is the port of the gateway, the sidecars and the stdio bridge.
	DefaultPort = 8080
	// DBPort is the port the service DB listens on inside its network.
	DBPort = 5432
	// DefaultPath is the MCP endpoint path of a server.
	DefaultPath = "/mcp"
	// DefaultReadyTimeout bounds the wait for one component to answer.
	DefaultReadyTimeout = 60 * time.Second
	// DefaultCallTimeout bounds one tool call through the gateway.
	DefaultCallTimeout = 60 * time.Second
	// DefaultBrowserImage is the browser's image (images/debian/browser): Debian's Chromium at
	// /usr/bin/chromium and the Playwright MCP server (@playwright/mcp) as playwright-mcp on
	// the PATH. Another image must have both there.
	DefaultBrowserImage = "agentenv-browser:local"
	// BrowserName is the browser's component name: its host name on the env's network, and
	// the name of its server behind the gateway. A server or website may not take it while
	// the browser is enabled.
	BrowserName = "browser"
	// BrowserPort is where the Playwright MCP server listens in the browser's container.
	BrowserPort = 8931
	// BrowserShmSize is the browser's shared memory (/dev/shm), which Chromium's renderers use
	// for their frames: Docker's default 64 MiB crashes tabs on large pages. It counts against
	// the memory limit.
	BrowserShmSize int64 = 256 << 20
	// BrowserVNCPort is where, with browser.vnc, websockify serves noVNC and the VNC stream in
	// the browser's container (the image's browser-vnc script, VNC_WEB_PORT).
	BrowserVNCPort = 6080
	// BrowserVNCService is the gateway's name for the browser's noVNC: with browser.vnc it is
	// served at /svc/browser-vnc/ with the admin token only, and no server or website may take
	// the name.
	BrowserVNCService = "browser-vnc"
	// BrowserVNCPage is the noVNC page under the gateway's base URL, told to connect at once
	// to the stream beside it (noVNC 1.6 resolves path against the page's URL, so
	// /svc/browser-vnc/websockify) and to scale the screen to the window.
	BrowserVNCPage = "/svc/" + BrowserVNCService + "/vnc.html?autoconnect=1&resize=scale&path=websockify"
	// BrowserVNCEntrypoint is the image's script that starts Xvfb, x11vnc and websockify and
	// then runs the rest of the command on that display.
	BrowserVNCEntrypoint = "browser-vnc"
)

// Transport is how an MCP server speaks.
type Transport string

// Transports.
const (
	// TransportHTTP is MCP streamable HTTP on Server.Port at Server.Path.
	TransportHTTP Transport = "http"
	// TransportStdio is MCP over the standard streams of Server.Command, which runs behind the
	// built-in bridge: agentenv stdio-bridge --listen :PORT -- COMMAND...
	TransportStdio Transport = "stdio"
)

// ToolNames says how the gateway names the tools it aggregates.
type ToolNames string

// Tool naming policies.
const (
	// ToolNamesAuto keeps a tool's name when it is unique and prefixes "<server>__" on a clash.
	ToolNamesAuto ToolNames = "auto"
	// ToolNamesPrefix always prefixes "<server>__".
	ToolNamesPrefix ToolNames = "prefix"
	// ToolNamesNever never prefixes; a clash is a deploy error, never a silent shadow.
	ToolNamesNever ToolNames = "never"
)

// GatewayMode says how the gateway schedules tool calls.
type GatewayMode string

// Gateway modes.
const (
	// ModeConsistent serialises tool calls, so a trajectory has one order.
	ModeConsistent GatewayMode = "consistent"
	// ModePerformance lets tool calls run concurrently.
	ModePerformance GatewayMode = "performance"
)

// Serialize is the scope within which consistent mode runs one tool call at a time.
type Serialize string

// Scopes of consistent mode.
const (
	// SerializeServer runs one call at a time per server and calls to different servers
	// concurrently: the default, since each server owns its state (its tools, its own schema
	// of the service DB), so each server's order is what a trajectory must keep, and a slow
	// tool of one server does not stall every other.
	SerializeServer Serialize = "server"
	// SerializeEnv runs one call at a time across the whole env, for servers that share state
	// (db-mcp reading what another server writes, servers calling each other).
	SerializeEnv Serialize = "env"
)

// Env is an environment as declared in an env file, with defaults applied. Load and Parse return
// it validated; a hand-built Env should be passed through [Env.Defaults].
type Env struct {
	// Name identifies the env: a DNS label (lower-case letters, digits and '-', at most 63).
	Name string `yaml:"name"`
	// Description is free text shown by the CLI.
	Description string `yaml:"description"`
	// Servers are the MCP servers, at least one, behind the gateway.
	Servers []Server `yaml:"servers"`
	// ServiceDB is the optional PostgreSQL state database and its sidecars.
	ServiceDB *ServiceDB `yaml:"service_db"`
	// Gateway configures the gateway in front of the servers.
	Gateway Gateway `yaml:"gateway"`
	// Egress lists the destinations outside the deployment its components may reach, beside
	// each other and DNS: IP prefixes (CIDR), each with an optional :PORT. Only providers
	// that enforce egress (Kubernetes) hold the env to it; a deploy elsewhere warns.
	Egress []string `yaml:"egress"`
	// Websites are web apps deployed beside the servers, each served by the gateway at
	// /website/NAME/.
	Websites []Website `yaml:"websites"`
	// Browser is a browser the agent drives through MCP tools, behind the gateway.
	Browser Browser `yaml:"browser"`

	// File is the path the env was loaded from (the name given to Parse).
	File string `yaml:"-"`
	// Dir is the directory relative paths in the file (init_sql, seed) are resolved against.
	Dir string `yaml:"-"`

	digest string
	lines  map[string]int // field path -> line, for errors found after decoding
}

// Server is one MCP server component.
type Server struct {
	// Name is unique in the env, a DNS label, and the server's host name on the env's network.
	Name string `yaml:"name"`
	// Image is the container image; required unless URL is set.
	Image string `yaml:"image"`
	// URL makes the server a live endpoint: the MCP URL of a server already running somewhere,
	// which joins the gateway like any other (readiness checked) while nothing is created or
	// torn down for it. Such a server has only a name, a URL and a ready_timeout; the gateway
	// must reach the URL from where it runs.
	URL string `yaml:"url"`
	// Command replaces the image's command. For a stdio server it is the stdio program.
	Command []string `yaml:"command"`
	// Env is the server's environment. A value "env:NAME" is taken from the deployer's
	// environment at deploy time.
	Env map[string]string `yaml:"env"`
	// Port is where the server (or, for stdio, the bridge) listens. Required for http; stdio
	// defaults to DefaultPort.
	Port int `yaml:"port"`
	// Transport is http (the default) or stdio.
	Transport Transport `yaml:"transport"`
	// Path is the MCP endpoint path, DefaultPath unless set.
	Path string `yaml:"path"`
	// Database gives the server a schema named after it in the service DB, and DATABASE_URL and
	// DATABASE_SCHEMA pointing at it. It needs a service_db.
	Database bool `yaml:"database"`
	// ReadyTimeout bounds the wait for the server to answer initialize and tools/list.
	ReadyTimeout time.Duration `yaml:"ready_timeout"`
	// Resources are the server's limits (DefaultMemory, DefaultCPUs).
	Resources Resources `yaml:"resources"`
	// Expose publishes the server's port on the host too, beside the gateway, for debugging.
	// That door is unauthenticated: anyone on the host can call every tool, past the gateway's
	// tokens, roles and trajectory. By default (false) the gateway is the server's only door.
	Expose bool `yaml:"expose"`
}

// Website is a web app of the env: a backend and, optionally, a frontend, each a container.
// The gateway serves the frontend if there is one, else the backend, at /website/NAME/ (the
// prefix stripped); inside the env that container is reached by the website's name, and a
// frontend reaches its backend at NAME-backend ([Website.BackendName]).
type Website struct {
	// Name is unique among the env's servers and websites, a DNS label, and the host name of
	// the container the gateway serves.
	Name string `yaml:"name"`
	// Backend is the website's server; the gateway serves it when there is no frontend.
	Backend WebApp `yaml:"backend"`
	// Frontend, if set, is what the gateway serves; it finds the backend in BACKEND_URL.
	Frontend *WebApp `yaml:"frontend"`
	// Database gives the website a schema named after it in the service DB, owned by a login
	// role of its own exactly as a server's ([Server.Database]): the backend gets DATABASE_URL
	// and DATABASE_SCHEMA. It needs a service_db.
	Database bool `yaml:"database"`
}

// WebApp is one container of a website.
type WebApp struct {
	// Image is the container image; required.
	Image string `yaml:"image"`
	// Command replaces the image's command.
	Command []string `yaml:"command"`
	// Env is the container's environment; a value "env:NAME" is taken from the deployer's
	// environment at deploy time.
	Env map[string]string `yaml:"env"`
	// Port is where the app serves HTTP; required.
	Port int `yaml:"port"`
	// ReadyPath is the path an HTTP GET of which answers 2xx or 3xx once the app is ready
	// (DefaultReadyPath).
	ReadyPath string `yaml:"ready_path"`
	// ReadyTimeout bounds the wait for ReadyPath to answer (DefaultReadyTimeout).
	ReadyTimeout time.Duration `yaml:"ready_timeout"`
	// Resources are the container's limits (DefaultMemory, DefaultCPUs).
	Resources Resources `yaml:"resources"`
}

// Browser is the env's browser: Debian's Chromium driven by the Playwright MCP server, one
// component named [BrowserName] behind the gateway like a server, so that its tools (browser_
// navigate, browser_snapshot, ...) join the union, obey the roles and land in the trajectory.
// Each deployment's browser starts with a fresh profile (kept in memory). It reaches the env's
// websites by name (http://NAME:PORT/, as list_website_urls gives each one's env_url) and,
// where the provider can cut it off (docker: a network of its own with no route out;
// Kubernetes: the env's egress policy), nothing else unless the env's egress allows it.
type Browser struct {
	// Enabled adds the browser (default false).
	Enabled bool `yaml:"enabled"`
	// Vision adds the coordinate tools (Playwright MCP's --caps vision: click, move and drag at
	// x,y on a screenshot) to the accessibility-snapshot ones.
	Vision bool `yaml:"vision"`
	// Screenshots is when the gateway takes a screenshot of the browser's page on its own:
	// [ScreenshotsEachStep] after each call that acts on the page (gateway.ScreenshotTools),
	// attached to that call's result as an image, so that it is kept with the run's trajectory;
	// empty or [ScreenshotsNone] (the default): never.
	Screenshots string `yaml:"screenshots"`
	// VNC runs Chromium headed on a virtual display (Xvfb) that a person watches and drives
	// live through noVNC, served by the gateway at /svc/browser-vnc/ with the admin token only
	// (BrowserVNCPage); the image must have BrowserVNCEntrypoint (the default one does).
	// Without it the browser is headless and nothing of that runs.
	VNC bool `yaml:"vnc"`
	// Image is the browser's image (DefaultBrowserImage).
	Image string `yaml:"image"`
	// Resources are the browser's limits (DefaultMemory, DefaultCPUs: Chromium needs about
	// 1 GiB).
	Resources Resources `yaml:"resources"`
}

// Values of [Browser.Screenshots].
const (
	ScreenshotsNone     = "none"
	ScreenshotsEachStep = "each_step"
)

// EachStep reports whether the gateway takes a screenshot after each of the browser's calls
// that act on the page.
func (b *Browser) EachStep() bool { return b.Enabled && b.Screenshots == ScreenshotsEachStep }

// DefaultReadyPath is a website's readiness path unless set.
const DefaultReadyPath = "/"

// BackendName is the host name of a website's backend on the env's network: the website's
// name without a frontend (the backend is what is served), NAME-backend with one.
func (w *Website) BackendName() string {
	if w.Frontend == nil {
		return w.Name
	}
	return w.Name + "-backend"
}

// Schema returns the name of the website's schema in the service DB, as [Server.Schema].
func (w *Website) Schema() string { return schemaOf(w.Name) }

// Website returns the website named name, or nil.
func (e *Env) Website(name string) *Website {
	for i := range e.Websites {
		if e.Websites[i].Name == name {
			return &e.Websites[i]
		}
	}
	return nil
}

func (a *WebApp) defaults() {
	setDefault(&a.ReadyPath, DefaultReadyPath)
	if a.ReadyTimeout == 0 {
		a.ReadyTimeout = DefaultReadyTimeout
	}
	a.Resources.defaults()
}

// ServiceDB is the env's PostgreSQL state database.
type ServiceDB struct {
	// Image is the PostgreSQL image (DefaultDBImage); see DefaultDBImage for its contract.
	Image string `yaml:"image"`
	// User and Password are the superuser's, which only the service DB and agentenv's own init
	// use (a deployer draws a password of its own); Database is the database the servers use,
	// each as its own role ([Env.DBRoles]).
	User     string `yaml:"user"`
	Password string `yaml:"password"`
	Database string `yaml:"database"`
	// InitSQL are SQL files, relative to the env file, run once when the database is created,
	// after the servers' schemas exist.
	InitSQL []string `yaml:"init_sql"`
	// Seed are SQL files, relative to the env file, run after InitSQL: the initial data.
	Seed []string `yaml:"seed"`
	// FromSnapshot names a snapshot (`agentenv env snapshot`) the deployment's database starts
	// from, in place of running the schemas, InitSQL and Seed: a template database of the state
	// store (a deploy that uses that store copies it), or an image of a service DB container
	// with its dump (a container-mode deploy on the provider that built it runs it and restores
	// the dump; no store needed). A deploy fails naming this field, before it creates anything,
	// when there is no such snapshot, it is of another env, or this deploy cannot use it.
	FromSnapshot string `yaml:"from_snapshot"`
	// WebUI is the DB web UI sidecar (adminer by default).
	WebUI Sidecar `yaml:"web_ui"`
	// DBMCP is the db-mcp sidecar, an MCP server over SQL on the whole database, as the
	// read-only role DBRoleDBMCP.
	DBMCP Sidecar `yaml:"db_mcp"`
	// ReadyTimeout bounds the wait for PostgreSQL to accept a query, seeds included.
	ReadyTimeout time.Duration `yaml:"ready_timeout"`
	// Resources are the database's limits (DefaultMemory, DefaultCPUs).
	Resources Resources `yaml:"resources"`
}

// Sidecar is an optional component next to the service DB.
type Sidecar struct {
	// Enabled reports whether the sidecar is deployed.
	Enabled bool `yaml:"enabled"`
	// Image is the sidecar's image.
	Image string `yaml:"image"`
	// Port is where the sidecar listens (DefaultPort).
	Port int `yaml:"port"`
	// Resources are the sidecar's limits (DefaultMemory, DefaultCPUs).
	Resources Resources `yaml:"resources"`
}

// Gateway configures the deployment's gateway.
type Gateway struct {
	// Enabled puts a gateway in front of the servers (true unless set false). Without one the
	// servers are deployed with their own ports published, and the deployment lists their
	// direct endpoints: no tokens, roles or trajectory stand in front of them.
	Enabled *bool `yaml:"enabled"`
	// Image is the image that runs "agentenv gateway" (DefaultImage).
	Image string `yaml:"image"`
	// Port is where the gateway listens (DefaultPort).
	Port int `yaml:"port"`
	// ToolNames is the tool naming policy (auto).
	ToolNames ToolNames `yaml:"tool_names"`
	// Mode is the scheduling mode (consistent).
	Mode GatewayMode `yaml:"mode"`
	// Serialize is the scope of consistent mode (server); performance mode ignores it.
	Serialize Serialize `yaml:"serialize"`
	// Roles maps a caller role to the tool name patterns disabled for it. A pattern is 1-128 of
	// [A-Za-z0-9_.*-], where '*' matches any run of characters.
	Roles map[string][]string `yaml:"roles"`
	// CallTimeout bounds one tool call (DefaultCallTimeout).
	CallTimeout time.Duration `yaml:"call_timeout"`
	// Resources are the gateway's limits (DefaultMemory, DefaultCPUs).
	Resources Resources `yaml:"resources"`
	// MaxConns caps the connections open at once on the gateway (1-MaxGatewayCap); 0 is the
	// gateway's default (4096).
	MaxConns int `yaml:"max_conns"`
	// MaxSessions caps the MCP sessions open at once on the gateway (1-MaxGatewayCap); 0 is
	// the gateway's default (256).
	MaxSessions int `yaml:"max_sessions"`
}

// MaxGatewayCap is the largest gateway.max_conns or max_sessions an env may set: a cap, not a
// way to lift it.
const MaxGatewayCap = 1 << 20

// Defaults fills every unset field with its default. It is idempotent; Load and Parse call it.
func (e *Env) Defaults() {
	for i := range e.Servers {
		s := &e.Servers[i]
		if s.URL != "" {
			if s.ReadyTimeout == 0 {
				s.ReadyTimeout = DefaultReadyTimeout
			}
			continue
		}
		if s.Transport == "" {
			s.Transport = TransportHTTP
		}
		if s.Transport == TransportStdio && s.Port == 0 {
			s.Port = DefaultPort
		}
		if s.Path == "" {
			s.Path = DefaultPath
		}
		if s.ReadyTimeout == 0 {
			s.ReadyTimeout = DefaultReadyTimeout
		}
		s.Resources.defaults()
	}
	for i := range e.Websites {
		w := &e.Websites[i]
		w.Backend.defaults()
		if w.Frontend != nil {
			w.Frontend.defaults()
		}
	}
	if e.Browser.Enabled {
		setDefault(&e.Browser.Image, DefaultBrowserImage)
		e.Browser.Resources.defaults()
	}
	if db := e.ServiceDB; db != nil {
		setDefault(&db.Image, DefaultDBImage)
		setDefault(&db.User, DefaultDBUser)
		setDefault(&db.Password, DefaultDBPassword)
		setDefault(&db.Database, DefaultDBName)
		setDefault(&db.WebUI.Image, DefaultWebUIImage)
		setDefault(&db.DBMCP.Image, DefaultImage)
		if db.WebUI.Port == 0 {
			db.WebUI.Port = DefaultPort
		}
		if db.DBMCP.Port == 0 {
			db.DBMCP.Port = DefaultPort
		}
		if db.ReadyTimeout == 0 {
			db.ReadyTimeout = DefaultReadyTimeout
		}
		db.Resources.defaults()
		db.WebUI.Resources.defaults()
		db.DBMCP.Resources.defaults()
	}
	g := &e.Gateway
	setDefault(&g.Image, DefaultImage)
	if g.Port == 0 {
		g.Port = DefaultPort
	}
	if g.ToolNames == "" {
		g.ToolNames = ToolNamesAuto
	}
	if g.Mode == "" {
		g.Mode = ModeConsistent
	}
	if g.Serialize == "" {
		g.Serialize = SerializeServer
	}
	if g.CallTimeout == 0 {
		g.CallTimeout = DefaultCallTimeout
	}
	g.Resources.defaults()
}

func setDefault(s *string, v string) {
	if *s == "" {
		*s = v
	}
}

// Digest returns "sha256:" and the hex SHA-256 of the file's bytes, or "" for an Env that was
// not parsed. The ledger records it to tell whether a deployment's file has changed.
func (e *Env) Digest() string { return e.digest }

// On reports whether the env has a gateway (Enabled unset or true).
func (g *Gateway) On() bool { return g.Enabled == nil || *g.Enabled }

// Server returns the server named name, or nil.
func (e *Env) Server(name string) *Server {
	for i := range e.Servers {
		if e.Servers[i].Name == name {
			return &e.Servers[i]
		}
	}
	return nil
}

// Path resolves p, a path written in the env file, against the file's directory.
func (e *Env) Path(p string) string {
	if filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(e.Dir, p)
}

// Schema returns the name of the server's schema in the service DB: its name with '-' turned
// into '_', so it needs no quoting in SQL.
func (s *Server) Schema() string { return schemaOf(s.Name) }

func schemaOf(name string) string {
	b := []byte(name)
	for i, c := range b {
		if c == '-' {
			b[i] = '_'
		}
	}
	return string(b)
}

func digest(data []byte) string {
	sum := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(sum[:])
}
