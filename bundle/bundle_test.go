package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"oras.land/oras-go/v2/content/memory"

	"github.com/agentenv/agentenv"
)

func abs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func paths(cfg Config) []string {
	var out []string
	for _, f := range cfg.Files {
		out = append(out, f.Path)
	}
	return out
}

func TestCollectAndPackExamples(t *testing.T) {
	for _, c := range []struct {
		path, root, entry string
		kind              Kind
		files             []string
	}{
		{"../examples/notes-task", "../examples", "notes-task/task.yaml", KindTask, []string{"notes-task/task.yaml", "notes/env.yaml"}},
		{"../examples/evals/sweep.yaml", "../examples", "evals/sweep.yaml", KindEval, []string{"evals/sweep.yaml", "hello/task.yaml", "notes-task/task.yaml", "notes/env.yaml"}},
		{"../examples/evals/hello-100.yaml", "../examples", "evals/hello-100.yaml", KindEval, []string{"evals/hello-100.yaml", "hello/task.yaml"}},
		{"../examples/shop/env.yaml", "../examples/shop", "env.yaml", KindEnv, []string{"env.yaml", "schema.sql", "seed.sql"}},
		{"../harbor/testdata/corpus/hello-file", "../harbor/testdata/corpus", "hello-file", KindHarborTask,
			[]string{"hello-file/environment/Dockerfile", "hello-file/instruction.md", "hello-file/solution/solve.sh", "hello-file/task.toml", "hello-file/tests/test.sh"}},
	} {
		src, err := Collect(c.path)
		if err != nil {
			t.Fatalf("Collect(%s): %v", c.path, err)
		}
		p, err := Pack(src)
		if err != nil {
			t.Fatalf("Pack(%s): %v", c.path, err)
		}
		if p.Root != abs(t, c.root) || p.Config.Entry != c.entry || p.Config.Kind != c.kind || !slices.Equal(paths(p.Config), c.files) {
			t.Errorf("%s: root %s, entry %s, kind %s, files %q; want %s, %s, %s, %q", c.path, p.Root, p.Config.Entry, p.Config.Kind, paths(p.Config), abs(t, c.root), c.entry, c.kind, c.files)
		}
		if len(p.Config.Images) != 0 || p.Config.Images == nil {
			t.Errorf("%s: images %v, want an empty list", c.path, p.Config.Images)
		}
	}
}

func TestCollectADataset(t *testing.T) {
	src, err := Collect("../harbor/testdata/corpus")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Pack(src)
	if err != nil {
		t.Fatal(err)
	}
	if p.Config.Kind != KindHarborDataset || p.Config.Entry != "corpus" || p.Root != abs(t, "../harbor/testdata") {
		t.Fatalf("dataset: kind %s, entry %s, root %s", p.Config.Kind, p.Config.Entry, p.Root)
	}
	for _, f := range p.Config.Files {
		if !strings.HasPrefix(f.Path, "corpus/") {
			t.Fatalf("dataset file %s outside the dataset folder", f.Path)
		}
	}
}

func TestCollectRefusesTheBuiltInTask(t *testing.T) {
	t.Chdir(t.TempDir())
	if _, err := Collect("hello"); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "built-in") {
		t.Fatalf("Collect(hello) = %v, want ErrInvalid naming the built-in task", err)
	}
}

// The in-memory stores stand in for two registries: what is compared is the bytes pushed.
func TestSameFilesSameDigest(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	copyTree(t, "../examples/notes-task", filepath.Join(dir, "notes-task"))
	copyTree(t, "../examples/notes", filepath.Join(dir, "notes"))
	push := func() string {
		src, err := Collect(filepath.Join(dir, "notes-task"))
		if err != nil {
			t.Fatal(err)
		}
		p, err := Pack(src)
		if err != nil {
			t.Fatal(err)
		}
		desc, err := p.Push(ctx, memory.New())
		if err != nil {
			t.Fatal(err)
		}
		return desc.Digest.String()
	}
	first, second := push(), push()
	if first != second {
		t.Fatalf("two pushes of the same files: %s and %s", first, second)
	}
	// The mtime of a file is not its content.
	env := filepath.Join(dir, "notes", "env.yaml")
	if err := os.Chtimes(env, timeZero(), timeZero()); err != nil {
		t.Fatal(err)
	}
	if d := push(); d != first {
		t.Fatalf("a touched file changed the digest: %s, was %s", d, first)
	}
	data, _ := os.ReadFile(env)
	data[2] ^= 1 // in the comment on the first line
	if err := os.WriteFile(env, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if d := push(); d == first {
		t.Fatalf("one changed byte kept the digest %s", d)
	}
}

func TestPackRefusesALinkOutsideTheRoot(t *testing.T) {
	dir := t.TempDir()
	outside := filepath.Join(t.TempDir(), "secret.md")
	if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	task := "name: t\nsteps:\n  - id: box\n    type: deploy_sandbox\n    image: alpine\n    command: [sleep, \"9\"]\n  - id: w\n    type: write_file\n    sandbox: box\n    path: /tmp/p\n    from: prompt.md\n"
	if err := os.WriteFile(filepath.Join(dir, "task.yaml"), []byte(task), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(dir, "prompt.md")); err != nil {
		t.Fatal(err)
	}
	src, err := Collect(dir)
	if err != nil {
		t.Fatal(err)
	}
	_, err = Pack(src)
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), filepath.Join(dir, "prompt.md")) || !strings.Contains(err.Error(), "outside the bundle's root") {
		t.Fatalf("Pack with a link outside = %v, want ErrInvalid naming prompt.md", err)
	}
}

