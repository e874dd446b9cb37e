package spec

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/agentenv/agentenv/internal/confine"
	"github.com/agentenv/agentenv/internal/suggest"
	"github.com/agentenv/agentenv/internal/yamlfile"
)

var (
	dnsLabel    = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`)
	envVarName  = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	sqlName     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}$`)
	roleName    = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,64}$`)
	toolPattern = regexp.MustCompile(`^[A-Za-z0-9_.*-]{1,128}$`)
)

// Component names other than the servers'. A server may not take one: they are host names on
// the env's network.
const (
	nameServiceDB = "servicedb"
	nameDBWeb     = "db-web"
	nameDBMCP     = "db-mcp"
	nameGateway   = "gateway"
)

// Environment variables set for a server with database: true; the file may not set them.
const (
	envDatabaseURL    = "DATABASE_URL"
	envDatabaseSchema = "DATABASE_SCHEMA"
)

// EnvRef reports whether v is a reference to the deployer's environment ("env:NAME") and
// returns NAME.
func EnvRef(v string) (name string, ok bool) {
	return strings.CutPrefix(v, "env:")
}

// checker collects validation errors, placing each at the line recorded for its path.
type checker struct {
	e      *Env
	failed map[string]bool
	errs   []error
}

// failedAt reports whether path or one of its parents did not decode.
func (c *checker) failedAt(path string) bool {
	for p := path; ; {
		if c.failed[p] {
			return true
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			return c.failed[""]
		}
		p = p[:i]
	}
}

// line finds the line of path, or of its nearest recorded parent.
func (c *checker) line(path string) int {
	for p := path; p != ""; {
		if l, ok := c.e.lines[p]; ok {
			return l
		}
		i := strings.LastIndexAny(p, ".[")
		if i < 0 {
			break
		}
		p = p[:i]
	}
	return 0
}

// SnapshotName is what the name of a snapshot of env state looks like.
var SnapshotName = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$`)

// FieldError is a problem with a field that only a deployer finds (a snapshot the store does
// not have), naming the file and the field's line as Load's errors do.
func (e *Env) FieldError(path, format string, args ...any) error {
	c := &checker{e: e}
	return &Error{File: e.File, Line: c.line(path), Path: path, Msg: fmt.Sprintf(format, args...)}
}

func (c *checker) errorf(path, format string, args ...any) {
	if c.failedAt(path) {
		return // already reported as a decode error
	}
	c.errs = append(c.errs, &Error{File: c.e.File, Line: c.line(path), Path: path, Msg: fmt.Sprintf(format, args...)})
}

// enum checks that v is one of values; an empty v has already been defaulted.
func enum[T ~string](c *checker, path string, v T, values ...T) {
	if !slices.Contains(values, v) {
		strs := make([]string, len(values))
		for i, x := range values {
			strs[i] = string(x)
		}
		c.errorf(path, "unknown value %q: want %s%s", v, oneOf(values), suggest.DidYouMean(string(v), strs))
	}
}

func (c *checker) port(path string, p int) {
	if p < 1 || p > 65535 {
		c.errorf(path, "port %d out of range 1-65535", p)
	}
}

func (c *checker) required(path, v string) bool {
	if v == "" {
		c.errorf(path, "required")
		return false
	}
	return true
}

