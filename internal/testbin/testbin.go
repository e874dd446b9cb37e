// Package testbin gives tests the binaries of this checkout they run, each built once: the
// agentenv command and the test workload (internal/testserver).
//
// scripts/test builds both before the tests and names them in AGENTENV_TEST_BINARY and
// AGENTENV_TEST_SERVER_BINARY, so that the test processes of a dozen packages do not each
// compile the same packages at once, racing each other for two cores. Without the variables (a
// developer running one package's tests), the first test of a process that asks builds the
// binary into a folder that lives as long as the process, under a bound long enough for a
// cold build cache.
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

// The variables naming the prebuilt binaries.
const (
	Env       = "AGENTENV_TEST_BINARY"
	ServerEnv = "AGENTENV_TEST_SERVER_BINARY"
)

// buildTimeout bounds a build on an empty cache while other test processes run (a cold build of
// the command takes about five minutes of CPU on two cores).
const buildTimeout = 20 * time.Minute

// The packages Agentenv and TestServer build.
const (
	Package       = "github.com/agentenv/agentenv/cmd/agentenv"
	ServerPackage = "github.com/agentenv/agentenv/internal/testserver"
)

// binary is one binary, had once per process.
type binary struct {
	env, pkg string
	once     sync.Once
	bin      string
	err      error
}

var (
	agentenvBin = &binary{env: Env, pkg: Package}
	serverBin   = &binary{env: ServerEnv, pkg: ServerPackage}
)

// Agentenv returns the path of a static (CGO_ENABLED=0) agentenv binary built from this
// checkout, failing tb if it cannot be had. The binary must not be modified or removed.
func Agentenv(tb testing.TB) string {
	tb.Helper()
	bin, err := agentenvBin.get()
	if err != nil {
		tb.Fatalf("agentenv binary: %v", err)
	}
	return bin
}

// TestServer returns the path of a static build of internal/testserver (the test workload:
// "serve ADDR", "sleep", "exit N", ...), failing tb if it cannot be had. The binary must not
// be modified or removed.
func TestServer(tb testing.TB) string {
	tb.Helper()
	bin, err := serverBin.get()
	if err != nil {
		tb.Fatalf("testserver binary: %v", err)
	}
	return bin
}

// Main is Agentenv for a TestMain, which has no testing.TB: it exits the process with a message
// if the binary cannot be had.
func Main() string {
	bin, err := agentenvBin.get()
	if err != nil {
		fmt.Fprintf(os.Stderr, "agentenv binary: %v\n", err)
		os.Exit(1)
	}
	return bin
}

// get returns the binary named by b.env, or builds b.pkg once.
func (b *binary) get() (string, error) {
	b.once.Do(func() {
		if p := os.Getenv(b.env); p != "" {
			if _, err := os.Stat(p); err != nil {
				b.err = fmt.Errorf("%s: %w", b.env, err)
				return
			}
			b.bin = p
			return
		}
		dir, err := os.MkdirTemp("", "agentenv-testbin-")
		if err != nil {
			b.err = err
			return
		}
		b.bin = filepath.Join(dir, filepath.Base(b.pkg))
		ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
		defer cancel()
		b.err = Build(ctx, b.pkg, b.bin)
	})
	return b.bin, b.err
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
