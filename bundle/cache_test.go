package bundle

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/harbor"
)

// cached packs path into a fresh cache as ref, as a push leaves it, and returns a client of
// that cache whose registry (a closed port on this host) never answers.
func cached(t *testing.T, path string, ref Ref) (*Client, string) {
	t.Helper()
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	ctx := context.Background()
	c := &Client{Cache: Cache{Dir: filepath.Join(t.TempDir(), "bundles")}, PlainHTTP: func(string) bool { return true }}
	src, err := Collect(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := Pack(src)
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := c.Cache.blobs()
	if err != nil {
		t.Fatal(err)
	}
	desc, err := p.Push(ctx, blobs)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Cache.record(ctx, ref, desc); err != nil {
		t.Fatal(err)
	}
	return c, desc.Digest.String()
}

func TestCacheServesWithoutARegistry(t *testing.T) {
	ctx := context.Background()
	ref := Ref{Host: "127.0.0.1:1", Repo: "team/notes-task", Tag: "v1"}
	c, digest := cached(t, "../examples/notes-task", ref)

	// A digest it holds: no network at all.
	r, err := c.Pull(ctx, ref.At(digest))
	if err != nil {
		t.Fatal(err)
	}
	if !r.Cached || r.Offline != nil || r.Digest != digest {
		t.Fatalf("Pull by digest = %+v, want from the cache", r)
	}
	if r.Path != filepath.Join(c.Cache.Dir, "trees", strings.Replace(digest, ":", "-", 1), "notes-task", "task.yaml") {
		t.Fatalf("Pull by digest: path %s", r.Path)
	}
	want, _ := os.ReadFile("../examples/notes/env.yaml")
	if got, err := os.ReadFile(filepath.Join(r.Tree, "notes", "env.yaml")); err != nil || string(got) != string(want) {
		t.Fatalf("unpacked notes/env.yaml = %q, %v", got, err)
	}

	// A tag, the registry unreachable: the cache's copy, saying why.
	r, err = c.Pull(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if r.Cached || !errors.Is(r.Offline, agentenv.ErrUnavailable) || r.Digest != digest || !strings.Contains(r.Offline.Error(), "127.0.0.1:1") {
		t.Fatalf("Pull by tag offline = %+v, want the cache's copy with why", r)
	}
	// A tag it does not hold, the registry unreachable: an error naming both.
	_, err = c.Pull(ctx, Ref{Host: ref.Host, Repo: ref.Repo, Tag: "v2"})
	if !errors.Is(err, agentenv.ErrUnavailable) || !strings.Contains(err.Error(), "no copy") {
		t.Fatalf("Pull of an uncached tag offline = %v, want unreachable and no copy", err)
	}

	es, err := c.Cache.List(ctx)
	if err != nil || len(es) != 1 || es[0].Ref != ref.String() || es[0].Kind != KindTask || es[0].Tree == "" || len(es[0].Files) != 2 {
		t.Fatalf("List = %+v, %v", es, err)
	}
	e, err := c.Cache.Inspect(ctx, ref)
	if err != nil || e.Digest != digest || e.Entry != "notes-task/task.yaml" || e.Name != "notes-task" {
		t.Fatalf("Inspect = %+v, %v", e, err)
	}
	if _, err := c.Cache.Inspect(ctx, Ref{Host: ref.Host, Repo: ref.Repo, Tag: "nope"}); !errors.Is(err, agentenv.ErrInvalid) {
		t.Fatalf("Inspect of an unknown tag = %v, want ErrInvalid", err)
	}

	// Two tags of one bundle: removing one keeps the files; removing the last removes them.
	other := Ref{Host: ref.Host, Repo: ref.Repo, Tag: "latest"}
	if err := c.Cache.record(ctx, other, mustResolve(t, c, ref)); err != nil {
		t.Fatal(err)
	}
	if err := c.Cache.Remove(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Tree); err != nil {
		t.Fatalf("the tree went with one of two tags: %v", err)
	}
	if err := c.Cache.Remove(ctx, other); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Tree); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the tree stayed after its last tag: %v", err)
	}
	blobs, _ := os.ReadDir(filepath.Join(c.Cache.Dir, "blobs", "sha256"))
	if len(blobs) != 0 {
		t.Fatalf("%d blobs stayed after the last tag went", len(blobs))
	}
	if es, err := c.Cache.List(ctx); err != nil || len(es) != 0 {
		t.Fatalf("List after rm = %+v, %v", es, err)
	}
	if err := c.Cache.Remove(ctx, ref); !errors.Is(err, agentenv.ErrNotFound) {
		t.Fatalf("Remove again = %v, want ErrNotFound", err)
	}
}

func TestATamperedCacheBlobMakesNoTree(t *testing.T) {
	ctx := context.Background()
	ref := Ref{Host: "127.0.0.1:1", Repo: "notes", Tag: "v1"}
	c, digest := cached(t, "../examples/notes-task", ref)
	m, _, err := c.Cache.manifest(ctx, mustResolve(t, c, ref))
	if err != nil {
		t.Fatal(err)
	}
	layer := filepath.Join(c.Cache.Dir, "blobs", "sha256", m.Layers[0].Digest.Encoded())
	data, err := os.ReadFile(layer)
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0xff
	os.Chmod(layer, 0o644)
	if err := os.WriteFile(layer, data, 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = c.Pull(ctx, ref.At(digest))
	if !errors.Is(err, agentenv.ErrInvalid) {
		t.Fatalf("Pull of a tampered layer = %v, want ErrInvalid", err)
	}
	ents, _ := os.ReadDir(c.Cache.treesDir())
	if len(ents) != 0 {
		t.Fatalf("a tampered layer left %d entries in trees/", len(ents))
	}
}

func mustResolve(t *testing.T, c *Client, r Ref) (d ocispec.Descriptor) {
	t.Helper()
	d, err := c.Cache.resolve(context.Background(), r)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// A Harbor task comes out of the cache as a task folder under its own name, which loads, its
// scripts executable still.
func TestAHarborTaskRoundTrips(t *testing.T) {
	ctx := context.Background()
	ref := Ref{Host: "127.0.0.1:1", Repo: "harbor/hello-file", Tag: "v1"}
	c, digest := cached(t, "../harbor/testdata/corpus/hello-file", ref)
	r, err := c.Pull(ctx, ref.At(digest))
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(r.Path) != "hello-file" || !harbor.IsTask(r.Path) {
		t.Fatalf("pulled Harbor task at %s, want a task folder named hello-file", r.Path)
	}
	if _, err := harbor.Load(r.Path); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"tests/test.sh", "solution/solve.sh"} {
		orig, err := os.Stat(filepath.Join("../harbor/testdata/corpus/hello-file", f))
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.Stat(filepath.Join(r.Path, f))
		if err != nil || got.Mode().Perm()&0o100 != orig.Mode().Perm()&0o100 {
			t.Errorf("%s: mode %v, the folder's %v (%v)", f, got.Mode(), orig.Mode(), err)
		}
	}
}
