package staticbin_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentenv/agentenv/internal/staticbin"
	"github.com/agentenv/agentenv/internal/testbin"
)

func TestCheck(t *testing.T) {
	if err := staticbin.Check(testbin.TestServer(t)); err != nil { // built with CGO_ENABLED=0
		t.Errorf("Check(static build) = %v, want nil", err)
	}
	if err := staticbin.Check("/bin/sh"); err == nil || !strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("Check(/bin/sh) = %v, want dynamically linked", err)
	}
	text := filepath.Join(t.TempDir(), "x.txt")
	if err := os.WriteFile(text, []byte("not elf"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := staticbin.Check(text); err == nil {
		t.Errorf("Check(text file) = nil, want an error")
	}
}
