//go:build integration

package bundle_test

import (
	"fmt"
	"path/filepath"
	"testing"

	"oras.land/oras-go/v2/registry/remote/credentials"

	"github.com/agentenv/agentenv/bundle"
	"github.com/agentenv/agentenv/internal/registryserver"
)

// BenchmarkNotesBundle times, side by side in one run against a real registry on this
// machine, what a teammate's `agentenv push` and `agentenv run REF` cost for examples/notes-task
// (its task file and the env it deploys): a push, a pull into an empty cache, a pull of the
// tag again (the registry asked for the manifest only) and a pull of the cached digest (no
// network at all).
func BenchmarkNotesBundle(b *testing.B) {
	reg := registryserver.Start(b, registryserver.Options{})
	src, err := bundle.Collect(filepath.Join("..", "examples", "notes-task"))
	if err != nil {
		b.Fatal(err)
	}
	client := func(dir string) *bundle.Client {
		return &bundle.Client{Cache: bundle.Cache{Dir: dir}, PlainHTTP: func(string) bool { return true },
			Credentials: credentials.NewMemoryStore()}
	}
	ref, err := bundle.ParseRef(reg.Addr + "/bench/notes-task:v1")
	if err != nil {
		b.Fatal(err)
	}
	pushed, err := client(b.TempDir()).Push(b.Context(), src, ref)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("push", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			r := ref
			r.Tag = fmt.Sprintf("v%d", i)
			if _, err := client(b.TempDir()).Push(b.Context(), src, r); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("pull-empty-cache", func(b *testing.B) {
		for b.Loop() {
			if _, err := client(b.TempDir()).Pull(b.Context(), ref); err != nil {
				b.Fatal(err)
			}
		}
	})
	warm := client(b.TempDir())
	if _, err := warm.Pull(b.Context(), ref); err != nil {
		b.Fatal(err)
	}
	b.Run("pull-tag-cached", func(b *testing.B) {
		for b.Loop() {
			if r, err := warm.Pull(b.Context(), ref); err != nil || r.Digest != pushed.Digest {
				b.Fatalf("Pull = %v, %v", r, err)
			}
		}
	})
	b.Run("pull-digest-cached", func(b *testing.B) {
		for b.Loop() {
			if r, err := warm.Pull(b.Context(), pushed.Ref.At(pushed.Digest)); err != nil || !r.Cached {
				b.Fatalf("Pull = %+v, %v; want the cache's copy", r, err)
			}
		}
	})
}
