package ledger_test

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger"
	"github.com/agentenv/agentenv/ledger/bolt"
)

func TestDefaultPath(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	tests := []struct{ xdg, want string }{
		{"/var/state", "/var/state/agentenv/ledger.bolt"},
		{"", filepath.Join(home, ".local/state/agentenv/ledger.bolt")},
		{"relative/state", filepath.Join(home, ".local/state/agentenv/ledger.bolt")},
	}
	for _, tt := range tests {
		t.Setenv("XDG_STATE_HOME", tt.xdg)
		got, err := ledger.DefaultPath()
		if err != nil || got != tt.want {
			t.Errorf("DefaultPath() with XDG_STATE_HOME=%q = %q, %v; want %q", tt.xdg, got, err, tt.want)
		}
	}
}

// TestOpenBolt opens each bbolt form of DSN and checks that it reached the file it names.
func TestOpenBolt(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	t.Chdir(dir)
	tests := []struct{ dsn, path string }{
		{filepath.Join(dir, "plain.bolt"), filepath.Join(dir, "plain.bolt")},
		{"relative.bolt", filepath.Join(dir, "relative.bolt")},
		{"bolt://" + filepath.Join(dir, "url.bolt"), filepath.Join(dir, "url.bolt")},
		{"Bolt://sub/rel.bolt", filepath.Join(dir, "sub", "rel.bolt")},
		{"", filepath.Join(dir, "state", "agentenv", "ledger.bolt")},
	}
	for _, tt := range tests {
		l, err := ledger.Open(t.Context(), tt.dsn, nil)
		if err != nil {
			t.Errorf("Open(%q) = %v", tt.dsn, err)
			continue
		}
		s, ok := l.(*bolt.Ledger)
		if !ok {
			t.Errorf("Open(%q) = %T, want *bolt.Ledger", tt.dsn, l)
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
		{"bolt://", true, "bolt"},
		// The SQLite ledger is gone: its DSN says what to name instead.
		{"sqlite://" + filepath.Join(t.TempDir(), "ledger.db"), true, "replaced by a bbolt file: name one as bolt://PATH"},
		{"SQLite://", true, "bolt://PATH"},
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

// TestOpenSQLiteRefused checks that a sqlite:// DSN neither opens nor makes a file.
func TestOpenSQLiteRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	if _, err := ledger.Open(t.Context(), "sqlite://"+path, nil); !errors.Is(err, agentenv.ErrInvalid) {
		t.Fatalf("Open(sqlite://...) = %v, want ErrInvalid", err)
	}
	if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open(sqlite://%s) left a file: %v", path, err)
	}
}

// TestOpenWarnsOfOldLedger checks that the default ledger warns of an SQLite ledger left by an
// earlier version beside it, whose records it does not hold.
func TestOpenWarnsOfOldLedger(t *testing.T) {
	state := t.TempDir()
	t.Setenv("XDG_STATE_HOME", state)
	old := filepath.Join(state, "agentenv", "ledger.db")
	if err := os.MkdirAll(filepath.Dir(old), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, append([]byte("SQLite format 3\x00"), make([]byte, 4096)...), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	l, err := ledger.Open(t.Context(), "", slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatal(err)
	}
	l.Close()
	if !strings.Contains(logs.String(), "SQLite ledger") || !strings.Contains(logs.String(), old) {
		t.Errorf("Open(\"\") beside %s logged %q, want a warning naming it", old, logs.String())
	}
}
