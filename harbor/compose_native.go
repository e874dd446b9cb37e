package harbor

import (
	"fmt"
	"maps"
	"math"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

// networkStep is the id of the step that makes a compose environment's private network.
const networkStep = "network"

// Harbor's container paths of the agent's and the verifier's logs.
const (
	AgentLogsDir    = "/logs/agent"
	VerifierLogsDir = "/logs/verifier"
)

// composeSteps are the steps of t's docker-compose environment: a deploy_network step; a
// deploy_volume step per named volume a service mounts (the services that mount it depend on
// it, and mount it at the path their NAME:/path[:ro] says); a deploy_sandbox step per service
// other than main, in depends_on order, each on the network
// under its service name and depending on the services it depends_on (a service_healthy
// dependency's step runs that service's healthcheck, so the steps after it start once it has
// passed; a service_completed_successfully dependency's step waits for that service to exit 0,
// wait_exit); and the main container (step "container") on the network as "main". Harbor's
// variables are filled in where compose would interpolate them. A service's entrypoint and
// command become the sandbox's command, which the image's own ENTRYPOINT, if it has one, still
// runs (SandboxSpec has no entrypoint). What agentenv cannot run (main's user, a build target,
// main as a service that completes, a volume's mode other than ro or rw) is an error naming the
// file and the key, wrapping agentenv.ErrInvalid; LoadCompose has refused host binds and
// anonymous volumes already.
func composeSteps(t *Task) ([]step, error) {
	file := filepath.Join(t.Dir, t.Environment.Compose)
	c := t.Environment.ComposeSpec
	if c == nil {
		var err error
		if c, err = LoadCompose(file); err != nil {
			return nil, err
		}
	}
	cs := &composer{t: t, c: c, file: file, dir: filepath.Dir(file), ids: map[string]string{c.Main: sandboxStep}, runToEnd: map[string]bool{}, volumes: map[string]string{}}
	for _, name := range c.Order {
		for dep, cond := range c.Services[name].DependsOn {
			if cond != ConditionCompleted {
				continue
			}
			if dep == c.Main {
				return nil, cs.errorf(name, "depends_on."+dep+".condition", "%s: the main container is the agent's, kept running; it never completes", cond)
			}
			cs.runToEnd[dep] = true
		}
	}
	cs.vars = map[string]string{
		"CPUS":                   strconv.FormatFloat(t.Environment.CPUs, 'f', -1, 64),
		"MEMORY":                 strconv.Itoa(t.Environment.MemoryMB) + "M",
		"TEST_DIR":               TestsDir,
		"CONTEXT_DIR":            filepath.Join(t.Dir, "environment"),
		"MAIN_IMAGE_NAME":        cs.mainImageName(),
		"ENV_AGENT_LOGS_PATH":    AgentLogsDir,
		"ENV_VERIFIER_LOGS_PATH": VerifierLogsDir,
	}
	order := composeOrder(c)
	for _, name := range order {
		if name == c.Main {
			continue
		}
		id := serviceStep(name)
		if len(id) > 64 || slices.Contains(slices.Collect(maps.Values(cs.ids)), id) {
			return nil, cs.errorf(name, "", "the service's name makes the step id %q, too long or taken by another service", id)
		}
		cs.ids[name] = id
	}
	steps := []step{{"id": networkStep, "type": task.TypeDeployNetwork}}
	for _, name := range c.Volumes { // sorted
		if !cs.mounted(name) {
			continue
		}
		id := "vol_" + badIDChars.ReplaceAllString(name, "_")
		if len(id) > 64 || slices.Contains(slices.Collect(maps.Values(cs.volumes)), id) {
			return nil, fmt.Errorf("%s: volumes.%s: the volume's name makes the step id %q, too long or taken by another volume: %w", file, name, id, agentenv.ErrInvalid)
		}
		cs.volumes[name] = id
		steps = append(steps, step{"id": id, "type": task.TypeDeployVolume, "depends_on": []string{}})
	}
	for _, name := range order {
		var s step
		var err error
		if name == c.Main {
			s, err = cs.main()
		} else {
			s, err = cs.service(c.Services[name])
		}
		if err != nil {
			return nil, err
		}
		steps = append(steps, s)
	}
	if c.Services[c.Main] == nil { // main is Harbor's: environment/Dockerfile, depending on nothing
		s, err := cs.main()
		if err != nil {
			return nil, err
		}
		steps = append(steps, s)
	}
	return steps, nil
}

// badIDChars are what a service name may hold that a step id may not.
var badIDChars = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// serviceStep is the id of the deploy_sandbox step of compose service name (not the main one).
func serviceStep(name string) string { return "svc_" + badIDChars.ReplaceAllString(name, "_") }

// composer maps one compose file onto steps.
type composer struct {
	t    *Task
	c    *Compose
	file string // the compose file
	dir  string // its folder, which build contexts are relative to
	vars map[string]string
	ids  map[string]string // service -> step id
	// runToEnd are the services another depends on with service_completed_successfully: their
	// steps end once the service has exited 0 (wait_exit).
	runToEnd map[string]bool
	// volumes are the named volumes a service mounts -> their deploy_volume step ids.
	volumes map[string]string
}

// mounted reports whether a service mounts the named volume name.
func (cs *composer) mounted(name string) bool {
	for _, svc := range cs.c.Services {
		for _, v := range svc.Volumes {
			if src, _, _ := strings.Cut(v, ":"); src == name {
				return true
			}
		}
	}
	return false
}

// errorf is an error naming the compose file and services.NAME.key.
func (cs *composer) errorf(service, key, format string, args ...any) error {
	p := "services." + service
	if key != "" {
		p += "." + key
	}
	return fmt.Errorf("%s: %s: %s: %w", cs.file, p, fmt.Sprintf(format, args...), agentenv.ErrInvalid)
}

// fill interpolates s as compose does, Harbor's variables before this host's environment: see
// interpolate.
func (cs *composer) fill(s string) string { return interpolate(s, cs.vars) }

// interpolate fills s as compose and Harbor's task.toml do: ${VAR} from vars, else this host's
// environment, with ${VAR:-default} and ${VAR-default}, and $$ for a dollar.
func interpolate(s string, vars map[string]string) string {
	return os.Expand(s, func(name string) string {
		if name == "$" {
			return "$"
		}
		name, def, colon := strings.Cut(name, ":-")
		dash := false
		if !colon {
			name, def, dash = strings.Cut(name, "-")
		}
		if v, ok := vars[name]; ok {
			return v
		}
		if v, ok := os.LookupEnv(name); ok && (v != "" || !colon) {
			return v
		}
		if colon || dash {
			return def
		}
		return ""
	})
}

func (cs *composer) fillAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = cs.fill(s)
	}
	return out
}

