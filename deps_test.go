package agentenv_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestRootImportsOnlyTheStandardLibrary keeps the vocabulary free of dependencies: every other
// package builds on it.
func TestRootImportsOnlyTheStandardLibrary(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, p := range strings.Fields(string(out)) {
		if p != "github.com/agentenv/agentenv" {
			t.Errorf("the root package depends on %s", p)
		}
	}
}

// TestEveryPackageHasADocComment: a stranger finds their way by the package docs.
func TestEveryPackageHasADocComment(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", "{{.ImportPath}}|{{.Doc}}", "./...").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		path, doc, _ := strings.Cut(line, "|")
		if strings.TrimSpace(doc) == "" {
			t.Errorf("package %s has no doc comment", path)
		}
	}
}
