package harbor

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/egressproxy"
)

// Harbor's defaults for what task.toml leaves unset.
const (
	DefaultAgentTimeout    = 600 * time.Second // [agent].timeout_sec (Harbor's default before it let the agent's own apply)
	DefaultVerifierTimeout = 600 * time.Second // [verifier].timeout_sec, and each step's
	DefaultBuildTimeout    = 600 * time.Second // [environment].build_timeout_sec
	DefaultCPUs            = 1                 // [environment].cpus
	DefaultMemoryMB        = 2048              // [environment].memory_mb
	DefaultStorageMB       = 10240             // [environment].storage_mb
	DefaultCollectTimeout  = 60 * time.Second  // [[verifier.collect]].timeout_sec
	MainService            = "main"            // the compose service the agent works in
)

// Healthcheck defaults, as Harbor's HealthcheckConfig.
const (
	DefaultHealthInterval      = 5 * time.Second
	DefaultHealthTimeout       = 30 * time.Second
	DefaultHealthStartInterval = 5 * time.Second
	DefaultHealthRetries       = 3
)

// Network modes of [environment], [agent] and [verifier].network_mode.
const (
	NetworkPublic    = "public"
	NetworkNone      = "no-network"
	NetworkAllowlist = "allowlist"
)

// SchemaVersions are the task.toml schema versions this package reads.
var SchemaVersions = []string{"1.0", "1.1", "1.2", "1.3", "1.4"}

// Task is one Harbor task folder, read.
type Task struct {
	Dir           string // the folder, absolute
	Name          string // [task].name if set, else the folder's base name
	SchemaVersion string // as written ("1.0" … "1.4"), normalised from the deprecated `version`; "" when unset
	Instruction   string // instruction.md ("" for a multi-step task without one)
	Metadata      map[string]any
	Agent         Agent
	Verifier      Verifier
	Environment   Environment
	Solution      Solution
	Steps         []Step      // [[steps]]; empty for a single-step task
	MCPServers    []MCPServer // [[environment.mcp_servers]]: servers the task declares for the agent
	Warnings      []string    // unknown keys and deprecated spellings, each "task.toml:LINE: key X: ..."

	Description    string     // [task].description
	Authors        []Author   // [task].authors
	Keywords       []string   // [task].keywords
	Source         string     // source
	RewardStrategy string     // multi_step_reward_strategy: "mean" (default for a multi-step task) or "final"; "" for a single-step task
	Artifacts      []Artifact // artifacts: paths copied out of the sandbox after the run
}

// Author is one [task].authors entry.
type Author struct{ Name, Email string }

// Artifact is one artifacts entry (a bare string is its Source).
type Artifact struct {
	Source      string
	Destination string
	Exclude     []string
	Service     string // a compose service; "" or "main" is the agent's container
}

// Agent is [agent] (or a step's [steps.agent], with the task's values where it sets none).
type Agent struct {
	Timeout      time.Duration
	User         string   // a user name or uid; "" is the image's user
	NetworkMode  string   // "" (the environment's), or a Network* mode for this phase
	AllowedHosts []string // with NetworkAllowlist
}

// Verifier is [verifier] (or a step's [steps.verifier]).
type Verifier struct {
	Timeout         time.Duration
	Env             map[string]string
	User            string
	NetworkMode     string
	AllowedHosts    []string
	EnvironmentMode string       // "shared" (default) or "separate"
	Environment     *Environment // [verifier.environment]: the separate verifier's settings (no files of its own)
	Collect         []CollectHook
}

// CollectHook is one [[verifier.collect]]: a command run in a service after the agent phase.
type CollectHook struct {
	Command string
	Service string // default "main"
	Timeout time.Duration
	User    string
}