// mainImageName is ${MAIN_IMAGE_NAME}: the task's docker_image, else the name Harbor gives the
// main image it builds (agentenv's build has its own name, in the container step's outputs).
func (cs *composer) mainImageName() string {
	if cs.t.Environment.DockerImage != "" {
		return cs.t.Environment.DockerImage
	}
	return "hb__" + strings.ToLower(badIDChars.ReplaceAllString(filepath.Base(cs.t.Dir), "_"))
}

// isMainImage reports whether a service's image is written as ${MAIN_IMAGE_NAME}.
func isMainImage(image string) bool {
	s := strings.TrimSpace(image)
	return s == "${MAIN_IMAGE_NAME}" || s == "$MAIN_IMAGE_NAME"
}

// common fills in what every service's step has: its network, alias, volumes, dependencies,
// command, environment, working directory, healthcheck, and the refusals.
func (cs *composer) common(svc *Service, s step) error {
	name := svc.Name
	if svc.User != "" {
		if name == cs.c.Main {
			return cs.errorf(name, "user", "not supported on main: the agent's container runs as its image's user, and [agent] user and [verifier] user say who the agent and the tests run as")
		}
		s["user"] = cs.fill(svc.User)
	}
	deps := []string{networkStep}
	var mounts []map[string]any
	for i, v := range svc.Volumes {
		src, rest, _ := strings.Cut(v, ":")
		if strings.HasPrefix(src, "${") {
			continue // Harbor's log folders from the host: agentenv copies logs out itself
		}
		key := fmt.Sprintf("volumes[%d]", i)
		target, mode, _ := strings.Cut(rest, ":")
		target = cs.fill(target)
		if !strings.HasPrefix(target, "/") || path.Clean(target) == "/" {
			return cs.errorf(name, key, "volume %q: want an absolute path other than / to mount it at, got %q", src, target)
		}
		m := map[string]any{"volume": cs.volumes[src], "path": target}
		switch mode {
		case "", "rw":
		case "ro":
			m["read_only"] = true
		default:
			return cs.errorf(name, key, "volume %q: mode %q: not supported; want ro or rw", src, mode)
		}
		mounts = append(mounts, m)
		if !slices.Contains(deps, cs.volumes[src]) {
			deps = append(deps, cs.volumes[src])
		}
	}
	if len(mounts) > 0 {
		s["volumes"] = mounts
	}
	for _, dep := range slices.Sorted(maps.Keys(svc.DependsOn)) {
		switch cond := svc.DependsOn[dep]; cond {
		case ConditionHealthy:
			if cs.runToEnd[dep] {
				break // its step waits for its successful end, which is more
			}
			if cs.healthcheck(dep) == nil {
				return cs.errorf(name, "depends_on."+dep+".condition", "%s, but service %s has no healthcheck", cond, dep)
			}
		}
		deps = append(deps, cs.ids[dep])
	}
	s["network"], s["aliases"], s["depends_on"] = networkStep, []string{name}, deps
	s["cap_add"] = task.ContainerCaps
	if cmd := cs.fillAll(append(slices.Clone(svc.Entrypoint), svc.Command...)); len(cmd) > 0 {
		s["command"] = cmd
	}
	if len(svc.Environment) > 0 {
		env := map[string]string{}
		for k, v := range svc.Environment {
			env[k] = cs.fill(v)
		}
		s["env"] = env
	}
	if svc.WorkingDir != "" {
		s["workdir"] = cs.fill(svc.WorkingDir)
	}
	if cs.runToEnd[name] {
		s["wait_exit"] = true // and no healthcheck: an exited container runs none
	} else if h := cs.healthcheck(name); h != nil {
		s["healthcheck"] = h
	}
	return nil
}

