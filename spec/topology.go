package spec

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/yamlfile"
)

// BinaryPath is where the agentenv binary is inside a component that runs it: the image's own
// (our image is FROM scratch plus /agentenv), or the one a deployer mounts for a stdio server.
const BinaryPath = "/agentenv"

// initDir is where the service DB image runs SQL files at first start, in name order.
const initDir = "/docker-entrypoint-initdb.d"

// Component is one process of a deployed env, as a deployer starts it.
type Component struct {
	// Role is what the component is.
	Role agentenv.Role
	// Name is unique in the env and is the component's host name on the env's network:
	// "servicedb", "db-web", "db-mcp", "gateway", or a server's name.
	Name string
	// Image is the image to run.
	Image string
	// Command replaces the image's command; nil keeps it.
	Command []string
	// Env is the component's environment, with env:NAME references resolved and DATABASE_URL
	// set where it applies.
	Env map[string]string
	// Port is where the component listens inside its network namespace.
	Port int
	// Path is the MCP endpoint path for servers, db-mcp and the gateway; "" for the others.
	Path string
	// ReadyPath is a website container's readiness path: an HTTP GET of it answers 2xx or 3xx
	// once the container is ready; "" for the others.
	ReadyPath string
	// After names the components that must be ready before this one starts.
	After []string
	// ReadyTimeout bounds the wait for the component to be ready.
	ReadyTimeout time.Duration
	// Bridge reports whether Command runs BinaryPath from outside the image (a stdio server
	// behind the bridge): the deployer must mount or copy the agentenv binary there.
	Bridge bool
	// Files are to be placed in the container before it starts.
	Files []File
	// Resources are the component's limits, defaults applied.
	Resources Resources
	// NonRoot reports that the component runs the agentenv binary of its own image (Command
	// starts with BinaryPath and it is not a bridge), whose images run as a non-root numeric
	// user (images.User), so a backend may refuse to run it as root.
	NonRoot bool
	// ShmSize is the size of the component's /dev/shm in bytes (the browser's, BrowserShmSize);
	// 0 leaves the provider's default.
	ShmSize int64
	// Private means the component serves the env's network only: the deployer publishes no
	// host port for it and does not wait for it from the host. db-mcp is private: it is a
	// backend of the gateway, reached with the gateway's tokens, which waits for it at start.
	Private bool
}

// File is a file a component needs in its container.
type File struct {
	// Target is the absolute path in the container.
	Target string
	// Source is the host path to copy or mount; when empty, Content is the file.
	Source string
	// Content is the file's bytes when Source is empty.
	Content []byte
}

// TopologyOptions say how components find one another. The zero value suits a stack where
// components reach each other by name (docker, compose, a VM).
type TopologyOptions struct {
	// Host returns the host name other components reach the named component at. Nil means the
	// component's name.
	Host func(name string) string
	// DB, if set, are the service DB's passwords for this deployment (a deployer draws them
	// at random). Nil derives them from service_db.password, as a rendered file needs.
	DB *DBPasswords
	// LookupEnv resolves env:NAME references. Nil means os.LookupEnv.
	LookupEnv func(name string) (string, bool)
	// Pass, when not nil, is the allow-list of the variables env:NAME references may read from
	// the deployer's environment: an env file is data, and must not lift HOME or a cloud key
	// out of the deployer's shell unless its user says so. Nil allows every name (a rendered
	// compose file, which resolves nothing itself).
	Pass []string
	// Store, if set, is the deployment's database in a state store, which stands in for the
	// service DB component: no servicedb component is returned, and DATABASE_URL and db-mcp's
	// URL name Store's server, database and login roles.
	Store *StoreDB
	// SnapshotImage, if set, is an image snapshot of the service DB (`agentenv env snapshot` of
	// a deployment whose service DB was a container), which the service DB component runs: its
	// files are then the roles file alone, as the snapshot's dump, which the deployer restores
	// first, holds what the schemas, init_sql and seed made.
	SnapshotImage string
	// TokenFile, if set, is passed to the gateway as --token-file. Otherwise the deployer gives
	// the gateway its token in AGENTENV_GATEWAY_TOKEN.
	TokenFile string
}