// Environment is [environment] and the environment/ folder.
type Environment struct {
	Dockerfile    string   // "environment/Dockerfile" relative to Dir, if it exists
	Compose       string   // "environment/docker-compose.yaml" (or .yml) relative to Dir, if it exists
	ComposeSpec   *Compose // the compose file, read (nil without one)
	DockerImage   string   // a prebuilt image ([environment].docker_image); with a Dockerfile too, Harbor runs this one
	BuildTimeout  time.Duration
	CPUs          float64
	MemoryMB      int // normalised from the deprecated `memory` spelling
	StorageMB     int // normalised from the deprecated `storage` spelling
	GPUs          int
	GPUTypes      []string
	AllowInternet bool   // false when the network mode is no-network (or the deprecated allow_internet = false)
	NetworkMode   string // NetworkPublic, NetworkNone or NetworkAllowlist
	AllowedHosts  []string
	Healthcheck   *Healthcheck
	Env           map[string]string // values may hold ${VAR} and ${VAR:-default}, resolved from the host at run time
	OS            string            // "linux" (default) or "windows"
	Workdir       string
	SkillsDir     string
}

// Healthcheck is [environment.healthcheck] (or a step's): a shell command run until it passes.
type Healthcheck struct {
	Command                                       string
	Interval, Timeout, StartPeriod, StartInterval time.Duration
	Retries                                       int
}

// Solution is [solution].
type Solution struct{ Env map[string]string }

// Step is one [[steps]] entry, with its folder steps/NAME/.
type Step struct {
	Name, Instruction string
	Agent             Agent
	Verifier          Verifier
	Dir               string             // the step's folder, absolute: DIR/steps/NAME (its tests/ and solution/ are optional)
	MinReward         map[string]float64 // min_reward: a number gates "reward"; nil gates nothing
	Healthcheck       *Healthcheck
	Artifacts         []Artifact
}

// MCPServer is one [[environment.mcp_servers]] entry.
type MCPServer struct {
	Name, Transport, URL string // Transport: "sse" (default), "streamable-http" ("http" is read as it) or "stdio"
	Command              string // for stdio: run in the environment
	Args                 []string
}

// IsTask reports whether dir holds a task.toml.
func IsTask(dir string) bool {
	fi, err := os.Stat(filepath.Join(dir, "task.toml"))
	return err == nil && fi.Mode().IsRegular()
}

// maxFile bounds task.toml and instruction files.
const maxFile = 4 << 20

// Load reads the task folder dir. A folder without task.toml, a malformed file, a key of the
// wrong type, a missing instruction.md, or an environment with neither Dockerfile, compose
// file nor docker_image is an error naming the file, line and key, wrapping
// agentenv.ErrInvalid. Unknown keys and deprecated spellings are warnings (Task.Warnings).
func Load(dir string) (*Task, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("harbor task %s: %w", dir, err)
	}
	file := filepath.Join(abs, "task.toml")
	if isMissing(file) {
		return nil, &Error{File: file, Msg: "missing: not a Harbor task folder"}
	}
	data, err := readFile(file)
	if err != nil {
		return nil, err
	}
	t, err := parseTask(abs, file, data)
	if err != nil {
		return nil, err
	}
	return t, nil
}

// readFile reads a task folder's file, bounded; a missing one is ErrInvalid.
func readFile(file string) ([]byte, error) {
	fi, err := os.Stat(file)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &Error{File: file, Msg: "missing"}
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	if !fi.Mode().IsRegular() {
		return nil, &Error{File: file, Msg: "not a regular file"}
	}
	if fi.Size() > maxFile {
		return nil, &Error{File: file, Msg: fmt.Sprintf("%d bytes: more than the %d a task file may have", fi.Size(), maxFile)}
	}
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", file, err)
	}
	return data, nil
}

// parseTask reads task.toml's data for the folder dir, then the folder's files.
func parseTask(dir, file string, data []byte) (*Task, error) {
	doc, lines, err := parseTOML(file, data)
	if err != nil {
		return nil, err
	}
	r := &reader{file: file, short: "task.toml", lines: lines}
	t := &Task{Dir: dir, Name: filepath.Base(dir)}
	root := r.table("", doc)
	readRoot(r, root, t)
	root.unknown()
	if dir != "" {
		readFiles(r, t)
	}
	if err := r.err(); err != nil {
		return nil, err
	}
	t.Warnings = r.warnings()
	return t, nil
}

