package config_test

import (
	"errors"
	"maps"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/config"
)

func TestParseImageMap(t *testing.T) {
	for _, c := range []struct {
		in   string
		want map[string]string
		err  string
	}{
		{"", map[string]string{}, ""},
		{"debian:bookworm-slim=agentenv-debian:bookworm", map[string]string{"debian:bookworm-slim": "agentenv-debian:bookworm"}, ""},
		{" a = b , c=d,, ", map[string]string{"a": "b", "c": "d"}, ""},
		{"a=b,a=b", map[string]string{"a": "b"}, ""},
		{"registry:5000/x@sha256:ab=y", map[string]string{"registry:5000/x@sha256:ab": "y"}, ""},
		{"a", nil, `image map "a": want FROM=TO`},
		{"=b", nil, `image map "=b": want FROM=TO`},
		{"a=", nil, `image map "a=": want FROM=TO`},
		{"a b=c", nil, "no spaces"},
		{"a=b,a=c", nil, "a maps to both b and c"},
	} {
		got, err := config.ParseImageMap(c.in)
		if c.err != "" {
			if err == nil || !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseImageMap(%q) = %v, %v; want an ErrInvalid containing %q", c.in, got, err, c.err)
			}
			continue
		}
		if err != nil || !maps.Equal(got, c.want) {
			t.Errorf("ParseImageMap(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
	}
}

// images.map is a list in the file (kept as FROM=TO,FROM=TO), or that text in the environment;
// a malformed one is refused when the configuration loads.
func TestImageMapSetting(t *testing.T) {
	dir := t.TempDir()
	p := write(t, dir, "c.toml", "[images]\nmap = [\"debian:bookworm-slim=agentenv-debian:bookworm\", \"node:20=agentenv-node:local\"]\n")
	c, err := config.Load(env(map[string]string{"AGENTENV_CONFIG": p}), dir)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := c.Get(config.ImageMapKey)
	if err != nil {
		t.Fatal(err)
	}
	m, err := config.ParseImageMap(raw)
	if err != nil || len(m) != 2 || m["node:20"] != "agentenv-node:local" {
		t.Errorf("images.map from the file = %v, %v", m, err)
	}
	_, err = config.Load(env(map[string]string{"AGENTENV_IMAGES_MAP": "debian"}), dir)
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "images.map (env AGENTENV_IMAGES_MAP)") {
		t.Errorf("Load with a bad images.map = %v, want ErrInvalid naming the key and its source", err)
	}
}