// Components returns every component of e in start order: the service DB; then the servers,
// the websites' containers (a frontend after its backend), the browser, the DB web UI and
// db-mcp, which may start in parallel; then the gateway. An env:NAME reference that LookupEnv cannot resolve is
// an [*Error].
func (e *Env) Components(opts TopologyOptions) ([]Component, error) {
	t := newTopology(e, opts)
	var out []Component
	if comp, ok := t.serviceDB(); ok {
		out = append(out, comp)
	}
	servers, backends := t.servers()
	out = append(out, servers...)
	sites, routes := t.websites()
	out = append(out, sites...)
	if comp, ok := t.browser(); ok {
		out = append(out, comp)
		backends = append(backends, fmt.Sprintf("%s=http://%s%s", comp.Name, net.JoinHostPort(t.host(comp.Name), strconv.Itoa(comp.Port)), comp.Path))
	}
	if comp, ok := t.dbWeb(); ok {
		out = append(out, comp)
	}
	if comp, ok := t.dbMCP(); ok {
		out = append(out, comp)
	}
	if comp, ok := t.gateway(backends, routes); ok {
		out = append(out, comp)
	}
	if len(t.c.errs) > 0 {
		return nil, errors.Join(t.c.errs...)
	}
	for i := range out {
		out[i].NonRoot = !out[i].Bridge && len(out[i].Command) > 0 && out[i].Command[0] == BinaryPath
	}
	return out, nil
}

// topology builds the components of one env, one builder per role: the options with their
// defaults applied, the service DB's passwords, and the checker that gathers the problems found.
type topology struct {
	e      *Env
	opts   TopologyOptions
	host   func(name string) string
	lookup func(name string) (string, bool)
	c      *checker
	// pw are the service DB's passwords; zero without a service DB.
	pw DBPasswords
	// dbAfter is what a component that uses the service DB waits for: the service DB's
	// component, or nothing when there is none (a state store's database stands in for it).
	dbAfter []string
}

// newTopology returns the builder of e's components under opts: Host and LookupEnv default to
// the component's name and os.LookupEnv, and the service DB's roles and passwords are checked
// (a problem is kept in the checker, for Components to return).
func newTopology(e *Env, opts TopologyOptions) *topology {
	t := &topology{e: e, opts: opts, host: opts.Host, lookup: opts.LookupEnv, c: &checker{e: e}}
	if t.host == nil {
		t.host = func(name string) string { return name }
	}
	if t.lookup == nil {
		t.lookup = os.LookupEnv
	}
	if e.ServiceDB != nil {
		t.pw = t.dbPasswords()
		if opts.Store == nil {
			t.dbAfter = []string{nameServiceDB}
		}
	}
	return t
}

// dbPasswords checks the service DB's roles and returns its passwords: the deployer's
// (opts.DB) or, without them, those derived from the env. A role without a password is reported
// to the checker. The env must have a service DB.
func (t *topology) dbPasswords() DBPasswords {
	t.c.checkDBRoles(t.e)
	var pw DBPasswords
	if t.opts.DB != nil {
		pw = *t.opts.DB
	} else {
		pw = t.e.derivedDBPasswords()
	}
	for _, r := range t.e.DBRoles() {
		if pw.Roles[r.Name] == "" {
			t.c.errorf("service_db", "no password for role %s", r.Name)
		}
	}
	return pw
}

// serviceDB returns the service DB's component, which runs opts.SnapshotImage with the roles
// file alone if a snapshot is set; ok is false when there is none to start: the env has no
// service DB, or a state store's database stands in for it.
func (t *topology) serviceDB() (comp Component, ok bool) {
	if t.e.ServiceDB == nil || t.opts.Store != nil {
		return Component{}, false
	}
	comp = t.e.serviceDBComponent(t.pw)
	if t.opts.SnapshotImage != "" {
		comp.Image = t.opts.SnapshotImage
		comp.Files = slices.DeleteFunc(comp.Files, func(f File) bool { return f.Target != rolesFile })
	}
	return comp, true
}

