package harbor

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv/internal/yamlfile"
)

// Compose is a task's environment/docker-compose.yaml, read: the services agentenv can run.
// By Harbor's convention the agent works in the service "main"; a file may leave main out,
// and then main is built from environment/Dockerfile (Harbor's base file defines it). Values
// may hold Harbor's variables (${CONTEXT_DIR}, ${MAIN_IMAGE_NAME}, ${TEST_DIR}, ${CPUS},
// ${MEMORY}, the log paths), which are kept as written for the runner to substitute.
type Compose struct {
	File     string              // the file's path as given
	Main     string              // MainService
	Services map[string]*Service // by name
	Order    []string            // service names in file order
	Volumes  []string            // named volumes of the top-level volumes:, sorted
}

// Service is one compose service.
type Service struct {
	Name        string
	Image       string // image:, or the tag of the built image when build: is set too
	Build       *Build
	Command     []string // exec form; a string command is split as compose splits it
	Entrypoint  []string
	Environment map[string]string
	Healthcheck *ComposeHealthcheck
	DependsOn   map[string]string // service -> condition: service_started, service_healthy or service_completed_successfully
	WorkingDir  string
	User        string
	Volumes     []string // "NAME:/path[:ro]" or Harbor's "${VAR}:${VAR}" mounts
	CPUs        string   // deploy.resources.limits.cpus, as written
	Memory      string   // deploy.resources.limits.memory, as written
}

// Build is a service's build:.
type Build struct {
	Context    string // relative to the compose file's folder; "." when unset
	Dockerfile string // relative to Context; "Dockerfile" when unset
	Args       map[string]string
	Target     string
}

// ComposeHealthcheck is a service's healthcheck:.
type ComposeHealthcheck struct {
	Test                                          []string // ["CMD", ...], ["CMD-SHELL", cmd] or ["NONE"]
	Interval, Timeout, StartPeriod, StartInterval time.Duration
	Retries                                       int
	Disable                                       bool
}

// Conditions of depends_on.
const (
	ConditionStarted   = "service_started"
	ConditionHealthy   = "service_healthy"
	ConditionCompleted = "service_completed_successfully"
)

var (
	composeTopKeys = []string{"services", "volumes", "version", "name", "networks", "secrets", "configs"}
	serviceKeys    = []string{
		"image", "build", "command", "entrypoint", "environment", "healthcheck", "depends_on", "working_dir", "user", "volumes", "deploy",
		// read and ignored: they change nothing agentenv does
		"restart", "tty", "stdin_open", "init", "labels", "expose", "hostname", "stop_grace_period", "platform", "pull_policy",
		// refused, with why
		"privileged", "cap_add", "cap_drop", "network_mode", "networks", "ports", "devices", "pid", "ipc", "extends", "secrets",
		"configs", "security_opt", "volumes_from", "links", "external_links", "env_file", "profiles", "gpus", "runtime",
		"container_name", "extra_hosts", "dns", "sysctls", "ulimits", "userns_mode", "cgroup_parent", "mem_limit", "cpus",
	}
	refusedService = map[string]string{
		"privileged": "privileged containers are not run", "cap_add": "added capabilities are not granted",
		"cap_drop": "capabilities are dropped by agentenv itself", "network_mode": "services share the deployment's private network",
		"networks": "services share the deployment's private network", "ports": "no host port is published; services reach each other by name",
		"devices": "host devices are not passed through", "pid": "no shared pid namespace", "ipc": "no shared ipc namespace",
		"extends": "write the service out in full", "secrets": "use environment", "configs": "copy the file in the Dockerfile",
		"security_opt": "security options are agentenv's", "volumes_from": "use a named volume", "links": "services reach each other by name",
		"external_links": "services reach each other by name", "env_file": "write the variables under environment",
		"profiles": "every service runs", "gpus": "no GPUs", "runtime": "the engine's runtime is used",
		"container_name": "agentenv names containers", "extra_hosts": "no extra hosts", "dns": "the engine's DNS is used",
		"sysctls": "sysctls are not set", "ulimits": "ulimits are not set", "userns_mode": "no user namespace mode",
		"cgroup_parent": "no cgroup parent", "mem_limit": "use deploy.resources.limits.memory", "cpus": "use deploy.resources.limits.cpus",
	}
)

