// Package testbin gives integration tests the agentenv binary of this checkout, built once.
//
// scripts/test builds it before the integration tier and names it in AGENTENV_TEST_BINARY, so
// that the test processes of a dozen packages do not each compile the same 700 packages at
// once, racing each other for two cores. Without the variable (a developer running one
// package's tests), the first test of a process builds it into a folder that lives as long as
// the process, under a bound long enough for a cold build cache.
package testbin

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// Env names the prebuilt binary.
const Env = "AGENTENV_TEST_BINARY"

// buildTimeout bounds a build on an empty cache while other test processes run (a cold build of
// the command takes about five minutes of CPU on two cores).
const buildTimeout = 20 * time.Minute

// Package is the command Agentenv builds.
const Package = "github.com/agentenv/agentenv/cmd/agentenv"

var built struct {
	once sync.Once
	bin  string
	err  error
}

// Agentenv returns the path of a static (CGO_ENABLED=0) agentenv binary built from this
// checkout, failing tb if it cannot be had. The binary must not be modified or removed.
func Agentenv(tb testing.TB) string {
	tb.Helper()
	bin, err := agentenv()
	if err != nil {
		tb.Fatalf("agentenv binary: %v", err)
	}
	return bin
}

// Main is Agentenv for a TestMain, which has no testing.TB: it exits the process with a message
// if the binary cannot be had.
func Main() string {
	bin, err := agentenv()
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentenv binary: %v\n", err)
		os.Exit(1)
	}
	return bin
}

func agentenv() (string, error) {
	built.once.Do(func() {
		if p := os.Getenv(Env); p != "" {
			if _, err := os.Stat(p); err != nil {
				built.err = fmt.Errorf("%s: %w", Env, err)
				return
			}
			built.bin = p
			return
		}
		dir, err := os.MkdirTemp("", "agentenv-testbin-")
		if err != nil {
			built.err = err
			return
		}
		built.bin = filepath.Join(dir, "agentenv")
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		built.err = Build(ctx, Package, built.bin)
	})
	return built.bin, built.err
}

// Build compiles pkg into out as scripts/test does: static, without paths or debug information.
func Build(ctx context.Context, pkg, out string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s: %w: %s", pkg, err, b)
	}
	return nil
}