// service is the deploy_sandbox step of a service other than main.
func (cs *composer) service(svc *Service) (step, error) {
	s := step{"id": cs.ids[svc.Name], "type": task.TypeDeploySandbox}
	if err := cs.common(svc, s); err != nil {
		return nil, err
	}
	switch {
	case svc.Build != nil:
		b, err := cs.build(svc.Name, svc.Build)
		if err != nil {
			return nil, err
		}
		s["build"] = b
	case isMainImage(svc.Image):
		if err := cs.mainImage(s); err != nil {
			return nil, err
		}
	default:
		s["image"] = cs.fill(svc.Image)
	}
	if svc.CPUs != "" {
		cpus, err := strconv.ParseFloat(cs.fill(svc.CPUs), 64)
		if err != nil || cpus <= 0 {
			return nil, cs.errorf(svc.Name, "deploy.resources.limits.cpus", "want a number of CPUs above 0, got %q", cs.fill(svc.CPUs))
		}
		s["cpus"] = cpus
	}
	if svc.Memory != "" {
		mb, err := memoryMB(cs.fill(svc.Memory))
		if err != nil {
			return nil, cs.errorf(svc.Name, "deploy.resources.limits.memory", "%v", err)
		}
		s["memory_mb"] = mb
	}
	cs.timeout(s)
	return s, nil
}

