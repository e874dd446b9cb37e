package spec

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv"
)

// ComposeTokenVar is the variable the compose file's gateway reads its bearer token from; it
// must be set when running docker compose up.
const ComposeTokenVar = "AGENTENV_GATEWAY_TOKEN"

// RoleTokensVar is the variable the gateway reads its role tokens from: a JSON object mapping
// each role to its bearer token. Unset means the admin token is the only one.
const RoleTokensVar = "AGENTENV_GATEWAY_ROLE_TOKENS"

// DefaultRole is the role of a caller that names none; it gets a token like the declared roles.
const DefaultRole = "default"

// TokenRoles returns the roles a deployment mints a bearer token for, sorted: every role of
// gateway.roles, and DefaultRole.
func (e *Env) TokenRoles() []string {
	roles := sortedKeys(e.Gateway.Roles)
	if !slices.Contains(roles, DefaultRole) {
		roles = append(roles, DefaultRole)
		slices.Sort(roles)
	}
	return roles
}

// composeNetwork is the one network of a rendered compose file.
const composeNetwork = "agentenv"

// ComposeOptions tune RenderCompose. The zero value is usable for envs without stdio servers.
type ComposeOptions struct {
	// Project is the compose project name. Empty means the env's name.
	Project string
	// Deployment is the value of the agentenv.deployment label on every service and the
	// network. Empty means Project.
	Deployment string
	// AgentenvBinary is the host path of a static Linux agentenv binary, mounted read-only at
	// /agentenv in each stdio server to run the bridge. Required when the env has one. Written
	// as given.
	AgentenvBinary string
	// ComposeDir is the directory the compose file will be written to: bind-mount sources
	// (init_sql, seed) are written relative to it. Empty means absolute paths.
	ComposeDir string
	// DBHealthcheck is the servicedb healthcheck's test. Nil means
	// ["CMD", "pg_isready", "-h", "127.0.0.1", "-U", USER, "-d", DATABASE]; asking over TCP
	// keeps it unhealthy while the image's init scripts run on the socket-only server.
	DBHealthcheck []string
}

// refMarker wraps an env:NAME reference while the compose file is built, so that it becomes
// ${NAME?...} after every literal '$' is escaped. Validation keeps NUL out of values.
var refMarker = regexp.MustCompile("\x00([A-Za-z_][A-Za-z0-9_]*)\x00")

// RenderCompose renders e as a docker compose file: one service per component (servicedb,
// db-web, db-mcp, each server, gateway) on one network, started in the order of
// [Env.Components], with the gateway's port published on 127.0.0.1 at a port the engine picks.
// The gateway reads its token from $AGENTENV_GATEWAY_TOKEN, and env:NAME references become
// ${NAME}, both resolved by docker compose from its environment. The output is deterministic.
func RenderCompose(e *Env, opts ComposeOptions) ([]byte, error) {
	comps, err := e.Components(TopologyOptions{
		LookupEnv: func(name string) (string, bool) { return "\x00" + name + "\x00", true },
	})
	if err != nil {
		return nil, fmt.Errorf("render compose: %w", err)
	}
	project := opts.Project
	if project == "" {
		project = e.Name
	}
	deployment := opts.Deployment
	if deployment == "" {
		deployment = project
	}
	r := &composer{opts: opts, deployment: deployment, configs: map[string]composeConfig{}}
	doc := composeFile{
		Name:     project,
		Services: map[string]composeService{},
		Networks: map[string]composeNet{composeNetwork: {
			Labels: map[string]string{agentenv.LabelDeployment: deployment},
		}},
		Configs: r.configs,
	}
	for _, c := range comps {
		svc, err := r.service(e, c)
		if err != nil {
			return nil, fmt.Errorf("render compose: %s: %w", c.Name, err)
		}
		doc.Services[c.Name] = svc
	}
	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# docker compose file of env %q, rendered by agentenv.\n", e.Name)
	fmt.Fprintf(&buf, "# Run: %s=... docker compose -f FILE up -d\n", ComposeTokenVar)
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("render compose: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("render compose: %w", err)
	}
	return buf.Bytes(), nil
}

