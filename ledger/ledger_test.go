package ledger_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger"
	"github.com/agentenv/agentenv/ledger/sqlite"
)

func TestDefaultPath(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	tests := []struct{ xdg, want string }{
		{"/var/state", "/var/state/agentenv/ledger.db"},
		{"", filepath.Join(home, ".local/state/agentenv/ledger.db")},
		{"relative/state", filepath.Join(home, ".local/state/agentenv/ledger.db")},
	}
	for _, tt := range tests {
		t.Setenv("XDG_STATE_HOME", tt.xdg)
		got, err := ledger.DefaultPath()
		if err != nil || got != tt.want {
			t.Errorf("DefaultPath() with XDG_STATE_HOME=%q = %q, %v; want %q", tt.xdg, got, err, tt.want)
		}
	}
}

// TestOpenSQLite opens each SQLite form of DSN and checks that it reached the file it names.
func TestOpenSQLite(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	t.Chdir(dir)
	tests := []struct{ dsn, path string }{
		{filepath.Join(dir, "plain.db"), filepath.Join(dir, "plain.db")},
		{"relative.db", filepath.Join(dir, "relative.db")},
		{"sqlite://" + filepath.Join(dir, "url.db"), filepath.Join(dir, "url.db")},
		{"SQLite://sub/rel.db", filepath.Join(dir, "sub", "rel.db")},
		{"", filepath.Join(dir, "state", "agentenv", "ledger.db")},
	}
	for _, tt := range tests {
		l, err := ledger.Open(t.Context(), tt.dsn, nil)
		if err != nil {
			t.Errorf("Open(%q) = %v", tt.dsn, err)
			continue
		}
		s, ok := l.(*sqlite.Ledger)
		if !ok {
			t.Errorf("Open(%q) = %T, want *sqlite.Ledger", tt.dsn, l)
		} else if s.Path() != tt.path {
			t.Errorf("Open(%q) opened %s, want %s", tt.dsn, s.Path(), tt.path)
		}
		if err := l.Put(t.Context(), agentenv.Record{ID: "r", State: agentenv.StateLive}); err != nil {
			t.Errorf("Open(%q).Put = %v", tt.dsn, err)
		}
		l.Close()
		if _, err := os.Stat(tt.path); err != nil {
			t.Errorf("Open(%q): %v", tt.dsn, err)
		}
	}
}

func TestOpenErrors(t *testing.T) {
	tests := []struct {
		dsn     string
		invalid bool   // want ErrInvalid
		want    string // in the message
	}{
		{"mysql://root:s3cret@db.example/x", true, "mysql://root:xxxxx@db.example/x"},
		{"redis://:s3cret@cache:6379", true, `unknown scheme "redis"`},
		{"sqlite://", true, "sqlite"},
		// Port 1 refuses at once: this checks the dispatch, not PostgreSQL.
		{"postgres://u:s3cret@127.0.0.1:1/db?connect_timeout=5&sslmode=disable", false, "postgres: open postgres://u:xxxxx@127.0.0.1:1/db"},
		{"postgresql://u:s3cret@127.0.0.1:1/db?sslmode=disable", false, "postgres: open postgresql://u:xxxxx@127.0.0.1:1/db"},
	}
	for _, tt := range tests {
		l, err := ledger.Open(t.Context(), tt.dsn, nil)
		if err == nil {
			l.Close()
			t.Errorf("Open(%q) = nil error, want one", tt.dsn)
			continue
		}
		if l != nil {
			t.Errorf("Open(%q) = %#v with an error, want a nil Ledger", tt.dsn, l)
		}
		if tt.invalid && !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("Open(%q) = %v, want ErrInvalid", tt.dsn, err)
		}
		if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "s3cret") {
			t.Errorf("Open(%q) = %q, want it to say %q and never the password", tt.dsn, err, tt.want)
		}
	}
}