func readRoot(r *reader, root *table, t *Task) {
	sv, hasSV := root.str("schema_version")
	if v, ok := root.str("version"); ok {
		if hasSV {
			r.warn("version", "deprecated spelling of schema_version, ignored: schema_version = %q is set", sv)
		} else {
			r.warn("version", "deprecated spelling, read as schema_version")
			sv, hasSV = v, true
		}
	}
	if hasSV {
		t.SchemaVersion = sv
		if !slices.Contains(SchemaVersions, sv) {
			key := "schema_version"
			if !root.has(key) {
				key = "version"
			}
			r.warn(key, "schema version %q is not one of %s; read as 1.4", sv, strings.Join(SchemaVersions, ", "))
		}
	}
	if pkg := root.sub("task"); pkg.m != nil {
		if name, ok := pkg.str("name"); ok {
			if name == "" {
				r.fail(pkg.key("name"), "must not be empty")
			}
			t.Name = name
		}
		pkg.str("version")
		t.Description, _ = pkg.str("description")
		t.Keywords, _ = pkg.strings("keywords")
		for _, a := range pkg.tables("authors") {
			name, ok := a.str("name")
			if !ok {
				r.fail(a.path, "an author needs a name")
			}
			email, _ := a.str("email")
			a.unknown()
			t.Authors = append(t.Authors, Author{Name: name, Email: email})
		}
		pkg.unknown()
	}
	if v, ok := root.get("metadata"); ok {
		m, isMap := v.(map[string]any)
		if !isMap {
			r.fail("metadata", "want a table, got %s", describe(v))
		}
		t.Metadata = m
	}
	if t.Metadata == nil {
		t.Metadata = map[string]any{}
	}
	t.Source, _ = root.str("source")

	t.Agent = readAgent(root.sub("agent"), Agent{Timeout: DefaultAgentTimeout})
	t.Verifier = readVerifier(root.sub("verifier"), Verifier{Timeout: DefaultVerifierTimeout}, t.SchemaVersion)
	t.Environment, t.MCPServers = readEnvironment(root.sub("environment"), t.SchemaVersion)
	if s := root.sub("solution"); s.m != nil {
		t.Solution.Env = s.strMap("env")
		s.unknown()
	}
	t.Artifacts = readArtifacts(root, "artifacts")

	if root.has("multi_step_reward_mode") {
		r.warn("multi_step_reward_mode", "deprecated (before schema 1.3) and dropped, as Harbor drops it; use multi_step_reward_strategy")
	}
	strategy, hasStrategy := root.str("multi_step_reward_strategy")
	if hasStrategy && strategy != "mean" && strategy != "final" {
		r.fail("multi_step_reward_strategy", "want \"mean\" or \"final\", got %q", strategy)
	}
	names := map[string]string{}
	for _, s := range root.tables("steps") {
		t.Steps = append(t.Steps, readStep(s, t, names))
	}
	if v, ok := root.get("steps"); ok && len(t.Steps) == 0 {
		if list, isList := v.([]any); isList && len(list) == 0 {
			r.fail("steps", "an empty steps array: leave it out for a single-step task")
		}
	}
	if len(t.Steps) > 0 {
		t.RewardStrategy = "mean"
		if hasStrategy {
			t.RewardStrategy = strategy
		}
	} else if hasStrategy {
		r.warn("multi_step_reward_strategy", "ignored: the task has no [[steps]]")
	}
}

func readAgent(a *table, base Agent) Agent {
	out := base
	if d, ok := a.seconds("timeout_sec"); ok {
		out.Timeout = d
	}
	if a.has("user") {
		out.User = a.user("user")
	}
	if mode, hosts, set := readNetwork(a); set {
		out.NetworkMode, out.AllowedHosts = mode, hosts
	}
	a.unknown()
	return out
}

