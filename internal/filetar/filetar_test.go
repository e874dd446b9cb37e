package filetar_test

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"testing"

	"github.com/agentenv/agentenv/internal/filetar"
)

func TestPackMakesParentsOnceAndExecutableModes(t *testing.T) {
	archive, err := filetar.Pack("/", map[string][]byte{
		"/opt/a/bin":   []byte("\x7fELF..."),
		"/opt/a/run":   []byte("#!/bin/sh\n"),
		"/opt/b.txt":   []byte("text"),
		"/agentenv":    []byte("\x7fELF"),
		"/opt/a/c/d.x": nil,
	})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]int64{}
	var order []string
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, dup := got[h.Name]; dup {
			t.Errorf("%s twice in the archive", h.Name)
		}
		got[h.Name] = h.Mode
		order = append(order, h.Name)
	}
	want := map[string]int64{"agentenv": 0o755, "opt/": 0o755, "opt/a/": 0o755, "opt/a/bin": 0o755, "opt/a/c/": 0o755, "opt/a/c/d.x": 0o644, "opt/a/run": 0o755, "opt/b.txt": 0o644}
	if len(got) != len(want) {
		t.Errorf("archive holds %v, want %v", order, want)
	}
	for name, mode := range want {
		if got[name] != mode {
			t.Errorf("%s: mode %o, want %o (archive %v)", name, got[name], mode, order)
		}
	}
}

func TestPackBelowABase(t *testing.T) {
	archive, err := filetar.Pack("/usr/local", map[string][]byte{"/usr/local/bin/x": []byte("x")})
	if err != nil {
		t.Fatal(err)
	}
	h, err := tar.NewReader(bytes.NewReader(archive)).Next()
	if err != nil || h.Name != "bin/" {
		t.Errorf("first entry %v, %v; want bin/ (the directory below the base, not the base's own)", h, err)
	}
	for _, bad := range []string{"relative", "/usr/local", "/usr/localx/y", "/etc/x"} {
		if _, err := filetar.Pack("/usr/local", map[string][]byte{bad: nil}); err == nil {
			t.Errorf("Pack of %q below /usr/local succeeded", bad)
		}
	}
}
