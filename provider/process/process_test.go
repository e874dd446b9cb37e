package process_test

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"

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
