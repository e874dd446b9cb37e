package sqlite_test

import (
	"database/sql"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/ledgertest"
	"github.com/agentenv/agentenv/ledger/sqlite"
)

// open opens a ledger at path or fails t, and closes it when t ends.
func open(t *testing.T, path string) *sqlite.Ledger {
	t.Helper()
	l, err := sqlite.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatalf("Open(%s) = %v", path, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestLedger(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) agentenv.Ledger {
		return open(t, filepath.Join(t.TempDir(), "ledger.db"))
	})
}

func TestOpenCreates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "agentenv", "ledger.db")
	open(t, path)
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{filepath.Dir(path), 0o700 | os.ModeDir}, {path, 0o600}} {
		fi, err := os.Stat(c.path)
		if err != nil {
			t.Fatal(err)
		}
		if fi.Mode() != c.mode {
			t.Errorf("mode of %s = %v, want %v", c.path, fi.Mode(), c.mode)
		}
	}
}

func TestReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "ledger.db")
	l := open(t, path)
	if err := l.Put(t.Context(), agentenv.Record{ID: "kept", State: agentenv.StateLive}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A relative path names the same file.
	t.Chdir(filepath.Dir(path))
	l = open(t, "ledger.db")
	if l.Path() != path {
		t.Errorf("Path() = %s, want %s", l.Path(), path)
	}
	if r, err := l.Get(t.Context(), "kept"); err != nil || r.State != agentenv.StateLive {
		t.Errorf("Get(kept) after reopen = %+v, %v; want the record", r, err)
	}
}

// TestOpenErrors checks that a path that cannot hold a ledger gives an error naming it, and
// no panic. The cases do not rely on file modes, which do not stop root.
func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.db")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("this is not a database\x00\xff", 400)), 0o600); err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(dir, "newer.db")
	l := open(t, newer)
	l.Close()
	raiseVersion(t, newer)

	tests := []struct {
		name, path, want string
	}{
		{"garbage file", garbage, "not a database"},
		{"parent is a file", filepath.Join(notDir, "ledger.db"), "not a directory"},
		{"path is a directory", dir, "is a directory"},
		{"newer schema", newer, "newer than this agentenv"},
	}
	if _, err := os.Stat("/sys/kernel"); err == nil {
		// sysfs refuses new files even to root.
		tests = append(tests, struct{ name, path, want string }{"unwritable directory", "/sys/kernel/agentenv/ledger.db", "/sys/kernel/agentenv"})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := sqlite.Open(t.Context(), tt.path, nil)
			if err == nil {
				l.Close()
				t.Fatalf("Open(%s) = nil error, want one", tt.path)
			}
			if !strings.Contains(err.Error(), tt.path) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open(%s) = %q, want an error naming the path and saying %q", tt.path, err, tt.want)
			}
		})
	}
	if _, err := sqlite.Open(t.Context(), "", nil); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Open(\"\") = %v, want ErrInvalid", err)
	}
	if _, err := sqlite.Open(t.Context(), filepath.Join(dir, "a?b.db"), nil); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Open(a?b.db) = %v, want ErrInvalid", err)
	}
}

// raiseVersion marks the ledger at path as migrated by a newer agentenv. Package sqlite
// registers the driver.
func raiseVersion(t *testing.T, path string) {
	t.Helper()
	db, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if _, err := db.Exec(`INSERT INTO schema_migrations (version, applied) VALUES (9999, 'later')`); err != nil {
		t.Fatal(err)
	}
}