// readVerifier reads [verifier] over base: a step's verifier falls back to the task's user,
// env and environment settings, but has its own timeout default.
func readVerifier(v *table, base Verifier, schema string) Verifier {
	out := base
	if d, ok := v.seconds("timeout_sec"); ok {
		out.Timeout = d
	}
	if v.has("env") {
		out.Env = v.strMap("env")
	}
	if v.has("user") {
		out.User = v.user("user")
	}
	if mode, hosts, set := readNetwork(v); set {
		out.NetworkMode, out.AllowedHosts = mode, hosts
	}
	if mode, ok := v.str("environment_mode"); ok {
		if mode != "shared" && mode != "separate" {
			v.r.fail(v.key("environment_mode"), "want \"shared\" or \"separate\", got %q", mode)
		}
		out.EnvironmentMode = mode
		if mode == "separate" {
			v.r.warn(v.key("environment_mode"), notSeparate)
		}
	}
	if e := v.sub("environment"); e.m != nil {
		env, servers := readEnvironment(e, schema)
		if len(servers) > 0 {
			v.r.warn(e.key("mcp_servers"), "ignored: MCP servers are the agent's, declared in [environment]")
		}
		out.Environment = &env
		if _, set := v.str("environment_mode"); !set {
			v.r.warn(e.path, notSeparate)
		}
		if out.EnvironmentMode == "" {
			out.EnvironmentMode = "separate"
		} else if out.EnvironmentMode == "shared" {
			v.r.fail(v.key("environment"), "environment_mode = \"shared\" conflicts with [%s]: omit one", e.path)
		}
	}
	if out.EnvironmentMode == "" {
		out.EnvironmentMode = "shared"
	}
	if v.has("collect") {
		v.r.warn(v.key("collect"), notCollected)
		out.Collect = nil
		for _, c := range v.tables("collect") {
			h := CollectHook{Service: MainService, Timeout: DefaultCollectTimeout}
			cmd, ok := c.str("command")
			if !ok || strings.TrimSpace(cmd) == "" {
				c.r.fail(c.key("command"), "a collect hook needs a command")
			}
			h.Command = cmd
			if s, ok := c.str("service"); ok {
				h.Service = s
			}
			if d, ok := c.seconds("timeout_sec"); ok {
				h.Timeout = d
			}
			h.User = c.user("user")
			c.unknown()
			out.Collect = append(out.Collect, h)
		}
	}
	v.unknown()
	return out
}

// notSeparate is the warning of a task that asks for a separate verifier environment.
const notSeparate = "not applied: agentenv runs the verifier in the agent's container once the agent has stopped (shared), so a process the agent left running can still reach its files"

// notCollected is the warning of a task with [[verifier.collect]] hooks.
const notCollected = "not run: collect hooks gather a separate verifier's artifacts, and agentenv's verifier runs in the agent's container"

// readNetwork reads network_mode and allowed_hosts; allowed_hosts alone implies allowlist.
func readNetwork(t *table) (mode string, hosts []string, set bool) {
	mode, hasMode := t.str("network_mode")
	hosts, hasHosts := t.strings("allowed_hosts")
	if hasMode && mode != NetworkPublic && mode != NetworkNone && mode != NetworkAllowlist {
		t.r.fail(t.key("network_mode"), "want %q, %q or %q, got %q", NetworkPublic, NetworkNone, NetworkAllowlist, mode)
		return "", nil, false
	}
	if hasHosts && hasMode && mode != NetworkAllowlist {
		t.r.fail(t.key("allowed_hosts"), "only valid with network_mode = %q", NetworkAllowlist)
		return "", nil, false
	}
	if hasHosts && !hasMode {
		mode = NetworkAllowlist
	}
	for i, h := range hosts {
		h = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(h)), ".")
		if err := egressproxy.CheckHost(h); err != nil {
			t.r.fail(fmt.Sprintf("%s[%d]", t.key("allowed_hosts"), i), "want a host name, *.NAME, an address or a CIDR prefix: %v", err)
		}
		hosts[i] = h
	}
	return mode, hosts, hasMode || hasHosts
}

