package confine_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentenv/agentenv/internal/confine"
)

func TestPath(t *testing.T) {
	dir := t.TempDir()
	if err := os.Symlink("/etc", filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		p      string
		inside bool
	}{
		{"seed.sql", true},         // missing: judged by its name
		{"a/../b.sql", true},       // clean, still inside
		{"../x.sql", false},        // up and out
		{"/etc/hostname", false},   // absolute, elsewhere
		{"escape/hostname", false}, // a link out of the folder
		{filepath.Join(dir, "ok"), true},
	} {
		full, err := confine.Path(dir, c.p)
		var oe *confine.OutsideError
		switch {
		case c.inside && (err != nil || !filepath.IsAbs(full)):
			t.Errorf("Path(%q) = %q, %v; want an absolute path inside", c.p, full, err)
		case !c.inside && !errors.As(err, &oe):
			t.Errorf("Path(%q) = %q, %v; want an OutsideError", c.p, full, err)
		}
	}
}
