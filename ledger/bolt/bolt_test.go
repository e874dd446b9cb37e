package bolt_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/ledger/ledgertest"
	bbolt "go.etcd.io/bbolt"
)

// open opens a ledger at path or fails t, and closes it when t ends.
func open(t testing.TB, path string) *bolt.Ledger {
	t.Helper()
	l, err := bolt.Open(t.Context(), path, nil)
	if err != nil {
		t.Fatalf("Open(%s) = %v", path, err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestLedger(t *testing.T) {
	ledgertest.Run(t, func(t *testing.T) agentenv.Ledger {
		return open(t, filepath.Join(t.TempDir(), "ledger.bolt"))
	})
}

// BenchmarkLedger measures Put, Get, Update and a List of 1,000 records.
func BenchmarkLedger(b *testing.B) {
	ledgertest.Bench(b, func(b *testing.B) agentenv.Ledger {
		return open(b, filepath.Join(b.TempDir(), "ledger.bolt"))
	})
}

func TestOpenCreates(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "agentenv", "ledger.bolt")
	open(t, path)
	for _, c := range []struct {
		path string
		mode os.FileMode
	}{{filepath.Dir(path), 0o700 | os.ModeDir}, {path, 0o600}, {path + ".lock", 0o600}} {
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
	path := filepath.Join(t.TempDir(), "ledger.bolt")
	l := open(t, path)
	if err := l.Put(t.Context(), agentenv.Record{ID: "kept", State: agentenv.StateLive}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A relative path names the same file.
	t.Chdir(filepath.Dir(path))
	l = open(t, "ledger.bolt")
	if l.Path() != path {
		t.Errorf("Path() = %s, want %s", l.Path(), path)
	}
	if r, err := l.Get(t.Context(), "kept"); err != nil || r.State != agentenv.StateLive {
		t.Errorf("Get(kept) after reopen = %+v, %v; want the record", r, err)
	}
	// A '?' is part of a file name like any other character.
	q := open(t, filepath.Join(filepath.Dir(path), "a?b.bolt"))
	if err := q.Put(t.Context(), agentenv.Record{ID: "q", State: agentenv.StateLive}); err != nil {
		t.Errorf("Put on a?b.bolt = %v", err)
	}
}

// TestOpenErrors checks that a path that cannot hold a ledger gives an error naming it, and
// no panic. The cases do not rely on file modes, which do not stop root.
func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	garbage := filepath.Join(dir, "garbage.bolt")
	if err := os.WriteFile(garbage, []byte(strings.Repeat("this is not a database\x00\xff", 400)), 0o600); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(dir, "page.bolt") // bbolt finds it too small for its page size
	if err := os.WriteFile(page, []byte(strings.Repeat("garbage\x00", 1000)), 0o600); err != nil {
		t.Fatal(err)
	}
	short := filepath.Join(dir, "short.bolt")
	if err := os.WriteFile(short, []byte("tiny"), 0o600); err != nil {
		t.Fatal(err)
	}
	// The first page of an SQLite database: its header, then zeros.
	old := filepath.Join(dir, "ledger.db")
	if err := os.WriteFile(old, append([]byte("SQLite format 3\x00\x10\x00\x02\x02"), make([]byte, 8192)...), 0o600); err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(dir, "file")
	if err := os.WriteFile(notDir, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	newer := filepath.Join(dir, "newer.bolt")
	l := open(t, newer)
	l.Close()
	setVersion(t, newer, "9999")

	tests := []struct {
		name, path, want string
		invalid          bool // want ErrInvalid
	}{
		{"garbage file", garbage, "not a bbolt ledger", true},
		{"garbage of 8000 bytes", page, "not a bbolt ledger", true},
		{"short file", short, "not a bbolt ledger", true},
		{"SQLite ledger", old, "an SQLite database", true},
		{"parent is a file", filepath.Join(notDir, "ledger.bolt"), "not a directory", false},
		{"path is a directory", dir, "is a directory", false},
		{"newer schema", newer, "newer than this agentenv", false},
	}
	if _, err := os.Stat("/sys/kernel"); err == nil {
		// sysfs refuses new files even to root.
		tests = append(tests, struct {
			name, path, want string
			invalid          bool
		}{"unwritable directory", "/sys/kernel/agentenv/ledger.bolt", "/sys/kernel/agentenv", false})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before, _ := os.ReadFile(tt.path)
			l, err := bolt.Open(t.Context(), tt.path, nil)
			if err == nil {
				l.Close()
				t.Fatalf("Open(%s) = nil error, want one", tt.path)
			}
			if !strings.Contains(err.Error(), tt.path) || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Open(%s) = %q, want an error naming the path and saying %q", tt.path, err, tt.want)
			}
			if tt.invalid && !errors.Is(err, agentenv.ErrInvalid) {
				t.Errorf("Open(%s) = %v, want ErrInvalid", tt.path, err)
			}
			if after, _ := os.ReadFile(tt.path); string(after) != string(before) {
				t.Errorf("Open(%s) changed the file it refused", tt.path)
			}
		})
	}
	if _, err := bolt.Open(t.Context(), "", nil); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Open(\"\") = %v, want ErrInvalid", err)
	}
}

// setVersion writes the schema version of the ledger at path, as another agentenv would.
func setVersion(t *testing.T, path, version string) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	err = db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket([]byte("meta")).Put([]byte("version"), []byte(version))
	})
	if err != nil {
		t.Fatal(err)
	}
}
