package bundle

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/content/oci"
	"oras.land/oras-go/v2/errdef"

	"github.com/agentenv/agentenv"
)

// Cache is the local cache of bundles in a folder: an OCI image layout (blobs, and
// references recorded as tags of index.json, the full host/repo:tag), and each bundle's files
// unpacked once under trees/sha256-HEX/. Processes share it: index.json changes under a lock
// file, blobs and trees appear whole (written aside, then renamed).
type Cache struct {
	Dir string
}

// DefaultDir is ${XDG_CACHE_HOME:-~/.cache}/agentenv/bundles, with getenv as os.Getenv.
func DefaultDir(getenv func(string) string) (string, error) {
	base := getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("bundle cache folder: %w", err)
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "agentenv", "bundles"), nil
}

// lockWait bounds how long a change of the cache's index waits for another process's.
const lockWait = time.Minute

// maxManifest and maxConfig bound what is read of a manifest and a config, here and from a
// registry: a bundle's are a few kilobytes.
const (
	maxManifest = 4 << 20
	maxConfig   = 16 << 20
)

// blobs is the cache's blob storage, which needs no lock: a blob is written aside, verified
// against its digest and renamed into place.
func (c Cache) blobs() (*oci.Storage, error) {
	s, err := oci.NewStorage(c.Dir)
	if err != nil {
		return nil, fmt.Errorf("bundle cache %s: %w", c.Dir, err)
	}
	return s, nil
}

// index runs fn on the cache's OCI store, read afresh, holding the cache's lock, so that no
// other process's change of index.json is lost.
func (c Cache) index(ctx context.Context, fn func(*oci.Store) error) error {
	if err := os.MkdirAll(c.Dir, 0o755); err != nil {
		return fmt.Errorf("bundle cache %s: %w", c.Dir, err)
	}
	f, err := os.OpenFile(filepath.Join(c.Dir, "lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return fmt.Errorf("bundle cache: %w", err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(ctx, lockWait)
	defer cancel()
	for {
		err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
		if err == nil {
			break
		}
		if !errors.Is(err, unix.EWOULDBLOCK) && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("bundle cache: lock %s: %w", f.Name(), err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("bundle cache: wait for another process's hold on %s: %w", f.Name(), context.Cause(ctx))
		case <-time.After(20 * time.Millisecond):
		}
	}
	defer func() { _ = unix.Flock(int(f.Fd()), unix.LOCK_UN) }() // closing f releases it too
	s, err := oci.NewWithContext(ctx, c.Dir)
	if err != nil {
		return fmt.Errorf("bundle cache %s: %w", c.Dir, err)
	}
	return fn(s)
}

// resolve returns the manifest a reference names in the cache: by digest when r has one, else
// by its full name and tag; an error wrapping agentenv.ErrNotFound if it has none.
func (c Cache) resolve(ctx context.Context, r Ref) (ocispec.Descriptor, error) {
	var desc ocispec.Descriptor
	err := c.index(ctx, func(s *oci.Store) error {
		var err error
		key := r.String()
		if r.Digest != "" {
			key = r.Digest
		}
		desc, err = s.Resolve(ctx, key)
		return err
	})
	if errors.Is(err, errdef.ErrNotFound) {
		return desc, fmt.Errorf("%s is not in the bundle cache %s: %w", r, c.Dir, agentenv.ErrNotFound)
	}
	return desc, err
}

// record tags desc with r's full reference in the cache.
func (c Cache) record(ctx context.Context, r Ref, desc ocispec.Descriptor) error {
	return c.index(ctx, func(s *oci.Store) error {
		if err := s.Tag(ctx, desc, r.String()); err != nil {
			return fmt.Errorf("bundle cache: record %s: %w", r, err)
		}
		return nil
	})
}

// manifest reads a bundle's manifest and config from the cache's blobs.
func (c Cache) manifest(ctx context.Context, desc ocispec.Descriptor) (ocispec.Manifest, Config, error) {
	b, err := c.blobs()
	if err != nil {
		return ocispec.Manifest{}, Config{}, err
	}
	data, err := fetchAll(ctx, b, desc, maxManifest)
	if err != nil {
		return ocispec.Manifest{}, Config{}, err
	}
	m, err := checkManifest(data)
	if err != nil {
		return ocispec.Manifest{}, Config{}, err
	}
	cdata, err := fetchAll(ctx, b, m.Config, maxConfig)
	if err != nil {
		return ocispec.Manifest{}, Config{}, err
	}
	cfg, err := parseConfig(cdata)
	return m, cfg, err
}

// treesDir holds the unpacked trees.
func (c Cache) treesDir() string { return filepath.Join(c.Dir, "trees") }

// treeOf is where the files of manifest digest d are unpacked.
func (c Cache) treeOf(d string) string {
	return filepath.Join(c.treesDir(), strings.ReplaceAll(d, ":", "-"))
}

// tree returns the folder holding the files of the bundle whose manifest is desc, unpacking
// them from the cache's blobs the first time: into a folder aside, verified file by file
// against the config, then renamed into place, so that a tree is there whole or not at all.
func (c Cache) tree(ctx context.Context, desc ocispec.Descriptor) (string, Config, error) {
	m, cfg, err := c.manifest(ctx, desc)
	if err != nil {
		return "", Config{}, err
	}
	dst := c.treeOf(desc.Digest.String())
	if fi, err := os.Stat(dst); err == nil && fi.IsDir() {
		return dst, cfg, nil
	}
	if err := os.MkdirAll(c.treesDir(), 0o755); err != nil {
		return "", Config{}, fmt.Errorf("bundle cache: %w", err)
	}
	c.sweep()
	tmp, err := os.MkdirTemp(c.treesDir(), ".unpack-")
	if err != nil {
		return "", Config{}, fmt.Errorf("bundle cache: %w", err)
	}
	defer os.RemoveAll(tmp) // gone once renamed, or on any error
	b, err := c.blobs()
	if err != nil {
		return "", Config{}, err
	}
	rc, err := b.Fetch(ctx, m.Layers[0])
	if err != nil {
		return "", Config{}, fmt.Errorf("bundle %s: layer %s: %w", desc.Digest, m.Layers[0].Digest, err)
	}
	defer rc.Close()
	vr := content.NewVerifyReader(rc, m.Layers[0])
	if err := unpack(vr, cfg, tmp); err != nil {
		return "", Config{}, fmt.Errorf("bundle %s: %w", desc.Digest, err)
	}
	if _, err := io.Copy(io.Discard, vr); err != nil {
		return "", Config{}, fmt.Errorf("bundle %s: layer %s: %w", desc.Digest, m.Layers[0].Digest, err)
	}
	if err := vr.Verify(); err != nil {
		return "", Config{}, fmt.Errorf("bundle %s: layer %s does not match its digest: refused: %w: %w", desc.Digest, m.Layers[0].Digest, err, agentenv.ErrInvalid)
	}
	if err := os.Rename(tmp, dst); err != nil {
		if fi, serr := os.Stat(dst); serr == nil && fi.IsDir() {
			return dst, cfg, nil // another process unpacked it first
		}
		return "", Config{}, fmt.Errorf("bundle cache: %w", err)
	}
	return dst, cfg, nil
}

// sweep removes what unpacks that were killed left aside, an hour after they began.
func (c Cache) sweep() {
	ents, _ := os.ReadDir(c.treesDir())
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".unpack-") {
			continue
		}
		if fi, err := e.Info(); err == nil && time.Since(fi.ModTime()) > time.Hour {
			os.RemoveAll(filepath.Join(c.treesDir(), e.Name()))
		}
	}
}

