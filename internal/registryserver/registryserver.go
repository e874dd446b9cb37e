// Package registryserver is a test kit: it gives integration tests a real OCI registry, the
// CNCF distribution registry scripts/registry builds from its Go module
// (github.com/distribution/distribution/v3). Only tests import it.
//
// Each Start runs the cached binary for the calling test on 127.0.0.1 (or, with
// Options.AllInterfaces, every interface), at a free port, with
// filesystem storage under the test's temp dir and, when asked, basic auth; it stops it when the
// test ends (a registry starts in well under a second, so tests share none). A missing binary
// fails the test, naming scripts/registry/build.sh; it never skips.
package registryserver

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentenv/agentenv/internal/testproc"
)

// Version is the github.com/distribution/distribution/v3 version scripts/registry/build.sh
// builds and caches.
const Version = "v3.1.2"

// Realm is the basic-auth realm of a registry started with a User.
const Realm = "agentenv-test-registry"

// The bounds of a server this package starts: its readiness (the binary answers within a
// second), the bcrypt of its password file, and its stop after SIGTERM.
const (
	readyTimeout = 30 * time.Second
	hashTimeout  = 30 * time.Second
	stopTimeout  = 10 * time.Second
	// startAttempts bounds the retries when the free port found is taken before the registry
	// binds it.
	startAttempts = 3
)

// Binary returns the path at which scripts/registry/build.sh caches the registry:
// ${AGENTENV_REGISTRY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/agentenv/registry}/registry-VERSION/registry.
func Binary() (string, error) {
	cache := os.Getenv("AGENTENV_REGISTRY_CACHE")
	if cache == "" {
		base, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("registry cache: %w", err)
		}
		cache = filepath.Join(base, "agentenv", "registry")
	}
	return filepath.Join(cache, "registry-"+Version, "registry"), nil
}

// Options configures a registry Start runs.
type Options struct {
	// User and Password, when User is set, require HTTP basic auth of every request (an
	// htpasswd file, bcrypt); Password must then be set too.
	User, Password string
	// AllInterfaces listens on every interface at the port, not 127.0.0.1 alone, so that
	// containers reach the registry at their gateway (a docker_vm VM's engine pulling from
	// it); Server.Addr is 127.0.0.1:PORT still.
	AllInterfaces bool
}

// Server is a registry Start runs.
type Server struct {
	// Addr is its 127.0.0.1:PORT, plain HTTP.
	Addr string
	// Root is its storage's root directory, for tests that tamper with what it stores.
	Root string

	cmd      *exec.Cmd
	exited   chan struct{}
	log      *testproc.Tail
	stopOnce sync.Once
}

