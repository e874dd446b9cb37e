package agentenv_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestContextsAreDetachedOnlyByPackageCleanup: a context that outlives its caller's
// cancellation is made in one place (internal/cleanup: Context, Detached, Unbounded), so that
// every such context is bounded and honours the hard stop unless it says why not.
func TestContextsAreDetachedOnlyByPackageCleanup(t *testing.T) {
	const call = "context." + "WithoutCancel"
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := filepath.ToSlash(path)
		if d.IsDir() {
			if name != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || name == "internal/cleanup") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !strings.Contains(string(b), call) {
			return nil
		}
		for i, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, call) {
				t.Errorf("%s:%d: %s: use cleanup.Context (teardown), cleanup.Detached (a create that must finish) or cleanup.Unbounded", name, i+1, call)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