// dbURL is the DSN a component uses as role, which is also the name of the schema it sets
// search_path to ("" for none): on the state store's database if there is one, else on the
// service DB's component. The env must have a service DB.
func (t *topology) dbURL(role, schema string) string {
	db := t.e.ServiceDB
	if st := t.opts.Store; st != nil {
		return st.URL(db, role, t.pw.Roles[role], schema)
	}
	return db.URL(net.JoinHostPort(t.host(nameServiceDB), strconv.Itoa(DBPort)), role, t.pw.Roles[role], schema)
}

// servers returns the components of e's servers, in their order, and the gateway's backends
// (NAME=URL) of every server, in the same order: a live endpoint (url:) is a backend at its own
// URL and no component.
func (t *topology) servers() (comps []Component, backends []string) {
	for i := range t.e.Servers {
		s := &t.e.Servers[i]
		if s.URL != "" {
			// A live endpoint: no component, the gateway reaches it where it runs.
			backends = append(backends, s.Name+"="+s.URL)
			continue
		}
		comps = append(comps, t.server(s, yamlfile.Index("servers", i)))
		backends = append(backends, fmt.Sprintf("%s=http://%s%s", s.Name, net.JoinHostPort(t.host(s.Name), strconv.Itoa(s.Port)), s.Path))
	}
	return comps, backends
}

// server returns the component of server s, which runs its image (a stdio server behind the
// stdio bridge) and is private behind the gateway unless it asks to be exposed. p is s's path
// in the env file, where a problem with its env is reported.
func (t *topology) server(s *Server, p string) Component {
	comp := Component{
		Role:         agentenv.RoleMCPServer,
		Name:         s.Name,
		Image:        s.Image,
		Command:      s.Command,
		Port:         s.Port,
		Path:         s.Path,
		ReadyTimeout: s.ReadyTimeout,
		Resources:    s.Resources,
		// The gateway is the server's door, with its tokens and roles; a port on the host
		// would be a second one, open to anyone there, unless the env asks for it.
		Private: !s.Expose,
	}
	if !t.e.Gateway.On() {
		comp.Private = false // no gateway: the server's own port is its door
	}
	if s.Database {
		// Only a server that uses the service DB waits for it; the others start beside it.
		comp.After = t.dbAfter
	}
	if s.Transport == TransportStdio {
		comp.Bridge = true
		comp.Command = append([]string{BinaryPath, "stdio-bridge", "--listen", ":" + strconv.Itoa(s.Port), "--"}, s.Command...)
	}
	schema := ""
	if s.Database {
		schema = s.Schema()
	}
	comp.Env = t.appEnv(s.Env, schema, p)
	return comp
}

// websites returns the components of e's websites, each backend then its frontend, and the
// gateway's flags for them: --website NAME=URL of what it serves, and --service
// NAME-backend=URL for a backend behind a frontend (readied and reached by the admin there).
func (t *topology) websites() (comps []Component, flags []string) {
	for i := range t.e.Websites {
		w := &t.e.Websites[i]
		p := yamlfile.Index("websites", i)
		schema := ""
		if w.Database {
			schema = w.Schema()
		}
		back := t.webApp(w.BackendName(), &w.Backend, t.appEnv(w.Backend.Env, schema, p+".backend"))
		if w.Database {
			back.After = t.dbAfter
		}
		comps = append(comps, back)
		backURL := "http://" + net.JoinHostPort(t.host(back.Name), strconv.Itoa(back.Port))
		if w.Frontend == nil {
			flags = append(flags, "--website", w.Name+"="+backURL)
			continue
		}
		env := t.appEnv(w.Frontend.Env, "", p+".frontend")
		if env == nil {
			env = map[string]string{}
		}
		env[envBackendURL] = backURL
		front := t.webApp(w.Name, w.Frontend, env)
		front.After = []string{back.Name}
		comps = append(comps, front)
		flags = append(flags, "--website", w.Name+"="+"http://"+net.JoinHostPort(t.host(front.Name), strconv.Itoa(front.Port)),
			"--service", back.Name+"="+backURL)
	}
	return comps, flags
}

