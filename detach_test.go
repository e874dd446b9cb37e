package agentenv_test

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// detachOwnedElsewhere lists the files, outside internal/cleanup, that may still detach a
// context by hand because they belong to work under way elsewhere. Each entry is to be moved to
// package cleanup and then deleted from this list; when it is empty, delete the list.
var detachOwnedElsewhere = map[string]bool{
	"provider/kubernetes/create.go": true, // the kubernetes provider's creates and undo paths
}

// TestContextsAreDetachedOnlyByPackageCleanup: a context that outlives its caller's
// cancellation is made in one place (internal/cleanup: Context, Detached, Unbounded), so that
// every such context is bounded and honours the hard stop unless it says why not.
func TestContextsAreDetachedOnlyByPackageCleanup(t *testing.T) {
	const call = "context." + "WithoutCancel"
	seen := map[string]bool{}
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
		seen[name] = true
		if !detachOwnedElsewhere[name] {
			for i, line := range strings.Split(string(b), "\n") {
				if strings.Contains(line, call) {
					t.Errorf("%s:%d: %s: use cleanup.Context (teardown), cleanup.Detached (a create that must finish) or cleanup.Unbounded", name, i+1, call)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for name := range detachOwnedElsewhere {
		if !seen[name] {
			t.Errorf("%s no longer calls %s: delete it from detachOwnedElsewhere", name, call)
		}
	}
}