// LoadCompose reads a task's docker-compose file: the services parsed (image or build context
// and dockerfile, command, environment, healthcheck, depends_on; Main is "main"), strictly
// enough to refuse what agentenv cannot run, each problem naming the file, line and key and
// wrapping agentenv.ErrInvalid.
func LoadCompose(path string) (*Compose, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	return parseCompose(path, data)
}

func parseCompose(path string, data []byte) (*Compose, error) {
	root, err := yamlfile.Parse(path, "compose file", data)
	if err != nil {
		return nil, err
	}
	d := yamlfile.NewDecoder(path)
	c := &Compose{File: path, Main: MainService, Services: map[string]*Service{}}
	var services *yaml.Node
	d.Fields(root, "", composeTopKeys, func(key string, v *yaml.Node, p string) {
		switch key {
		case "services":
			services = v
		case "volumes":
			d.Mapping(v, p, func(name string, _ *yaml.Node, _ string) { c.Volumes = append(c.Volumes, name) })
		case "version", "name":
			d.Str(v, p)
		default:
			d.Fail(v, p, "not supported: %s", map[string]string{"networks": "services share the deployment's private network", "secrets": "use environment", "configs": "copy the file in the Dockerfile"}[key])
		}
	})
	sort.Strings(c.Volumes)
	if services == nil || yamlfile.IsNull(services) {
		d.Errorf(root.Line, "services", "a compose file needs services")
	}
	d.Mapping(services, "services", func(name string, v *yaml.Node, p string) {
		if name == "" {
			d.Fail(v, p, "a service needs a name")
			return
		}
		s := readService(d, c, name, v, p)
		c.Services[name] = s
		c.Order = append(c.Order, name)
	})
	for _, name := range c.Order {
		s := c.Services[name]
		p := yamlfile.Join("services", name)
		if s.Image == "" && s.Build == nil && name != MainService {
			d.Errorf(d.Lines[p], p, "a service needs image or build")
		}
		for dep := range s.DependsOn {
			if c.Services[dep] == nil && dep != MainService {
				dp := yamlfile.Join(yamlfile.Join(p, "depends_on"), dep)
				d.Errorf(d.Lines[dp], dp, "no service %q in this file", dep)
			}
		}
	}
	if cyc := dependencyCycle(c); cyc != "" {
		d.Errorf(d.Lines["services"], "services", "depends_on makes a cycle: %s", cyc)
	}
	if len(d.Errs) > 0 {
		return nil, errors.Join(d.Errs...)
	}
	return c, nil
}