// readEnvironment reads [environment].
func readEnvironment(e *table, schema string) (Environment, []MCPServer) {
	r := e.r
	// allow_internet is the current spelling before schema 1.4, deprecated from it on.
	deprecatedAllowInternet := schema != "" && !slices.Contains(SchemaVersions[:4], schema)
	env := Environment{
		BuildTimeout: DefaultBuildTimeout, CPUs: DefaultCPUs, MemoryMB: DefaultMemoryMB,
		StorageMB: DefaultStorageMB, AllowInternet: true, NetworkMode: NetworkPublic, OS: "linux",
	}
	if d, ok := e.seconds("build_timeout_sec"); ok {
		env.BuildTimeout = d
	}
	if img, ok := e.str("docker_image"); ok {
		if strings.TrimSpace(img) == "" {
			r.fail(e.key("docker_image"), "must not be empty")
		}
		env.DockerImage = img
	}
	if name, ok := e.str("os"); ok {
		name = strings.ToLower(name)
		if name != "linux" && name != "windows" {
			r.fail(e.key("os"), "want \"linux\" or \"windows\", got %q", name)
		}
		env.OS = name
	}
	if c, ok := e.number("cpus"); ok {
		if c <= 0 {
			r.fail(e.key("cpus"), "want more than 0, got %v", c)
		}
		env.CPUs = c
	}
	env.MemoryMB = readSize(e, "memory_mb", "memory", DefaultMemoryMB)
	env.StorageMB = readSize(e, "storage_mb", "storage", DefaultStorageMB)
	if g, ok := e.count("gpus"); ok {
		env.GPUs = g
	}
	env.GPUTypes, _ = e.strings("gpu_types")
	mode, hosts, set := readNetwork(e)
	allow, hasAllow := e.boolean("allow_internet")
	if hasAllow && deprecatedAllowInternet {
		r.warn(e.key("allow_internet"), "deprecated since schema 1.4; use network_mode = %q or %q", NetworkPublic, NetworkNone)
	}
	switch {
	case set:
		env.NetworkMode, env.AllowedHosts = mode, hosts
		if hasAllow && allow != (mode != NetworkNone) {
			r.warn(e.key("allow_internet"), "ignored: network_mode = %q is set", mode)
		}
	case hasAllow && !allow:
		env.NetworkMode = NetworkNone
	}
	env.AllowInternet = env.NetworkMode != NetworkNone
	env.Env = e.strMap("env")
	env.Workdir, _ = e.str("workdir")
	env.SkillsDir, _ = e.str("skills_dir")
	if h := e.sub("healthcheck"); h.m != nil {
		env.Healthcheck = readHealthcheck(h)
	}
	var servers []MCPServer
	seen := map[string]bool{}
	for _, s := range e.tables("mcp_servers") {
		m := MCPServer{Transport: "sse"}
		m.Name, _ = s.str("name")
		if m.Name == "" {
			r.fail(s.key("name"), "an MCP server needs a name")
		} else if seen[m.Name] {
			r.fail(s.key("name"), "MCP server %q declared twice", m.Name)
		}
		seen[m.Name] = true
		if tr, ok := s.str("transport"); ok {
			if tr == "http" {
				tr = "streamable-http"
			}
			m.Transport = tr
		}
		m.URL, _ = s.str("url")
		m.Command, _ = s.str("command")
		m.Args, _ = s.strings("args")
		switch m.Transport {
		case "sse", "streamable-http":
			if m.URL == "" && !wrongType(s.m, "url") {
				r.fail(s.key("url"), "required for transport %q", m.Transport)
			}
		case "stdio":
			if m.Command == "" && !wrongType(s.m, "command") {
				r.fail(s.key("command"), "required for transport \"stdio\"")
			}
		default:
			r.fail(s.key("transport"), "want \"sse\", \"streamable-http\" or \"stdio\", got %q", m.Transport)
		}
		s.unknown()
		servers = append(servers, m)
	}
	e.unknown()
	return env, servers
}

// readSize reads a size in MiB from key, or from the deprecated spelling old ("2G", "512M").
func readSize(e *table, key, old string, def int) int {
	n, hasNew := e.count(key)
	if !hasNew {
		n = def
	}
	v, hasOld := e.get(old)
	if !hasOld {
		return n
	}
	e.r.warn(e.key(old), "deprecated spelling; use %s", key)
	s, isStr := v.(string)
	if !isStr {
		e.r.fail(e.key(old), "want a size such as \"2G\" or \"512M\", got %s", describe(v))
		return n
	}
	mb, err := parseSize(s)
	if err != nil {
		e.r.fail(e.key(old), "%v", err)
		return n
	}
	if hasNew && mb != n {
		e.r.fail(e.key(old), "%q (%d MB) conflicts with %s = %d", s, mb, key, n)
	}
	return mb
}

