package buildctx

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
)

// context writes files (path -> content) into a new folder and returns it.
func context(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, c := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func digest(t *testing.T, b agentenv.Build) string {
	t.Helper()
	d, err := Digest(b)
	if err != nil {
		t.Fatalf("Digest: %v", err)
	}
	return d
}

func TestDigest(t *testing.T) {
	base := map[string]string{"Dockerfile": "FROM a\nCOPY . /\n", "src/main.sh": "echo hi\n", "src/lib/x": "x"}
	want := digest(t, agentenv.Build{Context: context(t, base)})
	if again := digest(t, agentenv.Build{Context: context(t, base)}); again != want {
		t.Errorf("the same files in another folder digest to %s, want %s", again, want)
	}
	for _, c := range []struct {
		name   string
		change func(dir string, b *agentenv.Build)
		same   bool
	}{
		{"nothing", func(string, *agentenv.Build) {}, true},
		{"Dockerfile named as the default", func(_ string, b *agentenv.Build) { b.Dockerfile = "Dockerfile" }, true},
		{"a file's content", func(dir string, _ *agentenv.Build) { write(t, dir, "src/main.sh", "echo ho\n") }, false},
		{"a file's mode", func(dir string, _ *agentenv.Build) { chmod(t, dir, "src/main.sh", 0o755) }, false},
		{"a new file", func(dir string, _ *agentenv.Build) { write(t, dir, "new", "") }, false},
		{"a new empty folder", func(dir string, _ *agentenv.Build) { mkdir(t, dir, "empty") }, false},
		{"a file renamed", func(dir string, _ *agentenv.Build) { rename(t, dir, "src/lib/x", "src/lib/y") }, false},
		{"the Dockerfile", func(dir string, _ *agentenv.Build) { write(t, dir, "Dockerfile", "FROM b\n") }, false},
		{"another Dockerfile path", func(dir string, b *agentenv.Build) {
			write(t, dir, "other.Dockerfile", "FROM a\nCOPY . /\n")
			b.Dockerfile = "other.Dockerfile"
		}, false},
		{"an argument", func(_ string, b *agentenv.Build) { b.Args = map[string]string{"A": "1"} }, false},
		{"an argument's value", func(_ string, b *agentenv.Build) { b.Args = map[string]string{"A": "2"} }, false},
		{"the base map", func(_ string, b *agentenv.Build) { b.BaseMap = map[string]string{"a": "b"} }, false},
		{"an ignored file", func(dir string, _ *agentenv.Build) {
			write(t, dir, ".dockerignore", "*.log\n")
			want2 := digest(t, agentenv.Build{Context: dir})
			write(t, dir, "x.log", "noise")
			if got := digest(t, agentenv.Build{Context: dir}); got != want2 {
				t.Errorf("an ignored file changed the digest")
			}
		}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := context(t, base)
			b := agentenv.Build{Context: dir}
			c.change(dir, &b)
			if got := digest(t, b); (got == want) != c.same {
				t.Errorf("digest %s, before %s: want same=%v", got, want, c.same)
			}
		})
	}
	// Arguments' order does not matter, nor where the map says them.
	dir := context(t, base)
	a := digest(t, agentenv.Build{Context: dir, Args: map[string]string{"A": "1", "B": "2"}})
	b := digest(t, agentenv.Build{Context: dir, Args: map[string]string{"B": "2", "A": "1"}})
	if a != b {
		t.Error("the same arguments digest differently")
	}
	// An argument and a base-map entry of the same words are not the same build.
	x := digest(t, agentenv.Build{Context: dir, Args: map[string]string{"k": "v"}})
	y := digest(t, agentenv.Build{Context: dir, BaseMap: map[string]string{"k": "v"}})
	if x == y {
		t.Error("an argument and a base-map entry digest the same")
	}
}

func TestDigestErrors(t *testing.T) {
	dir := context(t, map[string]string{"Dockerfile": "FROM a\n", "sub/Dockerfile": "FROM a\n"})
	for _, c := range []struct {
		name string
		b    agentenv.Build
		want string
	}{
		{"no context", agentenv.Build{}, "build context: want a folder"},
		{"missing folder", agentenv.Build{Context: filepath.Join(dir, "nope")}, "nope"},
		{"a file as context", agentenv.Build{Context: filepath.Join(dir, "Dockerfile")}, "not a folder"},
		{"missing Dockerfile", agentenv.Build{Context: dir, Dockerfile: "x/Dockerfile"}, "dockerfile x/Dockerfile"},
		{"Dockerfile outside", agentenv.Build{Context: filepath.Join(dir, "sub"), Dockerfile: "../Dockerfile"}, "inside the build context"},
		{"Dockerfile absolute", agentenv.Build{Context: dir, Dockerfile: filepath.Join(dir, "Dockerfile")}, "inside the build context"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Digest(c.b)
			if err == nil || !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Digest = %v, want an ErrInvalid containing %q", err, c.want)
			}
		})
	}
}

