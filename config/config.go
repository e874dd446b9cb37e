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
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/setting"
	"github.com/agentenv/agentenv/internal/suggest"
	"github.com/agentenv/agentenv/provider/docker"
	"github.com/agentenv/agentenv/provider/dockervm"
	"github.com/agentenv/agentenv/provider/e2b"
	"github.com/agentenv/agentenv/provider/kubernetes"
	"github.com/agentenv/agentenv/provider/modal"
	"github.com/agentenv/agentenv/provider/process"
	"github.com/agentenv/agentenv/provider/smolvm"
	"github.com/agentenv/agentenv/provider/tenki"
	"github.com/agentenv/agentenv/provider/tensorlake"
	"github.com/agentenv/agentenv/provider/vercel"
)

// Key describes one setting.
type Key = setting.Key

// Keys lists every setting agentenv reads: its own, then each provider's, declared beside the
// provider that reads them.
var Keys = slices.Concat(
	[]Key{
		{Name: "ledger.dsn", Doc: "ledger database: a bbolt file path or bolt://PATH (default: $XDG_STATE_HOME/agentenv/ledger.bolt), or postgres://…", Secret: true},
		{Name: "provider.default", Default: "docker", Doc: "provider or comma chain used when a command names none"},
	},
	docker.Settings(),
	process.Settings(),
	dockervm.Settings(),
	modal.Settings(),
	modal.VMSettings(),
	e2b.Settings(),
	tensorlake.Settings(),
	tenki.Settings(),
	smolvm.Settings(),
	vercel.Settings(),
	kubernetes.Settings(),
	[]Key{
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
		{Name: "images.runtime", Default: "agentenv:dev", Doc: "image of agentenv's own components (gateway, example servers, db-mcp, a Harbor task's egress proxy)"},
		{Name: "state.store", Doc: "state store: a PostgreSQL server (postgres://…, a role that may create databases and roles) whose databases stand in for each deployment's service DB container; 'agentenv state up' starts one", Secret: true},
		{Name: "images.postgres", Default: "agentenv-postgres:local", Doc: "image of the service DB"},
		{Name: "images.db_web", Default: "agentenv-adminer:local", Doc: "image of the DB web UI"},
		{Name: ImageMapKey, Doc: "images a Dockerfile's FROM names, mapped to images on the engine for builds with no registry: a list (map = [\"FROM=TO\"]) or FROM=TO,FROM=TO; --image-map FROM=TO adds to it"},
		{Name: "registry.plain_http", Doc: "registries (HOST:PORT) that push, pull and run REF reach over plain HTTP, not HTTPS: a list (plain_http = [\"127.0.0.1:5000\"]) or A,B; --plain-http reaches any so"},
		{Name: "model.base_url", Doc: "model endpoint of prompt_agent's built-in agent: an OpenAI-compatible base URL (…/v1) for agent: openai, Anthropic's root URL for agent: anthropic"},
		{Name: "model.name", Doc: "model name sent to the endpoint"},
		{Name: "model.input_price", Doc: "USD per million input tokens, for cost_usd and max_cost_usd"},
		{Name: "model.output_price", Doc: "USD per million output tokens, for cost_usd and max_cost_usd"},
		{Name: "model.api_key", Doc: "API key, usually env:NAME or secret:KEY", Secret: true},
		{Name: "model.judge.base_url", Doc: "model endpoint of judge verifiers: an OpenAI-compatible base URL (…/v1)"},
		{Name: "model.judge.name", Doc: "model name of judge verifiers"},
		{Name: "model.judge.api_key", Doc: "API key of judge verifiers, usually env:NAME or secret:KEY", Secret: true},
		{Name: "secrets.file", Doc: "TOML file of secret:KEY values (default: $XDG_CONFIG_HOME/agentenv/secrets.toml)"},
		{Name: "runner.backend", Default: "local", Doc: "where run groups run: local (in the process that starts them) or temporal (on 'agentenv worker' processes; needs a postgres:// ledger); --runner sets it"},
		{Name: "runner.temporal", Doc: "Temporal server of the temporal runner, HOST:PORT; --temporal sets it"},
		{Name: "runner.namespace", Default: "default", Doc: "Temporal namespace of the temporal runner; --namespace sets it"},
		{Name: "runner.task_queue", Default: "agentenv", Doc: "Temporal task queue that carries run groups to workers; --task-queue sets it"},
		{Name: "runner.slots", Default: "4", Doc: "episodes an 'agentenv worker' runs at once; --slots sets it"},
		{Name: "log.level", Default: "info", Doc: "debug, info, warn or error"},
		{Name: "log.format", Default: "text", Doc: "text or json"},
	},
)

// ImageMapKey is the setting of the images a build's FROM lines name mapped to images on the
// engine (agentenv.Build.BaseMap), read with ParseImageMap.
const ImageMapKey = "images.map"

// ParseImageMap reads an image map: FROM=TO pairs separated by commas (how a list in the
// config file, map = ["FROM=TO", …], is kept), or one pair as a --image-map flag gives it.
// Spaces around each side are dropped; an empty s is an empty map. A pair without "=", with
// an empty side, or naming one FROM twice with different TOs wraps ErrInvalid.
func ParseImageMap(s string) (map[string]string, error) {
	out := map[string]string{}
	for _, pair := range strings.Split(s, ",") {
		pair = strings.TrimSpace(pair)
		if pair == "" {
			continue
		}
		from, to, ok := strings.Cut(pair, "=")
		from, to = strings.TrimSpace(from), strings.TrimSpace(to)
		switch {
		case !ok || from == "" || to == "":
			return nil, fmt.Errorf("image map %q: want FROM=TO, such as debian:bookworm-slim=agentenv-debian:bookworm: %w", pair, agentenv.ErrInvalid)
		case strings.ContainsAny(from+to, " \t"):
			return nil, fmt.Errorf("image map %q: an image reference has no spaces: %w", pair, agentenv.ErrInvalid)
		case out[from] != "" && out[from] != to:
			return nil, fmt.Errorf("image map: %s maps to both %s and %s: %w", from, out[from], to, agentenv.ErrInvalid)
		}
		out[from] = to
	}
	return out, nil
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
			if err := checkKind(k, v.Value); err != nil {
				errs = append(errs, fmt.Errorf("config: %s = %q (%s): %w: %w", k.Name, v.Value, v.Source, err, agentenv.ErrInvalid))
			}
			if k.Name == ImageMapKey {
				if _, err := ParseImageMap(v.Value); err != nil {
					errs = append(errs, fmt.Errorf("config: %s (%s): %w", k.Name, v.Source, err))
				}
			}
		}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// checkKind reports whether v is a value of k's kind, which its default shows: a duration such
// as "3h" for a key whose default is one, a number of 0 or more for a key whose default is a
// count or a rate. A value of the wrong kind would otherwise be found only by the command that
// reads it, or never.
func checkKind(k Key, v string) error {
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