// webApp returns the component of one container of a website, named name: private behind the
// gateway, which serves it, unless the env has no gateway.
func (t *topology) webApp(name string, a *WebApp, env map[string]string) Component {
	return Component{
		Role:         agentenv.RoleWebsite,
		Name:         name,
		Image:        a.Image,
		Command:      a.Command,
		Env:          env,
		Port:         a.Port,
		ReadyPath:    a.ReadyPath,
		ReadyTimeout: a.ReadyTimeout,
		Resources:    a.Resources,
		Private:      t.e.Gateway.On(),
	}
}

// appEnv returns a server's or website container's environment, nil if it has none: vars with
// env:NAME references resolved (a reference that opts.Pass does not allow, or that LookupEnv
// cannot resolve, is reported to the checker at p), and DATABASE_URL and DATABASE_SCHEMA when
// schema is not "": the service DB as the role that owns that schema.
func (t *topology) appEnv(vars map[string]string, schema, p string) map[string]string {
	if len(vars) == 0 && schema == "" {
		return nil
	}
	env := map[string]string{}
	for _, k := range sortedKeys(vars) {
		v := vars[k]
		if ref, ok := EnvRef(v); ok {
			if t.opts.Pass != nil && !slices.Contains(t.opts.Pass, ref) {
				t.c.errorf(p+".env."+k, "env:%s is not passed to deployments: allow it with --pass-env %s, or list it in [env] pass of the config", ref, ref)
			} else if v, ok = t.lookup(ref); !ok {
				t.c.errorf(p+".env."+k, "%s is not set in the deployer's environment", ref)
			}
		}
		env[k] = v
	}
	if schema != "" && t.e.ServiceDB != nil {
		env[envDatabaseURL] = t.dbURL(schema, schema)
		env[envDatabaseSchema] = schema
	}
	return env
}

// BrowserCommand is the browser's command for e, whose websites it reaches at hosts: the
// Playwright MCP server on BrowserPort over streamable HTTP (any Host header: the gateway reaches
// it by its name), headless Debian Chromium without its own sandbox (the container is the
// sandbox, and Chromium's needs capabilities agentenv's containers drop), a fresh profile kept
// in memory, and with vision the coordinate tools. With vnc it is headed instead, under the
// image's BrowserVNCEntrypoint, on the display noVNC shows. Chromium sends everything through a proxy
// that is not there (BrowserProxy) but for the hosts and the env's egress prefixes (ports
// aside), so it reaches nothing else whatever the network allows; loopback included, which
// Playwright takes through the proxy too.
func (e *Env) BrowserCommand(hosts []string) []string {
	cmd := []string{"playwright-mcp", "--headless"}
	if e.Browser.VNC {
		cmd = []string{BrowserVNCEntrypoint, "playwright-mcp"}
	}
	cmd = append(cmd, "--browser", "chromium", "--executable-path", "/usr/bin/chromium",
		"--no-sandbox", "--isolated", "--host", "0.0.0.0", "--port", strconv.Itoa(BrowserPort), "--allowed-hosts", "*",
		"--output-dir", "/tmp/playwright-mcp")
	bypass := slices.Clone(hosts)
	for _, r := range e.EgressRules() {
		bypass = append(bypass, r.CIDR)
	}
	cmd = append(cmd, "--proxy-server", BrowserProxy)
	if len(bypass) > 0 {
		cmd = append(cmd, "--proxy-bypass", strings.Join(bypass, ","))
	}
	if e.Browser.Vision {
		cmd = append(cmd, "--caps", "vision")
	}
	return cmd
}

// BrowserProxy is the proxy the browser sends what it may not reach to: a port on its own
// loopback where nothing listens, so such a request fails at once (ERR_PROXY_CONNECTION_FAILED).
const BrowserProxy = "http://127.0.0.1:9"