func readService(d *yamlfile.Decoder, c *Compose, name string, n *yaml.Node, path string) *Service {
	s := &Service{Name: name}
	d.Fields(n, path, serviceKeys, func(key string, v *yaml.Node, p string) {
		if why, refused := refusedService[key]; refused {
			d.Fail(v, p, "not supported: %s", why)
			return
		}
		switch key {
		case "image":
			s.Image = d.Str(v, p)
		case "build":
			s.Build = readBuild(d, v, p)
		case "command":
			s.Command = readCommand(d, v, p)
		case "entrypoint":
			s.Entrypoint = readCommand(d, v, p)
		case "environment":
			s.Environment = readEnvList(d, v, p)
		case "healthcheck":
			s.Healthcheck = readComposeHealthcheck(d, v, p)
		case "depends_on":
			s.DependsOn = readDependsOn(d, v, p)
		case "working_dir":
			s.WorkingDir = d.Str(v, p)
		case "user":
			s.User = d.Str(v, p)
		case "volumes":
			d.List(v, p, func(_ int, e *yaml.Node, ep string) {
				if e.Kind != yaml.ScalarNode {
					d.Fail(e, ep, "not supported: write a volume in the short form \"NAME:/path\"")
					return
				}
				vol := d.Str(e, ep)
				src, _, ok := strings.Cut(vol, ":")
				switch {
				case !ok:
					d.Fail(e, ep, "not supported: an anonymous volume; name it (\"NAME:%s\")", vol)
				case strings.HasPrefix(src, "${"):
					s.Volumes = append(s.Volumes, vol)
				case strings.ContainsAny(src, "/.~"):
					d.Fail(e, ep, "not supported: binds the host path %q; copy files in the Dockerfile or use a named volume", src)
				case !slices.Contains(c.Volumes, src):
					d.Fail(e, ep, "volume %q is not declared under the top-level volumes", src)
				default:
					s.Volumes = append(s.Volumes, vol)
				}
			})
		case "deploy":
			d.Fields(v, p, []string{"resources"}, func(_ string, rv *yaml.Node, rp string) {
				d.Fields(rv, rp, []string{"limits", "reservations"}, func(kind string, lv *yaml.Node, lp string) {
					d.Fields(lv, lp, []string{"cpus", "memory"}, func(k string, x *yaml.Node, xp string) {
						if kind != "limits" {
							d.Str(x, xp)
							return
						}
						if k == "cpus" {
							s.CPUs = d.Str(x, xp)
						} else {
							s.Memory = d.Str(x, xp)
						}
					})
				})
			})
		default: // read and ignored
		}
	})
	return s
}

func readBuild(d *yamlfile.Decoder, n *yaml.Node, path string) *Build {
	b := &Build{Context: ".", Dockerfile: "Dockerfile"}
	if n.Kind == yaml.ScalarNode {
		if ctx := d.Str(n, path); ctx != "" {
			b.Context = ctx
		}
		return b
	}
	d.Fields(n, path, []string{"context", "dockerfile", "args", "target"}, func(key string, v *yaml.Node, p string) {
		switch key {
		case "context":
			if ctx := d.Str(v, p); ctx != "" {
				b.Context = ctx
			}
		case "dockerfile":
			if f := d.Str(v, p); f != "" {
				b.Dockerfile = f
			}
		case "args":
			b.Args = readEnvList(d, v, p)
		case "target":
			b.Target = d.Str(v, p)
		}
	})
	if strings.Contains(b.Context, "://") {
		d.Errorf(d.Lines[path+".context"], path+".context", "not supported: a remote build context %q", b.Context)
	}
	return b
}

// readCommand reads a command in exec form, or a string split as compose splits it.
func readCommand(d *yamlfile.Decoder, n *yaml.Node, path string) []string {
	if n.Kind == yaml.ScalarNode {
		words, err := splitWords(d.Str(n, path))
		if err != nil {
			d.Fail(n, path, "%v", err)
		}
		return words
	}
	return d.Strings(n, path)
}

// readEnvList reads environment (or build args) as a mapping or a list of KEY=VALUE.
func readEnvList(d *yamlfile.Decoder, n *yaml.Node, path string) map[string]string {
	out := map[string]string{}
	if n.Kind == yaml.SequenceNode {
		d.List(n, path, func(_ int, e *yaml.Node, p string) {
			kv := d.Str(e, p)
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				d.Fail(e, p, "not supported: %q takes its value from the host; write %s=VALUE", kv, kv)
				return
			}
			out[k] = v
		})
		return out
	}
	d.Mapping(n, path, func(k string, v *yaml.Node, p string) {
		if yamlfile.IsNull(v) {
			d.Fail(v, p, "not supported: no value takes it from the host; write one")
			return
		}
		out[k] = d.Str(v, p)
	})
	return out
}

