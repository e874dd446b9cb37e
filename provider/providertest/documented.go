package providertest

import (
	"os"
	"regexp"
	"strings"
	"testing"
	"time"
)

// Documented fails t unless file (a path from the test's package directory: its README.md, a
// Go source) says each of phrases. It ties a default as the docs write it to the constant the
// code uses: the test builds each phrase from the constant. Runs of white space, and the "//" of
// Go comments, count as one space, so that a phrase may wrap.
func Documented(t *testing.T, file string, phrases ...string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := flat(string(b))
	for _, p := range phrases {
		if !strings.Contains(text, flat(p)) {
			t.Errorf("%s does not say %q", file, p)
		}
	}
}

// blank is what flat takes as one space.
var blank = regexp.MustCompile(`(\s|//)+`)

func flat(s string) string { return blank.ReplaceAllString(s, " ") }

// Short writes d as Go comments and config values do: 3h10m, 24h, 10m, 30s.
func Short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// unit is a number and its unit in a short duration.
var unit = regexp.MustCompile(`(\d+)([hms])`)

// Spaced writes d as the READMEs do: 3 h 10 m, 24 h, 2 m.
func Spaced(d time.Duration) string {
	return strings.TrimSpace(unit.ReplaceAllString(Short(d), "$1 $2 "))
}

// KeyDefaults fails t unless each config key of want is among keys (every key's default by
// name, as config.Defaults gives them; a provider may not import config) with the default want
// says.
func KeyDefaults(t *testing.T, keys, want map[string]string) {
	t.Helper()
	for name, def := range want {
		got, ok := keys[name]
		switch {
		case !ok:
			t.Errorf("no config key %s", name)
		case got != def:
			t.Errorf("config key %s defaults to %q, want %q", name, got, def)
		}
	}
}