// browser returns the browser's component, if the env has it on: an MCP server behind the
// gateway, private, with shared memory sized for Chromium.
func (t *topology) browser() (Component, bool) {
	b := &t.e.Browser
	if !b.Enabled {
		return Component{}, false
	}
	var hosts []string
	for _, w := range t.e.Websites {
		hosts = append(hosts, t.host(w.Name))
	}
	var env map[string]string
	if b.VNC {
		env = map[string]string{"VNC_WEB_PORT": strconv.Itoa(BrowserVNCPort)}
	}
	return Component{
		Role:         agentenv.RoleMCPServer,
		Name:         BrowserName,
		Image:        b.Image,
		Command:      t.e.BrowserCommand(hosts),
		Env:          env,
		Port:         BrowserPort,
		Path:         DefaultPath,
		ReadyTimeout: DefaultReadyTimeout,
		Resources:    b.Resources,
		ShmSize:      BrowserShmSize,
		Private:      true,
	}, true
}

// dbWeb returns the DB web UI's component, if the service DB has it on.
func (t *topology) dbWeb() (Component, bool) {
	db := t.e.ServiceDB
	if db == nil || !db.WebUI.Enabled {
		return Component{}, false
	}
	return Component{
		Role:         agentenv.RoleDBWeb,
		Name:         nameDBWeb,
		Image:        db.WebUI.Image,
		Env:          map[string]string{"ADMINER_DEFAULT_SERVER": t.opts.Store.adminerServer(t.host(nameServiceDB))},
		Port:         db.WebUI.Port,
		After:        t.dbAfter,
		ReadyTimeout: DefaultReadyTimeout,
		Resources:    db.WebUI.Resources,
	}, true
}

// dbMCP returns db-mcp's component, if the service DB has it on: private, a backend of the
// gateway only.
func (t *topology) dbMCP() (Component, bool) {
	db := t.e.ServiceDB
	if db == nil || !db.DBMCP.Enabled {
		return Component{}, false
	}
	return Component{
		Role:         agentenv.RoleDBMCP,
		Name:         nameDBMCP,
		Image:        db.DBMCP.Image,
		Command:      []string{BinaryPath, "serve", "db-mcp", "--listen", ":" + strconv.Itoa(db.DBMCP.Port)},
		Env:          map[string]string{envDatabaseURL: t.dbURL(DBRoleDBMCP, "")},
		Port:         db.DBMCP.Port,
		Path:         DefaultPath,
		After:        t.dbAfter,
		ReadyTimeout: DefaultReadyTimeout,
		Resources:    db.DBMCP.Resources,
		Private:      true,
	}, true
}