// validate checks e after decoding and defaults; failed names the paths that did not decode.
func (e *Env) validate(failed map[string]bool) []error {
	c := &checker{e: e, failed: failed}
	if c.required("name", e.Name) && !dnsLabel.MatchString(e.Name) {
		c.errorf("name", "invalid name %q: want a DNS label (a-z, 0-9 and '-', at most 63, starting and ending alphanumeric)", e.Name)
	}
	if len(e.Servers) == 0 && len(e.Websites) == 0 && !e.Browser.Enabled && !failed["servers"] && !failed["websites"] {
		c.errorf("servers", "at least one server, website or the browser is required")
	}
	for i, s := range e.Egress {
		if _, err := parseEgress(s); err != nil {
			c.errorf(yamlfile.Index("egress", i), "%v", err)
		}
	}
	firstName := map[string]string{}
	for i := range e.Servers {
		p := yamlfile.Index("servers", i)
		s := &e.Servers[i]
		c.server(p, s)
		if s.Name == "" {
			continue
		}
		if first, dup := firstName[s.Name]; dup {
			c.errorf(p+".name", "duplicate server name %q (also at line %d)", s.Name, c.line(first+".name"))
			continue
		}
		firstName[s.Name] = p
	}
	for i := range e.Websites {
		p := yamlfile.Index("websites", i)
		w := &e.Websites[i]
		c.website(p, w)
		if w.Name == "" {
			continue
		}
		for _, name := range []string{w.Name, w.BackendName()} {
			if first, dup := firstName[name]; dup {
				c.errorf(p+".name", "duplicate name %q: the %s at line %d has it (servers and websites share the env's host names)", name, kindOf(first), c.line(first+".name"))
				break
			}
		}
		firstName[w.Name] = p
		firstName[w.BackendName()] = p
	}
	c.browser("browser", &e.Browser)
	if first, taken := firstName[BrowserName]; taken && e.Browser.Enabled {
		c.errorf(first+".name", "name %q is the browser's host name while browser.enabled is true (line %d): rename the %s", BrowserName, c.line("browser.enabled"), kindOf(first))
	}
	if first, taken := firstName[BrowserVNCService]; taken && e.Browser.Enabled && e.Browser.VNC {
		c.errorf(first+".name", "name %q is the gateway's route to the browser's screen while browser.vnc is true (line %d): rename the %s", BrowserVNCService, c.line("browser.vnc"), kindOf(first))
	}
	if e.ServiceDB != nil {
		c.serviceDB("service_db", e.ServiceDB)
	}
	c.gateway("gateway", &e.Gateway)
	return c.errs
}

// browser checks the browser's fields: they mean something only when it is enabled, and it is
// a backend of the gateway, so it needs one.
func (c *checker) browser(p string, b *Browser) {
	switch b.Screenshots {
	case "", ScreenshotsNone, ScreenshotsEachStep:
	default:
		c.errorf(p+".screenshots", "want %s or %s, got %q", ScreenshotsEachStep, ScreenshotsNone, b.Screenshots)
	}
	if !b.Enabled {
		if b.Vision {
			c.errorf(p+".vision", "vision adds tools to the browser: set enabled: true too")
		}
		if b.Screenshots == ScreenshotsEachStep {
			c.errorf(p+".screenshots", "screenshots are of the browser's page: set enabled: true too")
		}
		if b.VNC {
			c.errorf(p+".vnc", "vnc shows the browser live: set enabled: true too")
		}
		return
	}
	c.required(p+".image", b.Image)
	if !c.e.Gateway.On() {
		c.errorf(p+".enabled", "the browser is reached through the gateway only: keep the gateway (remove gateway.enabled: false)")
	}
}

// kindOf names what the field path p (servers[i] or websites[i]) declares.
func kindOf(p string) string {
	if strings.HasPrefix(p, "websites") {
		return "website"
	}
	return "server"
}

// envBackendURL is set in a website's frontend to its backend's URL; the file may not set it.
const envBackendURL = "BACKEND_URL"

func (c *checker) website(p string, w *Website) {
	if c.required(p+".name", w.Name) {
		switch {
		case !dnsLabel.MatchString(w.Name):
			c.errorf(p+".name", "invalid name %q: want a DNS label (a-z, 0-9 and '-', at most 63, starting and ending alphanumeric)", w.Name)
		case !dnsLabel.MatchString(w.BackendName()):
			c.errorf(p+".name", "name %q is too long for its backend's host name %q: at most 55 with a frontend", w.Name, w.BackendName())
		case slices.Contains([]string{nameServiceDB, nameDBWeb, nameDBMCP, nameGateway}, w.Name):
			c.errorf(p+".name", "name %q is reserved for a built-in component", w.Name)
		}
	}
	c.webApp(p+".backend", &w.Backend, w.Database, "")
	if w.Frontend != nil {
		c.webApp(p+".frontend", w.Frontend, false, envBackendURL)
	}
	if w.Database && c.e.ServiceDB == nil {
		c.errorf(p+".database", "database: true needs a service_db")
	}
}