func TestIgnore(t *testing.T) {
	dir := context(t, map[string]string{
		".dockerignore": "# comment\n*.log\n/build\n**/cache\n!keep.log\nsecret/*\n!secret/pub\n",
		"Dockerfile":    "FROM a\n", "a.log": "", "keep.log": "", "src/b.log": "", "build/out": "",
		"src/cache/x": "", "cache/y": "", "secret/key": "", "secret/pub": "", "src/main.go": "",
	})
	got := packed(t, agentenv.Build{Context: dir}, nil)
	want := []string{".dockerignore", "Dockerfile", "keep.log", "secret/", "secret/pub", "src/", "src/b.log", "src/main.go"}
	if !slices.Equal(slices.Sorted(maps.Keys(got)), want) {
		t.Errorf("packed %v, want %v", slices.Sorted(maps.Keys(got)), want)
	}
	// The Dockerfile goes even when ignored; a bad pattern names its line.
	write(t, dir, ".dockerignore", "Dockerfile\n*\n")
	if got := packed(t, agentenv.Build{Context: dir}, nil); !slices.Equal(slices.Sorted(maps.Keys(got)), []string{".dockerignore", "Dockerfile"}) {
		t.Errorf("packed %v, want only the Dockerfile and .dockerignore", slices.Sorted(maps.Keys(got)))
	}
	write(t, dir, ".dockerignore", "ok\n[\n")
	if _, err := Digest(agentenv.Build{Context: dir}); err == nil || !strings.Contains(err.Error(), ".dockerignore:2:") || !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Digest with a bad pattern = %v, want an ErrInvalid naming .dockerignore:2", err)
	}
}

func TestPack(t *testing.T) {
	dir := context(t, map[string]string{"env/Dockerfile": "FROM debian:bookworm-slim AS x\nCOPY run.sh /\n", "run.sh": "#!/bin/sh\n"})
	chmod(t, dir, "run.sh", 0o755)
	if err := os.Symlink("run.sh", filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	b := agentenv.Build{Context: dir, Dockerfile: "env/Dockerfile", BaseMap: map[string]string{"debian:bookworm-slim": "agentenv-debian:bookworm"}}
	got := packed(t, b, testLabels)
	if want := "FROM agentenv-debian:bookworm AS x\n" + testLabel + "\nCOPY run.sh /\n"; got["env/Dockerfile"].body != want {
		t.Errorf("packed Dockerfile =\n%s\nwant\n%s", got["env/Dockerfile"].body, want)
	}
	if h := got["run.sh"]; h.body != "#!/bin/sh\n" || h.mode&0o777 != 0o755 {
		t.Errorf("run.sh packed as %q mode %o", h.body, h.mode)
	}
	if h := got["link"]; h.link != "run.sh" {
		t.Errorf("link packed with target %q, want run.sh", h.link)
	}
	bases, err := Bases(b)
	if err != nil || !slices.Equal(bases, []string{"agentenv-debian:bookworm"}) {
		t.Errorf("Bases = %v, %v", bases, err)
	}
	write(t, dir, "env/Dockerfile", "FROM a\nFROM x AS y\nFROM a\nFROM y\nFROM scratch\n")
	if bases, err := Bases(b); err != nil || !slices.Equal(bases, []string{"a", "x"}) {
		t.Errorf("Bases = %v, %v; want a, x", bases, err)
	}
	write(t, dir, "env/Dockerfile", "\nFROM\n")
	if _, err := Pack(b, nil); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "env/Dockerfile")+":2: FROM") {
		t.Errorf("Pack of a bad Dockerfile = %v, want its path and line", err)
	}
}

type entry struct {
	body, link string
	mode       int64
}

func packed(t *testing.T, b agentenv.Build, labels map[string]string) map[string]entry {
	t.Helper()
	data, err := Pack(b, labels)
	if err != nil {
		t.Fatalf("Pack: %v", err)
	}
	out := map[string]entry{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		out[h.Name] = entry{body: string(body), link: h.Linkname, mode: h.Mode}
	}
}

func write(t *testing.T, dir, p, c string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
		t.Fatal(err)
	}
}

func chmod(t *testing.T, dir, p string, m os.FileMode) {
	t.Helper()
	if err := os.Chmod(filepath.Join(dir, p), m); err != nil {
		t.Fatal(err)
	}
}

func mkdir(t *testing.T, dir, p string) {
	t.Helper()
	if err := os.Mkdir(filepath.Join(dir, p), 0o755); err != nil {
		t.Fatal(err)
	}
}

func rename(t *testing.T, dir, from, to string) {
	t.Helper()
	if err := os.Rename(filepath.Join(dir, from), filepath.Join(dir, to)); err != nil {
		t.Fatal(err)
	}
}