// parseSize reads Harbor's "2G", "512M", "1024K" as MiB.
func parseSize(s string) (int, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	var mult float64
	switch {
	case strings.HasSuffix(u, "G"):
		mult = 1024
	case strings.HasSuffix(u, "M"):
		mult = 1
	case strings.HasSuffix(u, "K"):
		mult = 1.0 / 1024
	default:
		return 0, fmt.Errorf("want a size such as \"2G\" or \"512M\", got %q", s)
	}
	f, err := strconv.ParseFloat(u[:len(u)-1], 64)
	if err != nil || f < 0 || f > 1<<30 {
		return 0, fmt.Errorf("want a size such as \"2G\" or \"512M\", got %q", s)
	}
	return int(f * mult), nil
}

func readHealthcheck(h *table) *Healthcheck {
	hc := &Healthcheck{Interval: DefaultHealthInterval, Timeout: DefaultHealthTimeout, StartInterval: DefaultHealthStartInterval, Retries: DefaultHealthRetries}
	cmd, ok := h.str("command")
	if !ok || strings.TrimSpace(cmd) == "" {
		h.r.fail(h.key("command"), "a healthcheck needs a command")
	}
	hc.Command = cmd
	if d, ok := h.seconds("interval_sec"); ok {
		hc.Interval = d
	}
	if d, ok := h.seconds("timeout_sec"); ok {
		hc.Timeout = d
	}
	if d, ok := h.seconds("start_period_sec"); ok {
		hc.StartPeriod = d
	}
	if d, ok := h.seconds("start_interval_sec"); ok {
		hc.StartInterval = d
	}
	if n, ok := h.count("retries"); ok {
		hc.Retries = n
	}
	h.unknown()
	return hc
}

func readArtifacts(t *table, k string) []Artifact {
	v, ok := t.get(k)
	if !ok {
		return nil
	}
	list, isList := v.([]any)
	if !isList {
		t.r.fail(t.key(k), "want an array, got %s", describe(v))
		return nil
	}
	var out []Artifact
	for i, e := range list {
		p := fmt.Sprintf("%s[%d]", t.key(k), i)
		switch x := e.(type) {
		case string:
			out = append(out, Artifact{Source: x})
		case map[string]any:
			a := t.r.table(p, x)
			src, ok := a.str("source")
			if !ok || src == "" {
				t.r.fail(a.key("source"), "an artifact needs a source")
			}
			dst, _ := a.str("destination")
			if dst != "" {
				a.r.warn(a.key("destination"), "not applied: agentenv keeps an artifact under its path in the sandbox")
			}
			ex, _ := a.strings("exclude")
			if len(ex) > 0 {
				a.r.warn(a.key("exclude"), "not applied: every file of the folder is kept")
			}
			svc, _ := a.str("service")
			a.unknown()
			out = append(out, Artifact{Source: src, Destination: dst, Exclude: ex, Service: svc})
		default:
			t.r.fail(p, "want a path or a table, got %s", describe(e))
		}
	}
	for i, a := range out {
		if slices.Contains(strings.Split(filepath.ToSlash(a.Source), "/"), "..") {
			t.r.fail(fmt.Sprintf("%s[%d]", t.key(k), i), "source %q must not contain ..", a.Source)
		}
	}
	return out
}