func readComposeHealthcheck(d *yamlfile.Decoder, n *yaml.Node, path string) *ComposeHealthcheck {
	h := &ComposeHealthcheck{Interval: 30 * time.Second, Timeout: 30 * time.Second, StartInterval: 5 * time.Second, Retries: 3}
	dur := func(v *yaml.Node, p string) time.Duration {
		s := d.Str(v, p)
		x, err := time.ParseDuration(s)
		if err != nil || x < 0 {
			d.Fail(v, p, "want a duration such as \"5s\" or \"1m30s\", got %q", s)
		}
		return x
	}
	d.Fields(n, path, []string{"test", "interval", "timeout", "start_period", "start_interval", "retries", "disable"}, func(key string, v *yaml.Node, p string) {
		switch key {
		case "test":
			if v.Kind == yaml.ScalarNode {
				h.Test = []string{"CMD-SHELL", d.Str(v, p)}
				return
			}
			h.Test = d.Strings(v, p)
			if len(h.Test) == 0 || !slices.Contains([]string{"CMD", "CMD-SHELL", "NONE"}, h.Test[0]) {
				d.Fail(v, p, "want a list starting with CMD, CMD-SHELL or NONE, or a shell command string")
			}
		case "interval":
			h.Interval = dur(v, p)
		case "timeout":
			h.Timeout = dur(v, p)
		case "start_period":
			h.StartPeriod = dur(v, p)
		case "start_interval":
			h.StartInterval = dur(v, p)
		case "retries":
			h.Retries = d.Integer(v, p)
		case "disable":
			h.Disable = d.Boolean(v, p)
		}
	})
	if len(h.Test) > 0 && h.Test[0] == "NONE" {
		h.Disable = true
	}
	if len(h.Test) == 0 && !h.Disable {
		d.Errorf(d.Lines[path], path, "a healthcheck needs a test")
	}
	return h
}

func readDependsOn(d *yamlfile.Decoder, n *yaml.Node, path string) map[string]string {
	out := map[string]string{}
	if n.Kind == yaml.SequenceNode {
		d.List(n, path, func(_ int, e *yaml.Node, p string) {
			name := d.Str(e, p)
			d.Lines[yamlfile.Join(path, name)] = e.Line
			out[name] = ConditionStarted
		})
		return out
	}
	d.Mapping(n, path, func(name string, v *yaml.Node, p string) {
		out[name] = ConditionStarted
		d.Fields(v, p, []string{"condition", "restart", "required"}, func(key string, x *yaml.Node, xp string) {
			switch key {
			case "condition":
				cond := d.Str(x, xp)
				if cond != ConditionStarted && cond != ConditionHealthy && cond != ConditionCompleted {
					d.Fail(x, xp, "want %s, %s or %s, got %q", ConditionStarted, ConditionHealthy, ConditionCompleted, cond)
				}
				out[name] = cond
			case "restart", "required":
				d.Boolean(x, xp)
			}
		})
	})
	return out
}

// dependencyCycle returns a cycle of depends_on as "a -> b -> a", or "".
func dependencyCycle(c *Compose) string {
	state := map[string]int{} // 1 visiting, 2 done
	var stack []string
	var visit func(string) string
	visit = func(n string) string {
		switch state[n] {
		case 1:
			i := slices.Index(stack, n)
			return strings.Join(append(slices.Clone(stack[i:]), n), " -> ")
		case 2:
			return ""
		}
		state[n] = 1
		stack = append(stack, n)
		if s := c.Services[n]; s != nil {
			deps := make([]string, 0, len(s.DependsOn))
			for dep := range s.DependsOn {
				deps = append(deps, dep)
			}
			sort.Strings(deps)
			for _, dep := range deps {
				if cyc := visit(dep); cyc != "" {
					return cyc
				}
			}
		}
		stack = stack[:len(stack)-1]
		state[n] = 2
		return ""
	}
	for _, n := range c.Order {
		if cyc := visit(n); cyc != "" {
			return cyc
		}
	}
	return ""
}

// splitWords splits a command string as compose does: on blanks, with single and double
// quotes and backslash escapes.
func splitWords(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	inWord := false
	var quote rune
	escaped := false
	for _, r := range s {
		switch {
		case escaped:
			cur.WriteRune(r)
			escaped = false
		case r == '\\' && quote != '\'':
			escaped, inWord = true, true
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t' || r == '\n':
			if inWord {
				out = append(out, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 || escaped {
		return nil, fmt.Errorf("unterminated quote or escape in %q", s)
	}
	if inWord {
		out = append(out, cur.String())
	}
	return out, nil
}
