package config_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/config"
)

// FuzzConfigFile checks that no config file makes Load panic, that a refused one is bad input
// (ErrInvalid: exit 2), and that every value of an accepted file can be read back. The committed corpus is in testdata/fuzz/FuzzConfigFile.
func FuzzConfigFile(f *testing.F) {
	f.Add([]byte("[ledger]\ndsn = \"postgres://agentenv@db/agentenv\"\n[lifecycle]\nttl = \"3h\"\n"))
	f.Add([]byte("[model]\napi_key = \"env:OPENAI_API_KEY\"\n[images]\npostgres = \"postgres:16\"\n"))
	f.Add([]byte("[provider.modal]\nregion = \"us-east\"\nunknown = 1\n[[x]]\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		path := filepath.Join(dir, "config.toml")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		getenv := func(k string) string {
			if k == "AGENTENV_CONFIG" {
				return path
			}
			return ""
		}
		cfg, err := config.Load(getenv, dir)
		if err != nil {
			if !errors.Is(err, agentenv.ErrInvalid) {
				t.Errorf("Load refused a file with %v, which does not wrap ErrInvalid", err)
			}
			return
		}
		for _, v := range cfg.All() {
			_ = cfg.Raw(v.Key)
		}
	})
}