// readyPathProblem says what is wrong with a website's readiness path, "" if nothing: the
// probe sends it as it stands after the app's address, so it must be an absolute path (a query
// allowed) that reaches the app as written: no fragment, which no request carries, and no space
// or control character, which a client escapes into a path the app does not serve.
func readyPathProblem(path string) string {
	if !strings.HasPrefix(path, "/") || strings.HasPrefix(path, "//") {
		return "want an absolute URL path such as /healthz"
	}
	if strings.ContainsFunc(path, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
		return "a space or control character: escape it (%20) or choose a plain path such as /healthz"
	}
	if strings.Contains(path, "#") {
		return "a fragment (#...) is never sent: remove it"
	}
	if _, err := url.ParseRequestURI(path); err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return "not a URL path: " + err.Error()
	}
	return ""
}

// webApp checks one container of a website; database says whether it gets DATABASE_URL, and
// reserved names one more variable the deployer sets ("" for none).
func (c *checker) webApp(p string, a *WebApp, database bool, reserved string) {
	c.required(p+".image", a.Image)
	if a.Port == 0 {
		c.errorf(p+".port", "required: the port the app serves HTTP on, 1-65535")
	} else {
		c.port(p+".port", a.Port)
	}
	if msg := readyPathProblem(a.ReadyPath); msg != "" {
		c.errorf(p+".ready_path", "invalid path %q: %s", a.ReadyPath, msg)
	}
	if a.ReadyTimeout < 0 {
		c.errorf(p+".ready_timeout", "must be positive")
	}
	for i, arg := range a.Command {
		if strings.ContainsRune(arg, 0) {
			c.errorf(yamlfile.Index(p+".command", i), "contains a NUL byte")
		}
	}
	for _, k := range sortedKeys(a.Env) {
		if reserved != "" && k == reserved {
			c.errorf(p+".env."+k, "%s is set by the deployer to the website's backend", k)
			continue
		}
		c.envVar(p+".env."+k, k, a.Env[k], database)
	}
}

func (c *checker) server(p string, s *Server) {
	if c.required(p+".name", s.Name) {
		switch {
		case !dnsLabel.MatchString(s.Name):
			c.errorf(p+".name", "invalid name %q: want a DNS label (a-z, 0-9 and '-', at most 63, starting and ending alphanumeric)", s.Name)
		case slices.Contains([]string{nameServiceDB, nameDBWeb, nameDBMCP, nameGateway}, s.Name):
			c.errorf(p+".name", "name %q is reserved for a built-in component", s.Name)
		}
	}
	if s.URL != "" {
		c.liveServer(p, s)
		return
	}
	c.required(p+".image", s.Image)
	enum(c, p+".transport", s.Transport, TransportHTTP, TransportStdio)
	switch {
	case s.Port == 0 && s.Transport == TransportHTTP:
		c.errorf(p+".port", "required for transport http: a port of 1-65535")
	case s.Port != 0:
		c.port(p+".port", s.Port)
	}
	if s.Transport == TransportStdio && len(s.Command) == 0 {
		c.errorf(p+".command", "required for transport stdio: the program to run behind the bridge")
	}
	switch {
	case !strings.HasPrefix(s.Path, "/"):
		c.errorf(p+".path", "invalid path %q: want an absolute URL path such as /mcp", s.Path)
	case s.Transport == TransportStdio && s.Path != DefaultPath:
		c.errorf(p+".path", "the stdio bridge serves %s only", DefaultPath)
	}
	if s.Database && c.e.ServiceDB == nil {
		c.errorf(p+".database", "database: true needs a service_db")
	}
	for i, arg := range s.Command {
		if strings.ContainsRune(arg, 0) {
			c.errorf(yamlfile.Index(p+".command", i), "contains a NUL byte")
		}
	}
	for _, k := range sortedKeys(s.Env) {
		c.envVar(p+".env."+k, k, s.Env[k], s.Database)
	}
}

