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
// the DB web UI and db-mcp, which may start in parallel; then the gateway. An env:NAME reference
// that LookupEnv cannot resolve is an [*Error].
func (e *Env) Components(opts TopologyOptions) ([]Component, error) {
	host := opts.Host
	if host == nil {
		host = func(name string) string { return name }
	}
	lookup := opts.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	c := &checker{e: e}
	var out []Component
	var dbAfter []string
	db := e.ServiceDB
	var pw DBPasswords
	if db != nil {
		c.checkDBRoles(e)
		if opts.DB != nil {
			pw = *opts.DB
		} else {
			pw = e.derivedDBPasswords()
		}
		for _, r := range e.DBRoles() {
			if pw.Roles[r.Name] == "" {
				c.errorf("service_db", "no password for role %s", r.Name)
			}
		}
		if opts.Store == nil {
			comp := e.serviceDBComponent(pw)
			if opts.SnapshotImage != "" {
				comp.Image = opts.SnapshotImage
				comp.Files = slices.DeleteFunc(comp.Files, func(f File) bool { return f.Target != rolesFile })
			}
			out = append(out, comp)
			dbAfter = []string{nameServiceDB}
		}
	}
	// dbURL is the DSN a component uses as role, which is also the name of the schema it
	// sets search_path to ("" for none).
	dbURL := func(role, schema string) string {
		if st := opts.Store; st != nil {
			return st.URL(db, role, pw.Roles[role], schema)
		}
		return db.URL(net.JoinHostPort(host(nameServiceDB), strconv.Itoa(DBPort)), role, pw.Roles[role], schema)
	}
	var servers []string
	for i := range e.Servers {
		s := &e.Servers[i]
		p := yamlfile.Index("servers", i)
		if s.URL != "" {
			// A live endpoint: no component, the gateway reaches it where it runs.
			servers = append(servers, s.Name+"="+s.URL)
			continue
		}
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
		if !e.Gateway.On() {
			comp.Private = false // no gateway: the server's own port is its door
		}
		if s.Database {
			// Only a server that uses the service DB waits for it; the others start beside it.
			comp.After = dbAfter
		}
		if s.Transport == TransportStdio {
			comp.Bridge = true
			comp.Command = append([]string{BinaryPath, "stdio-bridge", "--listen", ":" + strconv.Itoa(s.Port), "--"}, s.Command...)
		}
		if len(s.Env) > 0 || s.Database {
			comp.Env = map[string]string{}
		}
		for _, k := range sortedKeys(s.Env) {
			v := s.Env[k]
			if ref, ok := EnvRef(v); ok {
				if opts.Pass != nil && !slices.Contains(opts.Pass, ref) {
					c.errorf(p+".env."+k, "env:%s is not passed to deployments: allow it with --pass-env %s, or list it in [env] pass of the config", ref, ref)
				} else if v, ok = lookup(ref); !ok {
					c.errorf(p+".env."+k, "%s is not set in the deployer's environment", ref)
				}
			}
			comp.Env[k] = v
		}
		if s.Database && db != nil {
			comp.Env[envDatabaseURL] = dbURL(s.Schema(), s.Schema())
			comp.Env[envDatabaseSchema] = s.Schema()
		}
		out = append(out, comp)
		servers = append(servers, fmt.Sprintf("%s=http://%s%s", s.Name, net.JoinHostPort(host(s.Name), strconv.Itoa(s.Port)), s.Path))
	}
	if db != nil && db.WebUI.Enabled {
		out = append(out, Component{
			Role:         agentenv.RoleDBWeb,
			Name:         nameDBWeb,
			Image:        db.WebUI.Image,
			Env:          map[string]string{"ADMINER_DEFAULT_SERVER": opts.Store.adminerServer(host(nameServiceDB))},
			Port:         db.WebUI.Port,
			After:        dbAfter,
			ReadyTimeout: DefaultReadyTimeout,
			Resources:    db.WebUI.Resources,
		})
	}
	if db != nil && db.DBMCP.Enabled {
		out = append(out, Component{
			Role:         agentenv.RoleDBMCP,
			Name:         nameDBMCP,
			Image:        db.DBMCP.Image,
			Command:      []string{BinaryPath, "serve", "db-mcp", "--listen", ":" + strconv.Itoa(db.DBMCP.Port)},
			Env:          map[string]string{envDatabaseURL: dbURL(DBRoleDBMCP, "")},
			Port:         db.DBMCP.Port,
			Path:         DefaultPath,
			After:        dbAfter,
			ReadyTimeout: DefaultReadyTimeout,
			Resources:    db.DBMCP.Resources,
			Private:      true,
		})
	}
	var serverNames []string
	for _, s := range e.Servers {
		if s.URL == "" { // a live endpoint is no component to wait for
			serverNames = append(serverNames, s.Name)
		}
	}
	if db != nil && db.DBMCP.Enabled {
		// db-mcp is one more backend of the gateway: its tools join the union, behind the
		// gateway's tokens and role rules, and it has no door of its own.
		servers = append(servers, fmt.Sprintf("%s=http://%s%s", nameDBMCP, net.JoinHostPort(host(nameDBMCP), strconv.Itoa(db.DBMCP.Port)), DefaultPath))
		serverNames = append(serverNames, nameDBMCP)
	}
	if e.Gateway.On() {
		out = append(out, Component{
			Role:         agentenv.RoleGateway,
			Name:         nameGateway,
			Image:        e.Gateway.Image,
			Command:      e.gatewayCommand(opts.TokenFile, servers),
			Port:         e.Gateway.Port,
			Path:         DefaultPath,
			After:        serverNames,
			ReadyTimeout: e.gatewayReadyTimeout(),
			Resources:    e.Gateway.Resources,
		})
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	for i := range out {
		out[i].NonRoot = !out[i].Bridge && len(out[i].Command) > 0 && out[i].Command[0] == BinaryPath
	}
	if db != nil && db.WebUI.Enabled { // the DB web UI is also the gateway's /svc/db-web/
		web := fmt.Sprintf("%s=http://%s", nameDBWeb, net.JoinHostPort(host(nameDBWeb), strconv.Itoa(db.WebUI.Port)))
		for i := range out {
			if out[i].Role == agentenv.RoleGateway {
				out[i].Command = append(out[i].Command, "--service", web)
			}
		}
	}
	return out, nil
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
	for _, s := range e.Servers {
		if s.Database {
			fmt.Fprintf(&schemas, "CREATE SCHEMA IF NOT EXISTS %s;\n", s.Schema())
		}
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
