// Package config resolves agentenv's settings. Each key's value comes from, in rising
// precedence: the built-in default, the file .agentenv/config.toml (found by walking up from the
// working directory, or named by AGENTENV_CONFIG), an AGENTENV_* environment variable, and a
// command-line flag. Values may be references, env:NAME or secret:KEY, resolved only when used
// and never written to the ledger or logs.
package config

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/suggest"
)

// Key describes one setting.
type Key struct {
	Name    string // dotted, as in the file: "ledger.dsn"
	Default string
	Doc     string
	Secret  bool // mask when shown
}

// Keys lists every setting agentenv reads.
var Keys = []Key{
	{Name: "ledger.dsn", Doc: "ledger database: a bbolt file path or bolt://PATH (default: $XDG_STATE_HOME/agentenv/ledger.bolt), or postgres://…", Secret: true},
	{Name: "provider.default", Default: "docker", Doc: "provider or comma chain used when a command names none"},
	{Name: "provider.docker.host", Doc: "Docker engine address (default: DOCKER_HOST, else unix:///var/run/docker.sock)"},
	{Name: "provider.process.root", Doc: "work folders of the process provider (default: $XDG_STATE_HOME/agentenv/sandboxes)"},
	{Name: "provider.docker_vm.image", Default: "agentenv-dind:local", Doc: "Docker-in-Docker image of the docker_vm provider's VMs (images/debian/build.sh dind)"},
	{Name: "provider.modal.token_id", Default: "env:MODAL_TOKEN_ID", Doc: "Modal token id, a reference (env:NAME or secret:KEY)", Secret: true},
	{Name: "provider.modal.token_secret", Default: "env:MODAL_TOKEN_SECRET", Doc: "Modal token secret, a reference (env:NAME or secret:KEY)", Secret: true},
	{Name: "provider.modal.app", Default: "agentenv", Doc: "Modal app the sandboxes belong to"},
	{Name: "provider.modal.regions", Doc: "comma list of Modal regions (empty: Modal chooses)"},
	{Name: "provider.modal.region", Doc: "the Modal region container-mode deploys pin their sandboxes to (i6pn is per region); needed for container mode"},
	{Name: "provider.modal.rate", Default: "5", Doc: "Modal sandbox creates per second"},
	{Name: "provider.modal.concurrency", Default: "50", Doc: "Modal sandbox creates in flight"},
	{Name: "provider.modal_vm.token_id", Default: "env:MODAL_TOKEN_ID", Doc: "Modal token id of the modal_vm provider (VM mode), a reference (env:NAME or secret:KEY)", Secret: true},
	{Name: "provider.modal_vm.token_secret", Default: "env:MODAL_TOKEN_SECRET", Doc: "Modal token secret of the modal_vm provider, a reference (env:NAME or secret:KEY)", Secret: true},
	{Name: "provider.modal_vm.image", Default: "docker:dind", Doc: "registry image of modal_vm's VMs: it must hold dockerd and the docker CLI (agentenv starts dockerd unless the image does)"},
	{Name: "provider.modal_vm.app", Default: "agentenv", Doc: "Modal app modal_vm's VMs belong to (tagged apart from modal's sandboxes)"},
	{Name: "provider.modal_vm.regions", Doc: "comma list of Modal regions modal_vm's VMs may run in (empty: Modal chooses)"},
	{Name: "provider.modal_vm.region", Doc: "one Modal region modal_vm's VMs are pinned to (optional; wins over regions)"},
	{Name: "provider.modal_vm.rate", Default: "5", Doc: "modal_vm VM creates per second"},
	{Name: "provider.modal_vm.concurrency", Default: "50", Doc: "modal_vm VM creates in flight"},
	{Name: "provider.e2b.api_key", Default: "env:E2B_API_KEY", Doc: "E2B API key, a reference (env:NAME or secret:KEY)", Secret: true},
	{Name: "provider.e2b.domain", Default: "e2b.app", Doc: "E2B domain; the API is https://api.DOMAIN, port P of sandbox ID is https://P-ID.DOMAIN"},
	{Name: "provider.e2b.api_url", Doc: "E2B API base URL, for a self-hosted E2B or an emulator (empty: https://api.DOMAIN)"},
	{Name: "provider.e2b.sandbox_url", Doc: "URL of port {port} of sandbox {id}, with those placeholders (empty: https://{port}-{id}.DOMAIN)"},
	{Name: "provider.e2b.template", Default: "base", Doc: "E2B template of a sandbox whose spec names no image"},
	{Name: "provider.e2b.vm_template", Default: "docker", Doc: "Docker-capable E2B template of VM-mode deploys"},
	{Name: "provider.e2b.max_timeout", Default: "24h", Doc: "E2B's maximum sandbox lifetime for the account (1h on Hobby)"},
	{Name: "provider.e2b.rate", Default: "1", Doc: "E2B sandbox creates per second"},
	{Name: "provider.e2b.concurrency", Default: "20", Doc: "E2B sandbox creates in flight"},
	{Name: "provider.tensorlake.api_key", Default: "env:TENSORLAKE_API_KEY", Doc: "Tensorlake API key, a reference (env:NAME or secret:KEY)", Secret: true},
	{Name: "provider.tensorlake.api_url", Default: "https://api.tensorlake.ai", Doc: "Tensorlake API base URL (it serves /sandboxes), for an emulator or another deployment"},
	{Name: "provider.tensorlake.proxy_url", Doc: "URL of sandbox {id}'s own API, with that placeholder (empty: https://{id}.sandbox.tensorlake.ai)"},
	{Name: "provider.tensorlake.port_url", Doc: "URL of port {port} of sandbox {id}, with those placeholders (empty: https://{port}-{id}.sandbox.tensorlake.ai)"},
	{Name: "provider.tensorlake.image", Doc: "Tensorlake sandbox image of a sandbox whose spec names none (empty: Tensorlake's default)"},
	{Name: "provider.tensorlake.vm_image", Doc: "Docker-capable Tensorlake sandbox image (dockerd and the docker CLI) of VM-mode deploys; needed for env deploys"},
	{Name: "provider.tensorlake.max_timeout", Default: "24h", Doc: "longest timeout_secs (an idle timeout) agentenv sends Tensorlake"},
	{Name: "provider.tensorlake.rate", Default: "5", Doc: "Tensorlake sandbox creates per second"},
	{Name: "provider.tensorlake.concurrency", Default: "50", Doc: "Tensorlake sandbox creates in flight"},
	{Name: "provider.tenki.token", Default: "env:TENKI_AUTH_TOKEN", Doc: "Tenki API key (tk_...), a reference (env:NAME or secret:KEY); when it resolves to nothing, provider.tenki.api_key", Secret: true},
	{Name: "provider.tenki.api_key", Default: "env:TENKI_API_KEY", Doc: "Tenki API key read when provider.tenki.token resolves to nothing, as Tenki's SDKs fall back to TENKI_API_KEY", Secret: true},
	{Name: "provider.tenki.api_url", Default: "env:TENKI_API_ENDPOINT", Doc: "Tenki API endpoint (Connect); when the default reference resolves to nothing, https://api.tenki.cloud"},
	{Name: "provider.tenki.image", Doc: "Tenki registry image of a sandbox whose spec names none (empty: Tenki's default image)"},
	{Name: "provider.tenki.vm_image", Doc: "Tenki registry image of VM-mode deploys, with dockerd and the docker CLI (empty: Tenki's default image; agentenv starts dockerd unless it runs)"},
	{Name: "provider.tenki.max_timeout", Default: "24h", Doc: "longest max_duration agentenv sends Tenki (a session's hard lifetime)"},
	{Name: "provider.tenki.rate", Default: "5", Doc: "Tenki session creates per second"},
	{Name: "provider.tenki.concurrency", Default: "50", Doc: "Tenki session creates in flight"},
	{Name: "provider.smol_vm.url", Doc: "smolvm server (`smolvm serve start`): unix:///path/to/smolvm.sock or http://host:port (empty: where smolvm serve listens by default, unix://$XDG_RUNTIME_DIR/smolvm.sock, else unix:///tmp/smolvm.sock)"},
	{Name: "provider.smol_vm.image", Doc: "image of a bare smol_vm sandbox whose spec names none (an OCI reference smolvm pulls)"},
	{Name: "provider.smol_vm.slots", Default: "8", Doc: "ports published per smol_vm VM (smolvm publishes ports at create only), so the most ports one VM-mode deploy can use"},
	{Name: "provider.smol_vm.vm_cpus", Default: "2", Doc: "vCPUs of a smol_vm VM whose spec sets none"},
	{Name: "provider.smol_vm.vm_memory_mb", Default: "4096", Doc: "memory of a smol_vm VM whose spec sets none, MiB"},
	{Name: "provider.smol_vm.vm_storage_gb", Default: "20", Doc: "a smol_vm VM's /storage disk, where its Docker engine keeps its images, GiB"},
	{Name: "provider.vercel.token", Default: "env:VERCEL_TOKEN", Doc: "Vercel access token, a reference (env:NAME or secret:KEY); with team_id and project_id", Secret: true},
	{Name: "provider.vercel.oidc_token", Default: "env:VERCEL_OIDC_TOKEN", Doc: "Vercel OIDC token, used when token is unset; its claims name the team and project", Secret: true},
	{Name: "provider.vercel.team_id", Default: "env:VERCEL_TEAM_ID", Doc: "Vercel team the sandboxes belong to (with token)"},
	{Name: "provider.vercel.project_id", Default: "env:VERCEL_PROJECT_ID", Doc: "Vercel project the sandboxes belong to (with token)"},
	{Name: "provider.vercel.api_url", Default: "https://vercel.com/api", Doc: "Vercel API base URL (it serves /v2/sandboxes), for an emulator"},
	{Name: "provider.vercel.image", Doc: "Vercel Sandbox image of a sandbox whose spec names none (empty: Vercel's default, universal)"},
	{Name: "provider.vercel.vm_image", Doc: "Docker-capable Vercel Sandbox image (dockerd and the docker CLI) of VM-mode deploys; needed for env deploys"},
	{Name: "provider.vercel.max_timeout", Default: "5h", Doc: "longest sandbox timeout agentenv sends Vercel: the plan's limit (5h on Pro and Enterprise, 45m on Hobby)"},
	{Name: "provider.vercel.rate", Default: "5", Doc: "Vercel sandbox creates per second"},
	{Name: "provider.vercel.concurrency", Default: "50", Doc: "Vercel sandbox creates in flight"},
	{Name: "provider.kubernetes.kubeconfig", Doc: "kubeconfig of the kubernetes provider, a path or env:KUBECONFIG (unset, with no context: the provider is not configured, except in a Pod)"},
	{Name: "provider.kubernetes.context", Doc: "kubeconfig context of the kubernetes provider (default: the file's current context)"},
	{Name: "provider.kubernetes.namespace", Default: "agentenv", Doc: "namespace of kubernetes sandboxes that join no network; each deployment gets a namespace of its own"},
	{Name: "provider.kubernetes.node_name", Doc: "spec.nodeName of every Pod, for a cluster without a scheduler (kwok); empty: the scheduler places Pods"},
	{Name: "provider.kubernetes.qps", Default: "200", Doc: "kubernetes API requests per second (client-side limit)"},
	{Name: "provider.kubernetes.burst", Default: "400", Doc: "kubernetes API request burst"},
	{Name: "provider.kubernetes.concurrency", Default: "32", Doc: "kubernetes sandbox creates in flight"},
	{Name: "provider.kubernetes.gateway_service", Doc: "Service type exposing the gateway (LoadBalancer or NodePort); empty: port-forward to 127.0.0.1"},
	{Name: "lifecycle.ttl", Default: "3h", Doc: "lifetime of a sandbox or deployment after its creator exits; gc removes it after"},
	{Name: "lifecycle.lease", Default: "60s", Doc: "how long an owner's claim lasts without renewal"},
	{Name: "lifecycle.reclaim_wait", Default: "30s", Doc: "how long a cancelled create may still finish so it can be undone"},
	{Name: "lifecycle.create_timeout", Default: "5m", Doc: "bound on one provider create"},
	{Name: "lifecycle.terminate_timeout", Default: "60s", Doc: "bound on one provider terminate"},
	{Name: "env.pass", Default: "", Doc: "variables env files' env:NAME references may read, a list (pass = [\"A\", \"B\"]) or A,B; --pass-env adds to it"},
	{Name: "lifecycle.call_timeout", Default: "60s", Doc: "bound on one other provider call (health, listing, files, logs)"},
	{Name: "lifecycle.exec_timeout", Default: "10m", Doc: "bound on one command run in a sandbox or a VM's stack"},
	{Name: "lifecycle.max_parallel_creates", Default: "0", Doc: "deploys (and creates outside one) each provider starts at once, the rest wait in a queue; 0: sized from the provider (docker: 2 per engine CPU, 512 MiB each, fewer while container starts are slow), unlimited where it cannot say"},
	{Name: "lifecycle.admit_wait", Default: "30m", Doc: "bound on how long a deploy or create waits in the admission queue"},
	{Name: "gateway.max_conns", Doc: "connections open at once on every deployed gateway, over the env file's gateway.max_conns (empty: the env file's, else 4096)"},
	{Name: "gateway.max_sessions", Doc: "MCP sessions open at once on every deployed gateway, over the env file's gateway.max_sessions (empty: the env file's, else 256)"},
	{Name: "images.runtime", Default: "agentenv:dev", Doc: "image of agentenv's own components (gateway, example servers, db-mcp)"},
	{Name: "state.store", Doc: "state store: a PostgreSQL server (postgres://…, a role that may create databases and roles) whose databases stand in for each deployment's service DB container; 'agentenv state up' starts one", Secret: true},
	{Name: "images.postgres", Default: "agentenv-postgres:local", Doc: "image of the service DB"},
	{Name: "images.db_web", Default: "agentenv-adminer:local", Doc: "image of the DB web UI"},
	{Name: "model.base_url", Doc: "model endpoint of prompt_agent's built-in agent: an OpenAI-compatible base URL (…/v1) for agent: openai, Anthropic's root URL for agent: anthropic"},
	{Name: "model.name", Doc: "model name sent to the endpoint"},
	{Name: "model.input_price", Doc: "USD per million input tokens, for cost_usd and max_cost_usd"},
	{Name: "model.output_price", Doc: "USD per million output tokens, for cost_usd and max_cost_usd"},
	{Name: "model.api_key", Doc: "API key, usually env:NAME or secret:KEY", Secret: true},
	{Name: "model.judge.base_url", Doc: "model endpoint of judge verifiers: an OpenAI-compatible base URL (…/v1)"},
	{Name: "model.judge.name", Doc: "model name of judge verifiers"},
	{Name: "model.judge.api_key", Doc: "API key of judge verifiers, usually env:NAME or secret:KEY", Secret: true},
	{Name: "secrets.file", Doc: "TOML file of secret:KEY values (default: $XDG_CONFIG_HOME/agentenv/secrets.toml)"},
	{Name: "log.level", Default: "info", Doc: "debug, info, warn or error"},
	{Name: "log.format", Default: "text", Doc: "text or json"},
}

