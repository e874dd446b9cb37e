package atomicfile_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/agentenv/agentenv/internal/atomicfile"
)

func TestFailedWriteLeavesTheFileAsItWas(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.jsonl")
	if err := os.WriteFile(p, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := atomicfile.Write(p, 0o644, func(w io.Writer) error {
		if _, err := io.WriteString(w, "half a"); err != nil {
			return err
		}
		return boom
	})
	if !errors.Is(err, boom) {
		t.Fatalf("Write = %v, want the fill's error", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "precious\n" {
		t.Errorf("after a failed write the file holds %q", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("the folder holds %d entries, want the file alone", len(ents))
	}
}

func TestWriteReplacesWithPerm(t *testing.T) {
	p := filepath.Join(t.TempDir(), "out.csv")
	if err := os.WriteFile(p, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.WriteBytes(p, 0o640, []byte("new")); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	fi, _ := os.Stat(p)
	if string(b) != "new" || fi.Mode().Perm() != 0o640 {
		t.Errorf("file holds %q with mode %v, want \"new\" with 0640", b, fi.Mode().Perm())
	}
	if err := atomicfile.WriteBytes(filepath.Join(t.TempDir(), "no", "such", "dir"), 0o600, nil); err == nil {
		t.Error("a write into a missing folder succeeded")
	}
}
