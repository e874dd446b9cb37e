package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/config"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

func write(t *testing.T, dir, rel, content string) string {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func value(t *testing.T, c *config.Config, key string) config.Value {
	t.Helper()
	for _, v := range c.All() {
		if v.Key == key {
			return v
		}
	}
	t.Fatalf("no key %s", key)
	return config.Value{}
}

func TestPrecedence(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, ".agentenv/config.toml", "[lifecycle]\nttl = \"1h\"\nlease = \"2m\"\n[provider]\ndefault = \"process\"\n")
	sub := filepath.Join(dir, "a", "b")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	c, err := config.Load(env(map[string]string{"AGENTENV_LIFECYCLE_LEASE": "3m"}), sub)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Set("provider.default", "docker,process", "--provider"); err != nil {
		t.Fatal(err)
	}
	tests := []struct{ key, value, source string }{
		{"lifecycle.reclaim_wait", "30s", "default"},
		{"lifecycle.ttl", "1h", "file " + filepath.Join(dir, ".agentenv/config.toml")},
		{"lifecycle.lease", "3m", "env AGENTENV_LIFECYCLE_LEASE"},
		{"provider.default", "docker,process", "flag --provider"},
	}
	for _, tt := range tests {
		v := value(t, c, tt.key)
		if v.Value != tt.value || v.Source != tt.source {
			t.Errorf("%s = %q from %q, want %q from %q", tt.key, v.Value, v.Source, tt.value, tt.source)
		}
	}
	if d, err := c.Duration("lifecycle.ttl"); err != nil || d.Hours() != 1 {
		t.Errorf("Duration(ttl) = %v, %v", d, err)
	}
}

func TestUnknownKeysAreErrorsWithAHint(t *testing.T) {
	dir := t.TempDir()
	p := write(t, dir, "c.toml", "[lifecycle]\nttll = \"1h\"\nlifetime = \"1h\"\n[ledgr]\ndsn = \"x.bolt\"\n[explorer]\nopen = true\n")
	_, err := config.Load(env(map[string]string{"AGENTENV_CONFIG": p}), dir)
	if !errors.Is(err, agentenv.ErrInvalid) {
		t.Fatalf("Load = %v, want ErrInvalid", err)
	}
	for _, want := range []string{
		`"lifecycle.ttll" (did you mean "lifecycle.ttl"?)`,
		`"ledgr.dsn" (did you mean "ledger.dsn"?)`,
		// No plausible typo: the keys of its section, else where they are all listed.
		`"lifecycle.lifetime" ([lifecycle] has ttl, lease,`,
		`"explorer.open" (no key is close; "agentenv config show" lists them all)`,
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Load = %v, want it to name %s", err, want)
		}
	}
}

func TestValuesOfTheWrongKindAreRefused(t *testing.T) {
	dir := t.TempDir()
	p := write(t, dir, "c.toml", "[lifecycle]\nttl = \"soon\"\n[provider.e2b]\nrate = \"-1\"\n")
	_, err := config.Load(env(map[string]string{"AGENTENV_CONFIG": p, "AGENTENV_LIFECYCLE_LEASE": "-5s"}), dir)
	if !errors.Is(err, agentenv.ErrInvalid) {
		t.Fatalf("Load = %v, want ErrInvalid", err)
	}
	for _, want := range []string{`lifecycle.ttl = "soon" (file `, `provider.e2b.rate = "-1"`, `lifecycle.lease = "-5s" (env AGENTENV_LIFECYCLE_LEASE)`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Load = %v, want it to name %s", err, want)
		}
	}
}

func TestOversizedFileIsRefused(t *testing.T) {
	dir := t.TempDir()
	p := write(t, dir, "c.toml", "[ledger]\ndsn = \""+strings.Repeat("x", 2<<20)+"\"\n")
	_, err := config.Load(env(map[string]string{"AGENTENV_CONFIG": p}), dir)
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "more than the 1048576 a config file may have") {
		t.Errorf("Load of a 2 MiB config = %v, want ErrInvalid naming the bound", err)
	}
}

func TestMalformedFileNamesLine(t *testing.T) {
	dir := t.TempDir()
	p := write(t, dir, "c.toml", "[ledger]\ndsn = \"x\"\nthis is not toml\n")
	_, err := config.Load(env(map[string]string{"AGENTENV_CONFIG": p}), dir)
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), p+":3") {
		t.Errorf("Load = %v, want ErrInvalid naming %s:3", err, p)
	}
	if _, err := config.Load(env(map[string]string{"AGENTENV_CONFIG": filepath.Join(dir, "absent.toml")}), dir); err == nil {
		t.Error("Load of a missing AGENTENV_CONFIG succeeded")
	}
}

func TestReferencesResolveAtUseAndStayMasked(t *testing.T) {
	dir := t.TempDir()
	secrets := write(t, dir, "secrets.toml", "openai = \"sk-secret\"\n")
	p := write(t, dir, "c.toml", "[model]\napi_key = \"secret:openai\"\nbase_url = \"env:MODEL_URL\"\n[secrets]\nfile = \""+secrets+"\"\n[ledger]\ndsn = \"postgres://u:pw@h/db\"\n")
	c, err := config.Load(env(map[string]string{"AGENTENV_CONFIG": p, "MODEL_URL": "http://model"}), dir)
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.Get("model.api_key"); err != nil || v != "sk-secret" {
		t.Errorf("Get(api_key) = %q, %v", v, err)
	}
	if v, err := c.Get("model.base_url"); err != nil || v != "http://model" {
		t.Errorf("Get(base_url) = %q, %v", v, err)
	}
	for _, v := range c.All() {
		if strings.Contains(v.Value, "sk-secret") || strings.Contains(v.Value, "pw@") {
			t.Errorf("All() shows a secret: %s = %s", v.Key, v.Value)
		}
	}
	c2, _ := config.Load(env(map[string]string{"AGENTENV_CONFIG": p}), dir)
	if _, err := c2.Get("model.base_url"); err == nil || !strings.Contains(err.Error(), "MODEL_URL") {
		t.Errorf("Get of an unset env: reference = %v, want an error naming MODEL_URL", err)
	}
}

func TestNoFileMeansDefaults(t *testing.T) {
	c, err := config.Load(env(nil), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if c.File != "" || c.Raw("provider.default") != "docker" {
		t.Errorf("file %q, provider %q; want none and docker", c.File, c.Raw("provider.default"))
	}
	if _, err := c.Duration("log.level"); err == nil {
		t.Error("Duration of a non-duration succeeded")
	}
}
