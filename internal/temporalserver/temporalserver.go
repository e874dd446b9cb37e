// Package temporalserver is a test kit: it gives integration tests the address of a real
// Temporal server, the dev server scripts/temporal builds from Temporal's own server module
// (temporaltest). Only tests import it.
//
// With AGENTENV_TEST_TEMPORAL set (scripts/temporal/up.sh prints it; .ci/run sets it), tests
// share that server. Without it, each call starts the cached binary for the calling test, on a
// port the server picks, and stops it when the test ends. A missing binary fails the test,
// naming scripts/temporal/build.sh; it never skips.
package temporalserver

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv/internal/testproc"
)

// Env names the variable holding a running server's HOST:PORT.
const Env = "AGENTENV_TEST_TEMPORAL"

// Namespace is the namespace the server has registered, besides Temporal's own.
const Namespace = "default"

// Version is the go.temporal.io/server version scripts/temporal/build.sh builds and caches.
const Version = "v1.32.1"

// The bounds of a server this package starts: its readiness (the binary's own start takes
// about a second) and its stop after SIGTERM.
const (
	readyTimeout = 30 * time.Second
	stopTimeout  = 15 * time.Second
)

// Binary returns the path at which scripts/temporal/build.sh caches the dev server:
// ${AGENTENV_TEMPORAL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentenv/temporal}/temporal-devserver-VERSION/temporal-devserver.
func Binary() (string, error) {
	cache := os.Getenv("AGENTENV_TEMPORAL_CACHE")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("temporal dev server cache: %w", err)
		}
		cache = filepath.Join(base, "agentenv", "temporal")
	}
	return filepath.Join(cache, "temporal-devserver-"+Version, "temporal-devserver"), nil
}

// Addr returns the HOST:PORT of a Temporal server whose namespace Namespace is registered:
// AGENTENV_TEST_TEMPORAL when set, else a server started for t and stopped when t ends. It
// fails t when no server can be had.
func Addr(t testing.TB) string {
	t.Helper()
	if addr := os.Getenv(Env); addr != "" {
		return addr
	}
	bin, err := Binary()
	if err != nil {
		t.Fatalf("temporalserver: %v", err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("temporalserver: no Temporal dev server at %s (%v): run scripts/temporal/build.sh (a cold build takes about 13 minutes), or set %s to a running server's HOST:PORT (eval \"$(scripts/temporal/up.sh)\")", bin, err, Env)
	}
	addr, err := start(t, bin)
	if err != nil {
		t.Fatalf("temporalserver: %v", err)
	}
	return addr
}

// start runs bin until t ends and returns the address it prints when ready.
func start(t testing.TB, bin string) (string, error) {
	cmd := exec.Command(bin, "-namespace", Namespace, "-ready-timeout", (readyTimeout - 5*time.Second).String())
	stderr := &testproc.Tail{Max: 8 << 10}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	if err := cmd.Start(); err != nil {
		return "", fmt.Errorf("start %s: %w", bin, err)
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() { testproc.Stop(t, "temporalserver: the Temporal dev server", cmd, exited, stopTimeout) })

	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if addr, ok := strings.CutPrefix(sc.Text(), Env+"="); ok {
				found <- addr
			}
		}
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case addr := <-found:
		return addr, nil
	case <-exited:
		return "", fmt.Errorf("%s exited before it was ready (%v): %s", bin, waitErr, stderr)
	case <-time.After(readyTimeout):
		return "", fmt.Errorf("%s not ready within %v: %s", bin, readyTimeout, stderr)
	}
}