// gateway returns the gateway's component, if the env has one on. It fronts backends (NAME=URL,
// from servers) and db-mcp, serves the websites (sites, its flags from websites), the DB web UI
// as its /svc/db-web/ and with browser.vnc the browser's noVNC as /svc/browser-vnc/, and starts
// once every server's component and db-mcp is ready: the websites are readied through it
// afterwards.
func (t *topology) gateway(backends, sites []string) (Component, bool) {
	e, db := t.e, t.e.ServiceDB
	if !e.Gateway.On() {
		return Component{}, false
	}
	var after []string
	for _, s := range e.Servers {
		if s.URL == "" { // a live endpoint is no component to wait for
			after = append(after, s.Name)
		}
	}
	if e.Browser.Enabled {
		after = append(after, BrowserName)
	}
	if db != nil && db.DBMCP.Enabled {
		// db-mcp is one more backend of the gateway: its tools join the union, behind the
		// gateway's tokens and role rules, and it has no door of its own.
		backends = append(backends, fmt.Sprintf("%s=http://%s%s", nameDBMCP, net.JoinHostPort(t.host(nameDBMCP), strconv.Itoa(db.DBMCP.Port)), DefaultPath))
		after = append(after, nameDBMCP)
	}
	cmd := e.gatewayCommand(t.opts.TokenFile, backends)
	if e.Browser.EachStep() { // a screenshot after each of the browser's calls that act on the page
		cmd = append(cmd, "--screenshots", BrowserName)
	}
	if db != nil && db.WebUI.Enabled { // the DB web UI is also the gateway's /svc/db-web/
		cmd = append(cmd, "--service", fmt.Sprintf("%s=http://%s", nameDBWeb, net.JoinHostPort(t.host(nameDBWeb), strconv.Itoa(db.WebUI.Port))))
	}
	if e.Browser.Enabled && e.Browser.VNC { // the browser's screen, /svc/browser-vnc/
		cmd = append(cmd, "--service", fmt.Sprintf("%s=http://%s", BrowserVNCService, net.JoinHostPort(t.host(BrowserName), strconv.Itoa(BrowserVNCPort))))
	}
	if len(sites) > 0 {
		// The websites' URLs through the gateway as the env's components reach it (with a
		// token); the browser reaches each directly by its name, list_website_urls' env_url.
		cmd = append(cmd, "--public-url", "http://"+net.JoinHostPort(t.host(nameGateway), strconv.Itoa(e.Gateway.Port)))
		cmd = append(cmd, sites...)
	}
	return Component{
		Role:         agentenv.RoleGateway,
		Name:         nameGateway,
		Image:        e.Gateway.Image,
		Command:      cmd,
		Port:         e.Gateway.Port,
		Path:         DefaultPath,
		After:        after,
		ReadyTimeout: e.gatewayReadyTimeout(),
		Resources:    e.Gateway.Resources,
	}, true
}

// EphemeralPostgres is the service DB's command: PostgreSQL tuned for a life of one episode,
// whose data nobody needs after a crash (no fsync, no full-page writes, asynchronous commits,
// minimal WAL, no autovacuum or JIT, small buffers), so that many start at once on a small
// machine. Images of the official postgres kind run it after their initdb (itself --no-sync).
var EphemeralPostgres = []string{"postgres",
	"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
	"-c", "wal_level=minimal", "-c", "max_wal_senders=0", "-c", "autovacuum=off", "-c", "jit=off",
	"-c", "shared_buffers=16MB", "-c", "max_connections=64"}

// passwordAuth is the authentication method the service DB asks of every connection, local
// ones inside its container included.
const passwordAuth = "scram-sha-256"

// StoreDB is a deployment's database in a state store, as its components reach it.
type StoreDB struct {
	// HostPort is where the components reach the store's server.
	HostPort string
	// Database is the deployment's database on it.
	Database string
	// Role returns the cluster-wide name of the deployment's login role name ([Env.DBRoles]):
	// roles belong to the server, not to a database, so each deployment's are its own.
	Role func(name string) string
}

// URL is the DSN of the store's database as role name (mapped by Role), with search_path set
// to schema if it is not "".
func (s *StoreDB) URL(db *ServiceDB, role, password, schema string) string {
	in := *db
	in.Database = s.Database
	return in.URL(s.HostPort, s.Role(role), password, schema)
}

// adminerServer is the server the DB web UI offers: the store's, else the service DB's host.
func (s *StoreDB) adminerServer(serviceDB string) string {
	if s == nil {
		return serviceDB
	}
	return s.HostPort
}

// ServiceDBInit returns the service DB's init files in the order they run: the servers'
// schemas, init_sql, then seed; without the roles, which a state store makes per deployment
// ([Env.StoreRolesSQL]) on a copy of a database these files made once.
func (e *Env) ServiceDBInit() []File {
	var out []File
	for _, f := range e.serviceDBComponent(e.derivedDBPasswords()).Files {
		if f.Target != rolesFile {
			out = append(out, f)
		}
	}
	return out
}