func (c *checker) envVar(p, key, val string, database bool) {
	switch {
	case !envVarName.MatchString(key):
		c.errorf(p, "invalid variable name %q: want [A-Za-z_][A-Za-z0-9_]*", key)
	case database && (key == envDatabaseURL || key == envDatabaseSchema):
		c.errorf(p, "%s is set by database: true", key)
	}
	if strings.ContainsRune(val, 0) {
		c.errorf(p, "contains a NUL byte")
	}
	if ref, ok := EnvRef(val); ok && !envVarName.MatchString(ref) {
		c.errorf(p, "invalid reference %q: want env:NAME with NAME a variable name", val)
	}
}

func (c *checker) serviceDB(p string, db *ServiceDB) {
	c.required(p+".image", db.Image)
	for _, f := range []struct {
		path, v string
	}{{p + ".user", db.User}, {p + ".database", db.Database}} {
		if !sqlName.MatchString(f.v) {
			c.errorf(f.path, "invalid name %q: want [A-Za-z_][A-Za-z0-9_]*, at most 63", f.v)
		}
	}
	if strings.ContainsAny(db.Password, "\x00\n") {
		c.errorf(p+".password", "must be one line without NUL bytes")
	}
	c.files(p+".init_sql", db.InitSQL)
	c.files(p+".seed", db.Seed)
	if db.FromSnapshot != "" && !SnapshotName.MatchString(db.FromSnapshot) {
		c.errorf(p+".from_snapshot", "invalid snapshot name %q: want 1-40 of [a-z0-9-], starting and ending with a letter or digit", db.FromSnapshot)
	}
	for _, sc := range []struct {
		path string
		s    *Sidecar
	}{{p + ".web_ui", &db.WebUI}, {p + ".db_mcp", &db.DBMCP}} {
		c.required(sc.path+".image", sc.s.Image)
		c.port(sc.path+".port", sc.s.Port)
	}
}

// files checks that each path names a readable regular file inside the env file's folder:
// what they name is copied or mounted into the service DB, and an env file must not be able
// to hand the host's /etc/passwd to an agent's database.
func (c *checker) files(p string, paths []string) {
	for i, f := range paths {
		fp := yamlfile.Index(p, i)
		if !c.required(fp, f) {
			continue
		}
		var oe *confine.OutsideError
		if _, err := confine.Path(c.e.Dir, f); errors.As(err, &oe) {
			c.errorf(fp, "file %q is outside the env file's folder %s (symbolic links followed): copy it in", f, c.e.Dir)
			continue
		}
		st, err := os.Stat(c.e.Path(f))
		switch {
		case errors.Is(err, os.ErrNotExist):
			c.errorf(fp, "file %q does not exist (relative to %s)", f, c.e.Dir)
		case err != nil:
			c.errorf(fp, "file %q: %v", f, err)
		case !st.Mode().IsRegular():
			c.errorf(fp, "%q is not a regular file", f)
		}
	}
}