// main is the container step: the task's container (docker_image, main's build or image, or
// environment/Dockerfile) on the network as main, with the task's resources and environment,
// main's compose command (else kept alive by sleep) and working directory, and the task's
// healthcheck (else main's).
func (cs *composer) main() (step, error) {
	s := containerStep(cs.t)
	svc := cs.c.Services[cs.c.Main]
	if svc == nil {
		s["network"], s["aliases"], s["depends_on"] = networkStep, []string{cs.c.Main}, []string{networkStep}
		if h := cs.healthcheck(cs.c.Main); h != nil {
			s["healthcheck"] = h
		}
		cs.timeout(s)
		return s, nil
	}
	own := step{}
	if err := cs.common(svc, own); err != nil {
		return nil, err
	}
	for k, v := range own {
		switch k {
		case "env":
			env := v.(map[string]string)
			if prev, ok := s["env"].(map[string]string); ok {
				for k, v := range prev { // [environment].env over the compose file's
					env[k] = v
				}
			}
			s["env"] = env
		default:
			s[k] = v
		}
	}
	if err := cs.mainImage(s); err != nil {
		return nil, err
	}
	cs.timeout(s)
	return s, nil
}

// mainImage sets s's image or build to the main container's: the task's docker_image, else
// main's build, else main's image (unless it is ${MAIN_IMAGE_NAME}), else environment/Dockerfile.
func (cs *composer) mainImage(s step) error {
	delete(s, "image")
	delete(s, "build")
	env := cs.t.Environment
	svc := cs.c.Services[cs.c.Main]
	switch {
	case env.DockerImage != "":
		s["image"] = env.DockerImage
		return nil
	case svc != nil && svc.Build != nil:
		b, err := cs.build(cs.c.Main, svc.Build)
		if err != nil {
			return err
		}
		s["build"] = b
	case svc != nil && svc.Image != "" && !isMainImage(svc.Image):
		s["image"] = cs.fill(svc.Image)
		return nil
	case env.Dockerfile != "":
		s["build"] = map[string]any{"context": "environment", "dockerfile": filepath.ToSlash(strings.TrimPrefix(env.Dockerfile, "environment/"))}
	default:
		return fmt.Errorf("%s: services.%s: the main container needs a build, an image, environment/Dockerfile or [environment].docker_image: %w", cs.file, cs.c.Main, agentenv.ErrInvalid)
	}
	return nil
}

// build is a deploy_sandbox build of a service's: its context relative to the compose file's
// folder (so ${CONTEXT_DIR} or "." is environment/), which must be inside the task folder.
func (cs *composer) build(service string, b *Build) (map[string]any, error) {
	if b.Target != "" {
		return nil, cs.errorf(service, "build.target", "not supported: a build target; build the stage the service runs as the last")
	}
	ctx := cs.fill(b.Context)
	if !filepath.IsAbs(ctx) {
		ctx = filepath.Join(cs.dir, ctx)
	}
	rel, err := filepath.Rel(cs.t.Dir, ctx)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return nil, cs.errorf(service, "build.context", "%q is outside the task folder", b.Context)
	}
	out := map[string]any{"context": filepath.ToSlash(rel), "dockerfile": filepath.ToSlash(cs.fill(b.Dockerfile))}
	if len(b.Args) > 0 {
		args := map[string]string{}
		for k, v := range b.Args {
			args[k] = cs.fill(v)
		}
		out["args"] = args
	}
	return out, nil
}

// healthcheck is the deploy_sandbox healthcheck of a service: for main, the task's
// [environment.healthcheck] if it has one; else the service's compose healthcheck; nil if
// neither (or it is disabled).
func (cs *composer) healthcheck(service string) map[string]any {
	if h := cs.t.Environment.Healthcheck; service == cs.c.Main && h != nil {
		return taskHealthcheck(h)
	}
	svc := cs.c.Services[service]
	if svc == nil || svc.Healthcheck == nil || svc.Healthcheck.Disable || len(svc.Healthcheck.Test) < 2 {
		return nil
	}
	h := svc.Healthcheck
	cmd := cs.fill(strings.Join(h.Test[1:], " "))
	if h.Test[0] == "CMD" {
		words := make([]string, 0, len(h.Test)-1)
		for _, w := range h.Test[1:] {
			words = append(words, shellQuote(cs.fill(w)))
		}
		cmd = strings.Join(words, " ")
	}
	return healthFields(cmd, h.Interval, h.Timeout, h.StartPeriod, h.Retries)
}