// Start runs a registry for t on 127.0.0.1 at a free port, storing under t.TempDir(), and
// returns once GET /v2/ answers (200, or 401 with a User), within 30 s. It is stopped when t
// ends. It fails t when no registry can be had.
func Start(t testing.TB, o Options) *Server {
	t.Helper()
	if o.User != "" && o.Password == "" {
		t.Fatalf("registryserver: Options.User %q without a Password", o.User)
	}
	bin, err := Binary()
	if err != nil {
		t.Fatalf("registryserver: %v", err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("registryserver: no registry at %s (%v): run bash scripts/registry/build.sh", bin, err)
	}
	dir := t.TempDir()
	root := filepath.Join(dir, "storage")
	if err := os.Mkdir(root, 0o700); err != nil {
		t.Fatalf("registryserver: %v", err)
	}
	htpasswd := ""
	if o.User != "" {
		htpasswd = filepath.Join(dir, "htpasswd")
		if err := writeHtpasswd(t.Context(), bin, htpasswd, o.User, o.Password); err != nil {
			t.Fatalf("registryserver: %v", err)
		}
	}
	want := http.StatusOK
	if o.User != "" {
		want = http.StatusUnauthorized
	}
	for attempt := 1; ; attempt++ {
		s, err := start(t, bin, dir, root, htpasswd, want, o.AllInterfaces)
		if err == nil {
			return s
		}
		if !s.portTaken() || attempt == startAttempts {
			t.Fatalf("registryserver: %v", err)
		}
	}
}

// start runs bin once at a free port and waits until GET /v2/ answers want. The server it
// returns is stopped when t ends, whether or not it came up.
func start(t testing.TB, bin, dir, root, htpasswd string, want int, all bool) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Root: root, log: &testproc.Tail{Max: 8 << 10}}
	listen := s.Addr
	if all {
		listen = net.JoinHostPort("", strconv.Itoa(port))
	}
	conf := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(conf, config(listen, root, htpasswd, secret()), 0o600); err != nil {
		return nil, fmt.Errorf("write %s: %w", conf, err)
	}
	s.cmd = exec.Command(bin, "serve", conf)
	s.cmd.Env = childEnv(os.Environ())
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	s.exited = make(chan struct{})
	var waitErr error
	go func() {
		waitErr = s.cmd.Wait()
		close(s.exited)
	}()
	t.Cleanup(func() { s.Stop(t) })

	deadline := time.Now().Add(readyTimeout)
	client := &http.Client{Timeout: time.Second}
	last := "no answer yet"
	for {
		select {
		case <-s.exited:
			return s, fmt.Errorf("%s exited before it was ready (%v): %s", bin, waitErr, s.log)
		default:
		}
		status, err := getV2(client, s.Addr)
		if err == nil && status == want {
			return s, nil
		}
		if err != nil {
			last = err.Error()
		} else {
			last = fmt.Sprintf("GET /v2/ answered %d, want %d", status, want)
		}
		if time.Now().After(deadline) {
			return s, fmt.Errorf("%s on %s not ready within %v (%s): %s", bin, s.Addr, readyTimeout, last, s.log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// getV2 returns the status of GET /v2/ at addr, an error when the answer is not the registry's
// (no Docker-Distribution-Api-Version header).
func getV2(client *http.Client, addr string) (int, error) {
	resp, err := client.Get("http://" + addr + "/v2/")
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	if v := resp.Header.Get("Docker-Distribution-Api-Version"); v != "registry/2.0" {
		return 0, fmt.Errorf("GET /v2/ answered %d without Docker-Distribution-Api-Version: registry/2.0: not the registry", resp.StatusCode)
	}
	return resp.StatusCode, nil
}

// portTaken reports whether s exited because its port was taken before it bound it.
func (s *Server) portTaken() bool {
	if s == nil || s.exited == nil {
		return false
	}
	select {
	case <-s.exited:
		return strings.Contains(s.log.String(), "address already in use")
	default:
		return false
	}
}

// Stop stops the registry now: SIGTERM, then SIGKILL (failing t) if it has not exited within
// 10 s. Calling it again, or at t's end after it, does nothing.
func (s *Server) Stop(t testing.TB) {
	t.Helper()
	s.stopOnce.Do(func() {
		if s.cmd == nil || s.exited == nil {
			return
		}
		testproc.Stop(t, "registryserver: the registry on "+s.Addr, s.cmd, s.exited, stopTimeout)
	})
}

// BlobPath returns the data file of blob dgst ("sha256:HEX") under Root, where the filesystem
// driver keeps it: docker/registry/v2/blobs/sha256/HE/HEX/data. It panics on a dgst that is not
// ALGORITHM:HEX, a mistake in the calling test.
func (s *Server) BlobPath(dgst string) string {
	alg, hexPart, ok := strings.Cut(dgst, ":")
	if !ok || alg == "" || len(hexPart) < 2 || strings.ContainsAny(dgst, `/\`) {
		panic(fmt.Sprintf("registryserver: BlobPath(%q): not a digest ALGORITHM:HEX", dgst))
	}
	return filepath.Join(s.Root, "docker", "registry", "v2", "blobs", alg, hexPart[:2], hexPart, "data")
}

// config returns the registry's configuration: filesystem storage at root with deletes
// enabled, plain HTTP on addr, basic auth from the htpasswd file when it is set, warnings only.
func config(addr, root, htpasswd, secret string) []byte {
	var b bytes.Buffer
	fmt.Fprintf(&b, `version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: %s
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: %s
  secret: %s
`, quote(root), quote(addr), quote(secret))
	if htpasswd != "" {
		fmt.Fprintf(&b, `auth:
  htpasswd:
    realm: %s
    path: %s
`, quote(Realm), quote(htpasswd))
	}
	return b.Bytes()
}

// quote writes s as a YAML double-quoted scalar, whose escapes are a superset of Go's
// strconv.Quote for the ASCII it emits.
func quote(s string) string { return strconv.QuoteToASCII(s) }

// writeHtpasswd writes path with the htpasswd line of user and password, bcrypted by the
// registry binary itself (`registry htpasswd USER`, the password on stdin).
func writeHtpasswd(ctx context.Context, bin, path, user, password string) error {
	if strings.ContainsAny(password, "\r\n") {
		return errors.New("password: a line break cannot be passed to the registry")
	}
	ctx, cancel := context.WithTimeout(ctx, hashTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "htpasswd", user)
	cmd.Stdin = strings.NewReader(password + "\n")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("%s htpasswd %s: %w: %s", bin, user, err, strings.TrimSpace(stderr.String()))
	}
	if !strings.HasPrefix(string(out), user+":$2") {
		return fmt.Errorf("%s htpasswd %s printed %q, want %s:BCRYPT", bin, user, out, user)
	}
	if err := os.WriteFile(path, out, 0o600); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// childEnv is env without the REGISTRY_* variables, with which the registry would override its
// configuration file.
func childEnv(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "REGISTRY_") {
			out = append(out, kv)
		}
	}
	return out
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// secret returns a random http.secret, so the registry does not warn that it made one.
func secret() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