func (e *Env) serviceDBComponent(pw DBPasswords) Component {
	db := e.ServiceDB
	comp := Component{
		Role:  agentenv.RoleServiceDB,
		Name:  nameServiceDB,
		Image: db.Image,
		// As the official image takes them: a password for TCP connections, and initdb flags
		// that ask for one on the socket and on loopback too (its default there is trust).
		Env: map[string]string{
			"POSTGRES_USER":             db.User,
			"POSTGRES_PASSWORD":         pw.Superuser,
			"POSTGRES_DB":               db.Database,
			"POSTGRES_HOST_AUTH_METHOD": passwordAuth,
			"POSTGRES_INITDB_ARGS":      "--auth-local=" + passwordAuth + " --auth-host=" + passwordAuth + " --no-sync",
		},
		Command:      EphemeralPostgres,
		Port:         DBPort,
		ReadyTimeout: db.ReadyTimeout,
		Resources:    db.Resources,
	}
	var schemas strings.Builder
	for _, o := range e.schemaOwners() {
		fmt.Fprintf(&schemas, "CREATE SCHEMA IF NOT EXISTS %s;\n", o.schema)
	}
	if schemas.Len() > 0 {
		comp.Files = append(comp.Files, File{Target: initDir + "/00-agentenv-schemas.sql", Content: []byte(schemas.String())})
	}
	for i, f := range db.InitSQL {
		comp.Files = append(comp.Files, File{Target: fmt.Sprintf("%s/10-init-%02d-%s", initDir, i, filepath.Base(f)), Source: e.Path(f)})
	}
	for i, f := range db.Seed {
		comp.Files = append(comp.Files, File{Target: fmt.Sprintf("%s/20-seed-%02d-%s", initDir, i, filepath.Base(f)), Source: e.Path(f)})
	}
	comp.Files = append(comp.Files, File{Target: rolesFile, Content: e.rolesSQL(pw)})
	return comp
}

// slowestServer is the longest ready_timeout of e's servers.
func (e *Env) slowestServer() time.Duration {
	var slowest time.Duration
	for _, s := range e.Servers {
		slowest = max(slowest, s.ReadyTimeout)
	}
	return slowest
}

// gatewayReadyTimeout bounds the wait for the gateway, which answers once every backend has:
// the default, or the slowest server's wait and the default on top.
func (e *Env) gatewayReadyTimeout() time.Duration {
	if slowest := e.slowestServer(); slowest > DefaultReadyTimeout {
		return slowest + DefaultReadyTimeout
	}
	return DefaultReadyTimeout
}

// gatewayCommand is the gateway's command line. servers are NAME=URL pairs.
func (e *Env) gatewayCommand(tokenFile string, servers []string) []string {
	g := &e.Gateway
	cmd := []string{BinaryPath, "gateway", "--listen", ":" + strconv.Itoa(g.Port), "--name", e.Name}
	if tokenFile != "" {
		cmd = append(cmd, "--token-file", tokenFile)
	}
	cmd = append(cmd,
		"--tool-names", string(g.ToolNames),
		"--mode", string(g.Mode),
		"--call-timeout", g.CallTimeout.String())
	// The gateway waits for its backends to answer; a server that may take longer to be ready
	// than the gateway's default wait widens it, as it is readied behind the gateway.
	if slowest := e.slowestServer(); slowest > DefaultReadyTimeout {
		cmd = append(cmd, "--connect-timeout", slowest.String())
	}
	if g.MaxConns > 0 {
		cmd = append(cmd, "--max-conns", strconv.Itoa(g.MaxConns))
	}
	if g.MaxSessions > 0 {
		cmd = append(cmd, "--max-sessions", strconv.Itoa(g.MaxSessions))
	}
	if g.Mode == ModeConsistent && g.Serialize != SerializeServer {
		// Only when it is not the gateway's default, so that gateways without the flag keep
		// running the default.
		cmd = append(cmd, "--serialize", string(g.Serialize))
	}
	for _, s := range servers {
		cmd = append(cmd, "--server", s)
	}
	for _, role := range sortedKeys(g.Roles) {
		for _, pat := range g.Roles[role] {
			cmd = append(cmd, "--disable", role+"="+pat)
		}
	}
	return cmd
}