// Value is a setting's effective value and where it came from.
type Value struct {
	Key    string `json:"key"`
	Value  string `json:"value"`
	Source string `json:"source"` // default, file PATH, env NAME, flag --NAME
	Secret bool   `json:"-"`
}

// Config holds resolved settings.
type Config struct {
	values map[string]Value
	File   string // the config file read, if any
	getenv func(string) string
}

// Load resolves the defaults, the config file and the environment. getenv is os.Getenv in
// production; dir is where the upward search for .agentenv/config.toml starts.
func Load(getenv func(string) string, dir string) (*Config, error) {
	c := &Config{values: map[string]Value{}, getenv: getenv}
	for _, k := range Keys {
		c.values[k.Name] = Value{Key: k.Name, Value: k.Default, Source: "default", Secret: k.Secret}
	}
	path := getenv("AGENTENV_CONFIG")
	if path == "" {
		path = find(dir)
	} else if _, err := os.Stat(path); err != nil {
		return nil, fmt.Errorf("config: file %s (--config or AGENTENV_CONFIG): %w: %w", path, err, agentenv.ErrInvalid)
	}
	if path != "" {
		if err := c.readFile(path); err != nil {
			return nil, err
		}
	}
	for _, k := range Keys {
		name := EnvName(k.Name)
		if v := getenv(name); v != "" {
			c.values[k.Name] = Value{Key: k.Name, Value: v, Source: "env " + name, Secret: k.Secret}
		}
	}
	var errs []error
	for _, k := range Keys {
		if v := c.values[k.Name]; !isRef(v.Value) {
			if err := k.check(v.Value); err != nil {
				errs = append(errs, fmt.Errorf("config: %s = %q (%s): %w: %w", k.Name, v.Value, v.Source, err, agentenv.ErrInvalid))
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// check reports whether v is a value of k's kind, which its default shows: a duration such
// as "3h" for a key whose default is one, a number of 0 or more for a key whose default is a
// count or a rate. A value of the wrong kind would otherwise be found only by the command that
// reads it, or never.
func (k Key) check(v string) error {
	if v == "" || k.Default == "" {
		return nil
	}
	if _, err := strconv.ParseFloat(k.Default, 64); err == nil {
		if f, err := strconv.ParseFloat(v, 64); err != nil || f < 0 {
			return errors.New("want a number of 0 or more")
		}
		return nil
	}
	if _, err := time.ParseDuration(k.Default); err == nil {
		if d, err := time.ParseDuration(v); err != nil || d < 0 {
			return errors.New(`want a duration such as "90s", "10m" or "3h"`)
		}
	}
	return nil
}

// EnvName returns the environment variable that sets key: AGENTENV_ and the key upper-cased with
// dots as underscores.
func EnvName(key string) string {
	return "AGENTENV_" + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// find walks up from dir looking for .agentenv/config.toml.
func find(dir string) string {
	for dir != "" {
		p := filepath.Join(dir, ".agentenv", "config.toml")
		if _, err := os.Stat(p); err == nil {
			return p
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return ""
		}
		dir = parent
	}
	return ""
}

// maxFileSize bounds a config file: a few dozen keys, never megabytes.
const maxFileSize = 1 << 20

func (c *Config) readFile(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w: %w", err, agentenv.ErrInvalid)
	}
	if len(b) > maxFileSize {
		return fmt.Errorf("config: %s: %d bytes, more than the %d a config file may have: %w", path, len(b), maxFileSize, agentenv.ErrInvalid)
	}
	var tree map[string]any
	if err := toml.Unmarshal(b, &tree); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			row, col := de.Position()
			return fmt.Errorf("config: %s:%d:%d: %s: %w", path, row, col, de.Error(), agentenv.ErrInvalid)
		}
		return fmt.Errorf("config: %s: %w", path, err)
	}
	c.File = path
	flat := map[string]string{}
	flatten("", tree, flat)
	known := map[string]Key{}
	valid := make([]string, len(Keys))
	for i, k := range Keys {
		known[k.Name] = k
		valid[i] = k.Name
	}
	names := make([]string, 0, len(flat))
	for n := range flat {
		names = append(names, n)
	}
	sort.Strings(names)
	// A key the file misspells would silently leave its setting at the default (a ledger in
	// the wrong place): every unknown key is an error, all of them at once.
	var unknown []error
	for _, n := range names {
		k, ok := known[n]
		if !ok {
			unknown = append(unknown, fmt.Errorf("config: %s: unknown key %q%s: %w", path, n, keyHint(n, valid), agentenv.ErrInvalid))
			continue
		}
		c.values[n] = Value{Key: n, Value: flat[n], Source: "file " + path, Secret: k.Secret}
	}
	return errors.Join(unknown...)
}

// keyHint says what an unknown key n may have meant: the valid key it is a plausible typo of,
// else the keys of the section it names or is in, else where every key is listed.
func keyHint(n string, valid []string) string {
	if hint := suggest.DidYouMean(n, valid); hint != "" {
		return hint
	}
	if names := sectionKeys(n, valid); len(names) > 0 {
		return fmt.Sprintf(" (a section, not a key: [%s] has %s)", n, strings.Join(names, ", "))
	}
	if i := strings.LastIndex(n, "."); i > 0 {
		if names := sectionKeys(n[:i], valid); len(names) > 0 {
			return fmt.Sprintf(" ([%s] has %s)", n[:i], strings.Join(names, ", "))
		}
	}
	return ` (no key is close; "agentenv config show" lists them all)`
}

// Defaults returns every key's default, by key name.
func Defaults() map[string]string {
	out := make(map[string]string, len(Keys))
	for _, k := range Keys {
		out[k.Name] = k.Default
	}
	return out
}

// sectionKeys returns the names of the valid keys directly in section.
func sectionKeys(section string, valid []string) []string {
	var names []string
	for _, v := range valid {
		if rest, ok := strings.CutPrefix(v, section+"."); ok && !strings.Contains(rest, ".") {
			names = append(names, rest)
		}
	}
	return names
}

func flatten(prefix string, tree map[string]any, out map[string]string) {
	for k, v := range tree {
		name := k
		if prefix != "" {
			name = prefix + "." + k
		}
		switch v := v.(type) {
		case map[string]any:
			flatten(name, v, out)
		case []any: // a list, such as [env] pass = ["A", "B"], is kept as "A,B"
			items := make([]string, len(v))
			for i, x := range v {
				items[i] = fmt.Sprint(x)
			}
			out[name] = strings.Join(items, ",")
		default:
			out[name] = fmt.Sprint(v)
		}
	}
}

// Set overrides key from a command-line flag.
func (c *Config) Set(key, value, flag string) error {
	v, ok := c.values[key]
	if !ok {
		return fmt.Errorf("config: unknown key %q: %w", key, agentenv.ErrInvalid)
	}
	v.Value, v.Source = value, "flag "+flag
	c.values[key] = v
	return nil
}

// Raw returns key's value as written, references unresolved.
func (c *Config) Raw(key string) string { return c.values[key].Value }

// Get returns key's value with env: and secret: references resolved.
func (c *Config) Get(key string) (string, error) {
	v := c.values[key].Value
	switch {
	case strings.HasPrefix(v, "env:"):
		name := strings.TrimPrefix(v, "env:")
		val := c.getenv(name)
		if val == "" {
			return "", fmt.Errorf("config: %s refers to env:%s, which is not set: %w", key, name, agentenv.ErrInvalid)
		}
		return val, nil
	case strings.HasPrefix(v, "secret:"):
		return c.secret(key, strings.TrimPrefix(v, "secret:"))
	}
	return v, nil
}

// Duration returns key's value as a duration.
func (c *Config) Duration(key string) (time.Duration, error) {
	s, err := c.Get(key)
	if err != nil {
		return 0, err
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("config: %s = %q (%s): %w", key, s, c.values[key].Source, agentenv.ErrInvalid)
	}
	return d, nil
}

// All returns every setting, sorted by key, with secrets masked.
func (c *Config) All() []Value {
	out := make([]Value, 0, len(c.values))
	for _, v := range c.values {
		if v.Secret && v.Value != "" && !isRef(v.Value) {
			v.Value = "****"
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func isRef(v string) bool { return strings.HasPrefix(v, "env:") || strings.HasPrefix(v, "secret:") }

// secret reads name from the secrets file.
func (c *Config) secret(key, name string) (string, error) {
	path := c.values["secrets.file"].Value
	if path == "" {
		base := c.getenv("XDG_CONFIG_HOME")
		if base == "" {
			home, err := os.UserHomeDir()
			if err != nil {
				return "", fmt.Errorf("config: %s: secret:%s: %w", key, name, err)
			}
			base = filepath.Join(home, ".config")
		}
		path = filepath.Join(base, "agentenv", "secrets.toml")
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("config: %s refers to secret:%s, but there is no secrets file %s: %w", key, name, path, agentenv.ErrInvalid)
	}
	if err != nil {
		return "", fmt.Errorf("config: secrets file: %w", err)
	}
	var m map[string]any
	if err := toml.Unmarshal(b, &m); err != nil {
		return "", fmt.Errorf("config: secrets file %s: %w", path, err)
	}
	v, ok := m[name].(string)
	if !ok {
		return "", fmt.Errorf("config: %s refers to secret:%s, which %s does not hold: %w", key, name, path, agentenv.ErrInvalid)
	}
	return v, nil
}