// Entry is one reference the cache holds.
type Entry struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
	Kind   Kind   `json:"kind"`
	Name   string `json:"name"`
	Entry  string `json:"entry"`
	Files  []File `json:"files"`
	Size   int64  `json:"size"`           // of the files, summed
	Tree   string `json:"tree,omitempty"` // the unpacked files, if unpacked
}

// List returns every reference the cache holds, sorted.
func (c Cache) List(ctx context.Context) ([]Entry, error) {
	if _, err := os.Stat(filepath.Join(c.Dir, ocispec.ImageIndexFile)); errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	refs := map[string]ocispec.Descriptor{}
	err := c.index(ctx, func(s *oci.Store) error {
		return s.Tags(ctx, "", func(tags []string) error {
			for _, t := range tags {
				d, err := s.Resolve(ctx, t)
				if err != nil {
					return err
				}
				if t != d.Digest.String() {
					refs[t] = d
				}
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("bundle cache %s: %w", c.Dir, err)
	}
	out := make([]Entry, 0, len(refs))
	for _, ref := range slices.Sorted(maps.Keys(refs)) {
		e, err := c.entry(ctx, ref, refs[ref])
		if err != nil {
			return nil, err
		}
		out = append(out, e)
	}
	return out, nil
}

func (c Cache) entry(ctx context.Context, ref string, desc ocispec.Descriptor) (Entry, error) {
	_, cfg, err := c.manifest(ctx, desc)
	if err != nil {
		return Entry{}, fmt.Errorf("bundle cache: %s: %w", ref, err)
	}
	e := Entry{Ref: ref, Digest: desc.Digest.String(), Kind: cfg.Kind, Name: cfg.Name, Entry: cfg.Entry, Files: cfg.Files}
	for _, f := range cfg.Files {
		e.Size += f.Size
	}
	if t := c.treeOf(e.Digest); isDir(t) {
		e.Tree = t
	}
	return e, nil
}

// Inspect returns what the cache holds for r; an error wrapping agentenv.ErrNotFound (and
// ErrInvalid) if it holds nothing.
func (c Cache) Inspect(ctx context.Context, r Ref) (Entry, error) {
	desc, err := c.resolve(ctx, r)
	if err != nil {
		return Entry{}, fmt.Errorf("%w (pull it first): %w", err, agentenv.ErrInvalid)
	}
	return c.entry(ctx, r.String(), desc)
}

// Remove forgets r: its tag, and when no other reference names the same bundle, its manifest,
// blobs and unpacked files. A digest reference removes every tag of that bundle. An error
// wraps agentenv.ErrNotFound (and ErrInvalid) if the cache holds nothing for r.
func (c Cache) Remove(ctx context.Context, r Ref) error {
	var gone string
	err := c.index(ctx, func(s *oci.Store) error {
		key := r.String()
		if r.Tag == "" && r.Digest != "" {
			key = r.Digest
		}
		desc, err := s.Resolve(ctx, key)
		if errors.Is(err, errdef.ErrNotFound) {
			return fmt.Errorf("%s is not in the bundle cache %s: %w: %w", r, c.Dir, agentenv.ErrNotFound, agentenv.ErrInvalid)
		}
		if err != nil {
			return err
		}
		if key != desc.Digest.String() {
			if err := s.Untag(ctx, key); err != nil {
				return err
			}
			var others bool
			err := s.Tags(ctx, "", func(tags []string) error {
				for _, t := range tags {
					if d, err := s.Resolve(ctx, t); err == nil && t != d.Digest.String() && d.Digest == desc.Digest {
						others = true
					}
				}
				return nil
			})
			if err != nil || others {
				return err
			}
		}
		if err := s.Delete(ctx, desc); err != nil {
			return fmt.Errorf("bundle cache: remove %s: %w", desc.Digest, err)
		}
		gone = desc.Digest.String()
		return nil
	})
	if err != nil || gone == "" {
		return err
	}
	if err := os.RemoveAll(c.treeOf(gone)); err != nil {
		return fmt.Errorf("bundle cache: %w", err)
	}
	return nil
}

// fetchAll reads desc's blob from f, at most limit bytes, verified against its digest.
func fetchAll(ctx context.Context, f content.Fetcher, desc ocispec.Descriptor, limit int64) ([]byte, error) {
	if desc.Size > limit || desc.Size < 0 {
		return nil, fmt.Errorf("blob %s: %d bytes, more than the %d a bundle's may have: %w", desc.Digest, desc.Size, limit, agentenv.ErrInvalid)
	}
	rc, err := f.Fetch(ctx, desc)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	data, err := content.ReadAll(rc, desc)
	if errors.Is(err, content.ErrMismatchedDigest) || errors.Is(err, content.ErrTrailingData) || errors.Is(err, io.ErrUnexpectedEOF) {
		return nil, fmt.Errorf("blob %s does not match its digest (tampered with or damaged): refused: %w", desc.Digest, agentenv.ErrInvalid)
	}
	if err != nil {
		return nil, fmt.Errorf("blob %s: %w", desc.Digest, err)
	}
	return data, nil
}

// checkManifest parses a manifest and checks that it is a bundle's: an OCI image manifest of
// artifactType ArtifactType, a config of ConfigMediaType and one layer of LayerMediaType.
func checkManifest(data []byte) (ocispec.Manifest, error) {
	var m ocispec.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return m, fmt.Errorf("not an agentenv bundle: its manifest does not parse (%v): %w", err, agentenv.ErrInvalid)
	}
	if m.MediaType != ocispec.MediaTypeImageManifest || m.ArtifactType != ArtifactType || m.Config.MediaType != ConfigMediaType ||
		len(m.Layers) != 1 || m.Layers[0].MediaType != LayerMediaType {
		what := m.ArtifactType
		if what == "" {
			what = m.Config.MediaType
		}
		if what == "" {
			what = m.MediaType
		}
		return m, fmt.Errorf("not an agentenv bundle: it is %q, not %s with one layer: %w", what, ArtifactType, agentenv.ErrInvalid)
	}
	return m, nil
}

// parseConfig parses a bundle's config and checks its kind, entry and paths.
func parseConfig(data []byte) (Config, error) {
	var cfg Config
	if err := json.Unmarshal(data, &cfg); err != nil {
		return cfg, fmt.Errorf("bundle config does not parse: %w: %w", err, agentenv.ErrInvalid)
	}
	if !slices.Contains(Kinds, cfg.Kind) {
		return cfg, fmt.Errorf("bundle config: kind %q: want one of %v (a newer agentenv's bundle?): %w", cfg.Kind, Kinds, agentenv.ErrInvalid)
	}
	if !localPath(cfg.Entry) {
		return cfg, fmt.Errorf("bundle config: entry %q is not a clean relative path: %w", cfg.Entry, agentenv.ErrInvalid)
	}
	for _, f := range cfg.Files {
		if !localPath(f.Path) || f.Path == "." {
			return cfg, fmt.Errorf("bundle config: file %q is not a clean relative path: %w", f.Path, agentenv.ErrInvalid)
		}
	}
	for _, im := range cfg.Images {
		if err := im.check(); err != nil {
			return cfg, fmt.Errorf("bundle config: %w", err)
		}
	}
	return cfg, nil
}

// localPath reports whether p is a clean, relative slash path that stays inside its root.
func localPath(p string) bool {
	return p != "" && filepath.IsLocal(filepath.FromSlash(p)) && filepath.ToSlash(filepath.Clean(filepath.FromSlash(p))) == p && !strings.Contains(p, "\\")
}

func isDir(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.IsDir()
}