func TestCollectRefusesAnAbsoluteReference(t *testing.T) {
	dir := t.TempDir()
	env, _ := filepath.Abs("../examples/notes/env.yaml")
	task := "name: t\nsteps:\n  - id: env\n    type: deploy_env\n    file: " + env + "\n"
	if err := os.WriteFile(filepath.Join(dir, "task.yaml"), []byte(task), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Collect(dir)
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "task.yaml:5: steps[0].file") || !strings.Contains(err.Error(), "absolute path") {
		t.Fatalf("Collect with an absolute env file = %v, want task.yaml:5: steps[0].file", err)
	}
}

type entry struct {
	hdr  tar.Header
	data string
}

func layerOf(t *testing.T, es ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for _, e := range es {
		h := e.hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(e.data)); err != nil {
			t.Fatal(err)
		}
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}

func TestUnpackRefusesWhatEscapesOrDiffers(t *testing.T) {
	good := File{Path: "a/x.txt", Digest: "sha256:2d711642b726b04401627ca9fbac32f5c8530fb1903cc4db02258717921a4881", Size: 1} // "x"
	cfg := Config{Kind: KindTask, Entry: "a/x.txt", Files: []File{good}}
	reg := func(name, data string) entry {
		return entry{tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644}, data}
	}
	for _, c := range []struct {
		name  string
		layer []entry
		want  string
	}{
		{"dotdot", []entry{reg("../x.txt", "x")}, "not a clean path"},
		{"inner dotdot", []entry{reg("a/../../x.txt", "x")}, "not a clean path"},
		{"absolute", []entry{reg("/etc/x.txt", "x")}, "absolute path"},
		{"symlink", []entry{{tar.Header{Typeflag: tar.TypeSymlink, Name: "a/x.txt", Linkname: "/etc/passwd"}, ""}}, "symbolic link"},
		{"hard link", []entry{{tar.Header{Typeflag: tar.TypeLink, Name: "a/x.txt", Linkname: "../../etc/passwd"}, ""}}, "hard link"},
		{"unlisted", []entry{reg("a/x.txt", "x"), reg("a/y.txt", "y")}, "not among the config's files"},
		{"changed", []entry{reg("a/x.txt", "y")}, "has digest"},
		{"missing", nil, "is missing"},
		{"twice", []entry{reg("a/x.txt", "x"), reg("a/x.txt", "x")}, "twice"},
	} {
		dir := t.TempDir()
		err := unpack(bytes.NewReader(layerOf(t, c.layer...)), cfg, dir)
		if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: unpack = %v, want ErrInvalid saying %q", c.name, err, c.want)
		}
	}
	dir := t.TempDir()
	if err := unpack(bytes.NewReader(layerOf(t, reg("a/x.txt", "x"))), cfg, dir); err != nil {
		t.Fatalf("unpack of a good layer: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a", "x.txt")); string(b) != "x" {
		t.Fatalf("unpacked a/x.txt = %q", b)
	}
}

func TestParseConfigRefusesEscapingPaths(t *testing.T) {
	for _, c := range []string{
		`{"kind":"task","entry":"../t.yaml","files":[]}`,
		`{"kind":"task","entry":"t.yaml","files":[{"path":"/etc/passwd"}]}`,
		`{"kind":"task","entry":"t.yaml","files":[{"path":"a/../../b"}]}`,
		`{"kind":"rocket","entry":"t.yaml","files":[]}`,
	} {
		if _, err := parseConfig([]byte(c)); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("parseConfig(%s) = %v, want ErrInvalid", c, err)
		}
	}
}

func copyTree(t *testing.T, from, to string) {
	t.Helper()
	err := filepath.WalkDir(from, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(from, p)
		dst := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(dst, 0o755)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
}