func (c *checker) gateway(p string, g *Gateway) {
	if !g.On() {
		if db := c.e.ServiceDB; db != nil && db.DBMCP.Enabled {
			c.errorf(p+".enabled", "db-mcp is reached only through the gateway: disable service_db.db_mcp, or keep the gateway")
		}
		started := len(c.e.Websites) > 0
		for _, s := range c.e.Servers {
			started = started || s.URL == ""
		}
		if !started && len(c.e.Servers) > 0 {
			c.errorf(p+".enabled", "without a gateway, an env of live endpoints (url) only deploys nothing")
		}
	}
	c.required(p+".image", g.Image)
	c.port(p+".port", g.Port)
	enum(c, p+".tool_names", g.ToolNames, ToolNamesAuto, ToolNamesPrefix, ToolNamesNever)
	enum(c, p+".mode", g.Mode, ModeConsistent, ModePerformance)
	enum(c, p+".serialize", g.Serialize, SerializeServer, SerializeEnv)
	for _, f := range []struct {
		field string
		n     int
	}{{"max_conns", g.MaxConns}, {"max_sessions", g.MaxSessions}} {
		if f.n < 0 || f.n > MaxGatewayCap {
			c.errorf(p+"."+f.field, "%d out of range 1-%d (leave it out for the gateway's default)", f.n, MaxGatewayCap)
		}
	}
	for _, role := range sortedKeys(g.Roles) {
		rp := p + ".roles." + role
		if !roleName.MatchString(role) {
			c.errorf(rp, "invalid role %q: want 1-64 of [A-Za-z0-9_.-]", role)
		}
		for i, pat := range g.Roles[role] {
			if !toolPattern.MatchString(pat) {
				c.errorf(yamlfile.Index(rp, i), "invalid tool pattern %q: want 1-128 of [A-Za-z0-9_.*-]", pat)
			}
		}
	}
}

// CheckSharedPorts reports a port clash as if every component of e listened in one network
// namespace (the gateway, the servers, the service DB and its sidecars). Load does not apply
// it: the docker, compose, Kubernetes and VM-with-Docker layouts give each component its own
// namespace, where every component may listen on 8080. A deployer that runs components side by
// side on one host (the process provider, a VM with host networking) calls it before starting.
// Each clash is an [*Error] naming both lines.
func (e *Env) CheckSharedPorts() error {
	c := &checker{e: e}
	first := map[int]string{}
	claim := func(path string, port int) {
		if port == 0 {
			return
		}
		if prev, dup := first[port]; dup {
			c.errorf(path, "port %d clashes with %s (line %d) in a shared network namespace", port, prev, c.line(prev))
			return
		}
		first[port] = path
	}
	claim("gateway.port", e.Gateway.Port)
	for i := range e.Servers {
		claim(yamlfile.Index("servers", i)+".port", e.Servers[i].Port)
	}
	for i, w := range e.Websites {
		claim(yamlfile.Index("websites", i)+".backend.port", w.Backend.Port)
		if w.Frontend != nil {
			claim(yamlfile.Index("websites", i)+".frontend.port", w.Frontend.Port)
		}
	}
	if e.Browser.Enabled {
		claim("browser", BrowserPort)
		if e.Browser.VNC {
			claim("browser.vnc", BrowserVNCPort)
		}
	}
	if db := e.ServiceDB; db != nil {
		claim("service_db", DBPort)
		if db.WebUI.Enabled {
			claim("service_db.web_ui.port", db.WebUI.Port)
		}
		if db.DBMCP.Enabled {
			claim("service_db.db_mcp.port", db.DBMCP.Port)
		}
	}
	return errors.Join(c.errs...)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// liveServer checks a server given by url: an absolute http(s) URL, and none of the fields of a
// server agentenv starts.
func (c *checker) liveServer(p string, s *Server) {
	u, err := url.Parse(s.URL)
	switch {
	case err != nil:
		c.errorf(p+".url", "invalid url %q: %v", s.URL, err)
	case u.Scheme != "http" && u.Scheme != "https" || u.Host == "":
		c.errorf(p+".url", "invalid url %q: want the server's MCP URL, http(s)://HOST[:PORT]/PATH", s.URL)
	}
	for _, f := range []struct {
		name string
		set  bool
	}{
		{"image", s.Image != ""}, {"command", len(s.Command) > 0}, {"env", len(s.Env) > 0}, {"port", s.Port != 0},
		{"transport", s.Transport != ""}, {"path", s.Path != ""}, {"database", s.Database}, {"resources", s.Resources != (Resources{})},
	} {
		if f.set {
			c.errorf(p+"."+f.name, "a server with url is already running: %s is for servers agentenv starts", f.name)
		}
	}
}