// composeFile and the types below are the parts of the compose format we write, in the order
// a reader wants them; maps are written with sorted keys.
type composeFile struct {
	Name     string                    `yaml:"name"`
	Services map[string]composeService `yaml:"services"`
	Networks map[string]composeNet     `yaml:"networks"`
	Configs  map[string]composeConfig  `yaml:"configs,omitempty"`
}

type composeService struct {
	Image       string                      `yaml:"image"`
	Command     []string                    `yaml:"command,omitempty"`
	Environment map[string]string           `yaml:"environment,omitempty"`
	DependsOn   map[string]composeCondition `yaml:"depends_on,omitempty"`
	Healthcheck *composeHealthcheck         `yaml:"healthcheck,omitempty"`
	Ports       []composePort               `yaml:"ports,omitempty"`
	Volumes     []composeVolume             `yaml:"volumes,omitempty"`
	Configs     []composeConfigRef          `yaml:"configs,omitempty"`
	Labels      map[string]string           `yaml:"labels"`
	Networks    []string                    `yaml:"networks"`
	// The component's resources, as the docker provider applies them (swap included in the
	// memory limit; the provider's PIDs default when the file sets none).
	MemLimit     int64   `yaml:"mem_limit,omitempty"`
	MemswapLimit int64   `yaml:"memswap_limit,omitempty"`
	CPUs         float64 `yaml:"cpus,omitempty"`
	PidsLimit    int64   `yaml:"pids_limit,omitempty"`
	// ShmSize is /dev/shm's size (the browser's).
	ShmSize int64 `yaml:"shm_size,omitempty"`
}

type composeCondition struct {
	Condition string `yaml:"condition"`
}

type composeHealthcheck struct {
	Test     []string `yaml:"test"`
	Interval string   `yaml:"interval"`
	Timeout  string   `yaml:"timeout"`
	Retries  int      `yaml:"retries"`
}

// composePort publishes Target on HostIP at a host port the engine picks.
type composePort struct {
	Target   int    `yaml:"target"`
	HostIP   string `yaml:"host_ip"`
	Protocol string `yaml:"protocol"`
}

type composeVolume struct {
	Type     string `yaml:"type"`
	Source   string `yaml:"source"`
	Target   string `yaml:"target"`
	ReadOnly bool   `yaml:"read_only"`
}

type composeConfigRef struct {
	Source string `yaml:"source"`
	Target string `yaml:"target"`
}

type composeConfig struct {
	Content string `yaml:"content"`
}

type composeNet struct {
	Labels map[string]string `yaml:"labels"`
}

// composer holds what rendering one compose file accumulates.
type composer struct {
	opts       ComposeOptions
	deployment string
	configs    map[string]composeConfig
}