// taskHealthcheck is [environment.healthcheck] as deploy_sandbox's healthcheck.
func taskHealthcheck(h *Healthcheck) map[string]any {
	return healthFields(h.Command, h.Interval, h.Timeout, h.StartPeriod, h.Retries)
}

func healthFields(cmd string, interval, timeout, start time.Duration, retries int) map[string]any {
	out := map[string]any{"command": cmd}
	if interval > 0 {
		out["interval_sec"] = interval.Seconds()
	}
	if timeout > 0 {
		out["timeout_sec"] = timeout.Seconds()
	}
	if start > 0 {
		out["start_period_sec"] = start.Seconds()
	}
	if retries > 0 {
		out["retries"] = retries
	}
	return out
}

// healthBudget is the longest a healthcheck's fields let it run.
func healthBudget(h map[string]any) time.Duration {
	sec := func(k string, def time.Duration) time.Duration {
		if v, ok := h[k].(float64); ok {
			return time.Duration(v * float64(time.Second))
		}
		return def
	}
	retries := task.DefaultHealthRetries
	if r, ok := h["retries"].(int); ok {
		retries = r
	}
	return sec("start_period_sec", 0) + time.Duration(retries+1)*(sec("interval_sec", task.DefaultHealthInterval)+sec("timeout_sec", task.DefaultHealthTimeout))
}

// timeout sets s's timeout to cover its build and its healthcheck, when it has either.
func (cs *composer) timeout(s step) {
	var d time.Duration
	delete(s, "build_timeout_sec")
	delete(s, "timeout")
	if _, ok := s["build"]; ok && cs.t.Environment.BuildTimeout > 0 {
		s["build_timeout_sec"] = cs.t.Environment.BuildTimeout.Seconds()
		d += cs.t.Environment.BuildTimeout
	}
	if h, ok := s["healthcheck"].(map[string]any); ok {
		d += healthBudget(h)
	}
	if d > 0 {
		s["timeout"] = stepTimeout(d)
	}
}

// stepTimeout is the timeout of a step whose build and healthcheck may take d: d and two
// minutes for the create, never less than deploy_sandbox's default of ten.
func stepTimeout(d time.Duration) string { return seconds(max(d+2*time.Minute, 10*time.Minute)) }

// shellQuote quotes w for sh when it needs it.
func shellQuote(w string) string {
	if w != "" && !strings.ContainsFunc(w, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("@%+=:,./_-", r))
	}) {
		return w
	}
	return "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
}

// memoryMB reads a compose memory limit ("512m", "1g", "1.5GB", "2048M", bytes) as MiB,
// rounded up.
func memoryMB(s string) (int, error) {
	m := memorySize.FindStringSubmatch(strings.ToLower(strings.TrimSpace(s)))
	if m == nil {
		return 0, fmt.Errorf("want a size such as \"512m\" or \"2g\", got %q", s)
	}
	n, err := strconv.ParseFloat(m[1], 64)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("want a size above 0, got %q", s)
	}
	unit := map[string]float64{"": 1, "b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}[m[2]]
	return int(math.Ceil(n * unit / (1 << 20))), nil
}

var memorySize = regexp.MustCompile(`^([0-9]+(?:\.[0-9]+)?)\s*([bkmgt]?)b?$`)

// composeOrder is the services in depends_on order, each after what it depends on, else in the
// file's order (main included).
func composeOrder(c *Compose) []string {
	var out []string
	done := map[string]bool{}
	var visit func(string)
	visit = func(n string) {
		if done[n] {
			return
		}
		done[n] = true // the file has no cycle: LoadCompose refuses one
		if s := c.Services[n]; s != nil {
			for _, dep := range slices.Sorted(maps.Keys(s.DependsOn)) {
				visit(dep)
			}
			out = append(out, n)
		}
	}
	for _, n := range c.Order {
		visit(n)
	}
	return out
}
