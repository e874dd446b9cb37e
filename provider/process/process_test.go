package process_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/testbin"
	"github.com/agentenv/agentenv/provider/process"
	"github.com/agentenv/agentenv/provider/providertest"
)

// TestConformance runs the provider suite with real processes: the test workload binary
// (internal/testserver) serving HTTP on a free loopback port.
func TestConformance(t *testing.T) {
	dir := t.TempDir()
	bin := testbin.TestServer(t)
	port := freePort(t)
	root := filepath.Join(dir, "sandboxes")
	providertest.Run(t, func(t *testing.T) agentenv.Provider {
		p, err := process.New(process.Config{Root: root}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}, providertest.Options{
		Image:       "host",
		Command:     []string{bin, "serve", "127.0.0.1:" + strconv.Itoa(port)},
		Port:        port,
		ExitCommand: []string{bin, "exit", "3"},
		ExitCode:    3,
	})
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 0 {
		t.Errorf("work folders left: %v", entries)
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TestNewRefusesARootThatIsAFile: a root that cannot hold work folders is refused before any
// sandbox is recorded; one that does not exist yet is made on the first create.
func TestNewRefusesARootThatIsAFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "root")
	if err := os.WriteFile(file, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := process.New(process.Config{Root: file}, nil); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("New with a file as root = %v, want ErrInvalid", err)
	}
	if _, err := process.New(process.Config{Root: filepath.Join(t.TempDir(), "later")}, nil); err != nil {
		t.Errorf("New with a root still to make = %v", err)
	}
}

// TestFilesStayInTheWorkFolder: what the sandbox's own process can leave in its folder cannot
// make a read or write of the host reach past it or hang: a named pipe nobody writes is refused
// at once, and a symbolic link out of the folder is refused for a read and a write alike,
// leaving the file it points at as it was.
func TestFilesStayInTheWorkFolder(t *testing.T) {
	p, err := process.New(process.Config{Root: filepath.Join(t.TempDir(), "sandboxes")}, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	sb, err := p.Create(ctx, agentenv.SandboxSpec{Name: "sb-files1", Image: "host", Labels: map[string]string{agentenv.LabelRecord: "sb-files1"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Terminate(context.Background(), sb.ID) })
	dir := p.Dir(sb.ID)
	if err := syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "host-secret")
	if err := os.WriteFile(outside, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(dir, "up")); err != nil {
		t.Fatal(err)
	}

	done := make(chan error, 1)
	go func() { _, err := p.ReadFile(ctx, sb.ID, "pipe"); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("ReadFile of a named pipe = %v, want ErrInvalid", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ReadFile of a named pipe nobody writes did not return in 10 s")
	}
	for _, path := range []string{"link", "up/host-secret"} {
		if b, err := p.ReadFile(ctx, sb.ID, path); err == nil {
			t.Errorf("ReadFile(%s) through a link out of the folder = %q, want an error", path, b)
		}
		if err := p.WriteFile(ctx, sb.ID, path, []byte("agent")); err == nil {
			t.Errorf("WriteFile(%s) through a link out of the folder succeeded", path)
		}
	}
	if b, _ := os.ReadFile(outside); string(b) != "host" {
		t.Errorf("the file outside the folder holds %q, want it untouched", b)
	}
	if err := p.WriteFile(ctx, sb.ID, "a/b/c.txt", []byte("ok")); err != nil {
		t.Fatal(err)
	}
	if b, err := p.ReadFile(ctx, sb.ID, "/a/b/c.txt"); err != nil || string(b) != "ok" {
		t.Errorf("ReadFile of a written file = %q, %v", b, err)
	}
	if _, err := p.ReadFile(ctx, sb.ID, "missing"); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("ReadFile of a missing file = %v, want ErrNotFound", err)
	}
}