func readStep(s *table, t *Task, names map[string]string) Step {
	r := s.r
	st := Step{}
	name, ok := s.str("name")
	switch {
	case !ok || name == "":
		r.fail(s.key("name"), "a step needs a name (its folder under steps/)")
	case name == "." || name == ".." || strings.ContainsAny(name, `/\`) || strings.ContainsRune(name, 0):
		r.fail(s.key("name"), "%q cannot be a folder name under steps/", name)
	case names[name] != "":
		r.fail(s.key("name"), "step %q declared twice (first at %s)", name, names[name])
	default:
		names[name] = s.path
	}
	st.Name = name
	st.Agent = readAgent(s.sub("agent"), t.Agent)
	// A step's verifier takes the task's user, env and environment (mode) where it sets none; its
	// timeout, network and collect hooks are its own.
	base := t.Verifier
	base.Timeout, base.NetworkMode, base.AllowedHosts, base.Collect = DefaultVerifierTimeout, "", nil, nil
	st.Verifier = readVerifier(s.sub("verifier"), base, t.SchemaVersion)
	if v, ok := s.get("min_reward"); ok {
		switch x := v.(type) {
		case int64:
			st.MinReward = map[string]float64{"reward": float64(x)}
		case float64:
			st.MinReward = map[string]float64{"reward": x}
		case map[string]any:
			st.MinReward = map[string]float64{}
			m := r.table(s.key("min_reward"), x)
			for k := range x {
				if f, ok := m.number(k); ok {
					st.MinReward[k] = f
				}
			}
		default:
			r.fail(s.key("min_reward"), "want a number or a table of numbers, got %s", describe(v))
		}
	}
	if h := s.sub("healthcheck"); h.m != nil {
		st.Healthcheck = readHealthcheck(h)
	}
	st.Artifacts = readArtifacts(s, "artifacts")
	s.unknown()
	return st
}

// readFiles reads what task.toml points at: the instruction, the environment, the steps.
func readFiles(r *reader, t *Task) {
	instr := filepath.Join(t.Dir, "instruction.md")
	if b, err := readFile(instr); err == nil {
		t.Instruction = string(b)
	} else if len(t.Steps) == 0 || !errors.Is(err, agentenv.ErrInvalid) || !isMissing(instr) {
		r.errs = append(r.errs, err)
	}
	for i := range t.Steps {
		st := &t.Steps[i]
		if st.Name == "" || strings.ContainsAny(st.Name, `/\`) || st.Name == "." || st.Name == ".." {
			continue
		}
		st.Dir = filepath.Join(t.Dir, "steps", st.Name)
		if fi, err := os.Stat(st.Dir); err != nil || !fi.IsDir() {
			r.fail(fmt.Sprintf("steps[%d].name", i), "no folder steps/%s/ for this step", st.Name)
			continue
		}
		b, err := readFile(filepath.Join(st.Dir, "instruction.md"))
		if err != nil {
			r.errs = append(r.errs, err)
			continue
		}
		st.Instruction = string(b)
	}
	env := &t.Environment
	if isFile(filepath.Join(t.Dir, "environment", "Dockerfile")) {
		env.Dockerfile = filepath.Join("environment", "Dockerfile")
	}
	yamlC, ymlC := filepath.Join("environment", "docker-compose.yaml"), filepath.Join("environment", "docker-compose.yml")
	switch {
	case isFile(filepath.Join(t.Dir, yamlC)):
		env.Compose = yamlC
		if isFile(filepath.Join(t.Dir, ymlC)) {
			r.warns = append(r.warns, warning{1 << 30, ymlC + ": both docker-compose.yaml and docker-compose.yml: read the .yaml"})
		}
	case isFile(filepath.Join(t.Dir, ymlC)):
		env.Compose = ymlC
	}
	if env.Compose != "" {
		c, err := LoadCompose(filepath.Join(t.Dir, env.Compose))
		if err != nil {
			r.errs = append(r.errs, err)
		} else {
			env.ComposeSpec = c
			if c.Services[MainService] == nil && env.Dockerfile == "" && env.DockerImage == "" {
				r.errs = append(r.errs, &Error{File: filepath.Join(t.Dir, env.Compose), Key: "services", Msg: "no service \"main\", and no environment/Dockerfile or docker_image to make it from"})
			}
		}
	}
	if env.Dockerfile == "" && env.Compose == "" && env.DockerImage == "" {
		r.errs = append(r.errs, &Error{File: filepath.Join(t.Dir, "environment"), Msg: "no Dockerfile, docker-compose.yaml or [environment].docker_image: nothing to run the task in"})
	}
}

func isFile(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular()
}

func isMissing(p string) bool {
	_, err := os.Lstat(p)
	return errors.Is(err, fs.ErrNotExist)
}

// wrongType reports whether m sets k to something other than a string, an error already
// reported.
func wrongType(m map[string]any, k string) bool {
	v, ok := m[k]
	if !ok {
		return false
	}
	_, isStr := v.(string)
	return !isStr
}