func (r *composer) service(e *Env, c Component) (composeService, error) {
	svc := composeService{
		Image:    c.Image,
		Command:  quoteAll(c.Command),
		Networks: []string{composeNetwork},
		Labels: map[string]string{
			agentenv.LabelDeployment: r.deployment,
			agentenv.LabelRole:       string(c.Role),
		},
		MemLimit:     c.Resources.Memory,
		MemswapLimit: c.Resources.Memory,
		CPUs:         c.Resources.CPUs,
		PidsLimit:    c.Resources.Pids,
		ShmSize:      c.ShmSize,
	}
	if svc.PidsLimit == 0 {
		svc.PidsLimit = agentenv.DefaultPidsLimit
	}
	env := map[string]string{}
	for k, v := range c.Env {
		env[k] = quote(v)
	}
	if c.Role == agentenv.RoleGateway {
		env[ComposeTokenVar] = fmt.Sprintf("${%s:?set %s to the gateway's bearer token}", ComposeTokenVar, ComposeTokenVar)
		env[RoleTokensVar] = fmt.Sprintf("${%s:-}", RoleTokensVar) // optional: {"ROLE":"TOKEN",...}
	}
	if len(env) > 0 {
		svc.Environment = env
	}
	for _, a := range c.After {
		cond := "service_started"
		if a == nameServiceDB {
			cond = "service_healthy"
		}
		if svc.DependsOn == nil {
			svc.DependsOn = map[string]composeCondition{}
		}
		svc.DependsOn[a] = composeCondition{Condition: cond}
	}
	switch c.Role {
	case agentenv.RoleGateway, agentenv.RoleDBWeb:
		svc.Ports = []composePort{{Target: c.Port, HostIP: "127.0.0.1", Protocol: "tcp"}}
	case agentenv.RoleMCPServer, agentenv.RoleWebsite:
		if !c.Private { // expose: true, the env's own unauthenticated door
			svc.Ports = []composePort{{Target: c.Port, HostIP: "127.0.0.1", Protocol: "tcp"}}
		}
	case agentenv.RoleServiceDB:
		svc.Healthcheck = r.healthcheck(e.ServiceDB)
	}
	if c.Bridge {
		if r.opts.AgentenvBinary == "" {
			return svc, fmt.Errorf("a stdio server needs ComposeOptions.AgentenvBinary: %w", agentenv.ErrInvalid)
		}
		svc.Volumes = append(svc.Volumes, bind(quote(r.opts.AgentenvBinary), BinaryPath))
	}
	for _, f := range c.Files {
		if f.Source != "" {
			src, err := r.source(f.Source)
			if err != nil {
				return svc, err
			}
			svc.Volumes = append(svc.Volumes, bind(src, f.Target))
			continue
		}
		name := c.Name + "-" + strings.TrimSuffix(filepath.Base(f.Target), filepath.Ext(f.Target))
		r.configs[name] = composeConfig{Content: quote(string(f.Content))}
		svc.Configs = append(svc.Configs, composeConfigRef{Source: name, Target: f.Target})
	}
	return svc, nil
}

func (r *composer) healthcheck(db *ServiceDB) *composeHealthcheck {
	test := r.opts.DBHealthcheck
	if test == nil {
		test = []string{"CMD", "pg_isready", "-h", "127.0.0.1", "-U", db.User, "-d", db.Database}
	}
	return &composeHealthcheck{
		Test:     quoteAll(test),
		Interval: "1s",
		Timeout:  "5s",
		Retries:  max(1, int(db.ReadyTimeout.Seconds())),
	}
}

// source writes a host path as the compose file should name it.
func (r *composer) source(p string) (string, error) {
	abs, err := filepath.Abs(p)
	if err != nil {
		return "", fmt.Errorf("bind source %s: %w", p, err)
	}
	if r.opts.ComposeDir == "" {
		return quote(abs), nil
	}
	dir, err := filepath.Abs(r.opts.ComposeDir)
	if err != nil {
		return "", fmt.Errorf("compose dir %s: %w", r.opts.ComposeDir, err)
	}
	rel, err := filepath.Rel(dir, abs)
	if err != nil {
		return quote(abs), nil
	}
	rel = filepath.ToSlash(rel)
	if !strings.HasPrefix(rel, "../") {
		rel = "./" + rel
	}
	return quote(rel), nil
}

func bind(source, target string) composeVolume {
	return composeVolume{Type: "bind", Source: source, Target: target, ReadOnly: true}
}

// quote escapes '$' for compose interpolation and turns reference markers into ${NAME?...}.
func quote(s string) string {
	s = strings.ReplaceAll(s, "$", "$$")
	return refMarker.ReplaceAllString(s, "$${${1}?${1} is not set}")
}

func quoteAll(ss []string) []string {
	if ss == nil {
		return nil
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = quote(s)
	}
	return out
}
