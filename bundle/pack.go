package bundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/content"
	"oras.land/oras-go/v2/errdef"

	"github.com/agentenv/agentenv"
)

// Media types of a bundle.
const (
	ArtifactType    = "application/vnd.agentenv.bundle.v1"
	ConfigMediaType = "application/vnd.agentenv.bundle.config.v1+json"
	LayerMediaType  = "application/vnd.agentenv.bundle.layer.v1.tar+gzip"
)

// Manifest annotations of a bundle, beside org.opencontainers.image.created (fixed at
// [Created], so that the same files make the same digest).
const (
	AnnotationKind = "io.agentenv.bundle.kind"
	AnnotationName = "io.agentenv.bundle.name"
	Created        = "1970-01-01T00:00:00Z"
)

// MaxSize bounds a bundle's files, summed: a bundle is a task's files, not its images or data
// sets, and is packed in memory.
const MaxSize = 256 << 20

// Config is a bundle's config blob: what it is, which file is run, and every file it holds.
type Config struct {
	Kind  Kind   `json:"kind"`
	Entry string `json:"entry"` // slash path relative to the bundle's root; for a Harbor kind, a folder ("." for none)
	Name  string `json:"name"`
	Files []File `json:"files"` // sorted by path
	// Images are the images the bundle's envs and tasks run, pushed beside it and pinned by
	// digest (push --with-images), sorted by Ref; empty when pushed without them.
	Images []Image `json:"images"`
}

// File is one file of a bundle.
type File struct {
	Path   string `json:"path"` // slash path relative to the bundle's root
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// Image is an image a bundle pins: its reference as the env or task names it, the repository
// it was pushed to, and its manifest digest there.
type Image struct {
	Ref    string `json:"ref"`    // as named: agentenv:dev
	Name   string `json:"name"`   // pushed to: host/repo/images/agentenv
	Digest string `json:"digest"` // sha256:HEX, a content digest
}

// Packed is a bundle's blobs, made by [Pack].
type Packed struct {
	Config Config
	Root   string // the folder the paths are relative to
	config []byte
	layer  []byte
}

// Pack reads src's files and makes the bundle's config and layer. Paths are relative to the
// deepest folder holding them all; a file that is missing, not a regular file, or a symbolic
// link leading outside that folder is an error wrapping agentenv.ErrInvalid, naming it.
func Pack(src Source) (*Packed, error) {
	if len(src.Files) == 0 {
		return nil, fmt.Errorf("bundle %s: no files: %w", src.Name, agentenv.ErrInvalid)
	}
	root := src.root()
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return nil, fmt.Errorf("bundle root %s: %w", root, err)
	}
	entry, err := filepath.Rel(root, src.Entry)
	if err != nil {
		return nil, fmt.Errorf("bundle entry %s: %w", src.Entry, err)
	}
	p := &Packed{Root: root, Config: Config{Kind: src.Kind, Entry: filepath.ToSlash(entry), Name: src.Name, Files: []File{}, Images: []Image{}}}
	type item struct {
		rel  string
		data []byte
		exec bool
	}
	var items []item
	var total int64
	var errs []error
	for _, f := range src.Files {
		rel, err := filepath.Rel(root, f)
		if err != nil || !within(root, f) {
			errs = append(errs, fmt.Errorf("%s: outside the bundle's root %s: %w", f, root, agentenv.ErrInvalid))
			continue
		}
		real, err := filepath.EvalSymlinks(f)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w: %w", f, err, agentenv.ErrInvalid))
			continue
		}
		if !within(realRoot, real) {
			errs = append(errs, fmt.Errorf("%s: a symbolic link to %s, outside the bundle's root %s: copy the file in: %w", f, real, root, agentenv.ErrInvalid))
			continue
		}
		fi, err := os.Stat(real)
		if err != nil || !fi.Mode().IsRegular() {
			errs = append(errs, fmt.Errorf("%s: not a regular file: %w", f, agentenv.ErrInvalid))
			continue
		}
		if total += fi.Size(); total > MaxSize {
			return nil, fmt.Errorf("bundle %s: its files pass %d MiB: a bundle carries a task's files, not its data: %w", src.Name, MaxSize>>20, agentenv.ErrInvalid)
		}
		data, err := os.ReadFile(real)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", f, err))
			continue
		}
		items = append(items, item{filepath.ToSlash(rel), data, fi.Mode().Perm()&0o111 != 0})
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	slices.SortFunc(items, func(a, b item) int { return strings.Compare(a.rel, b.rel) })
	items = slices.CompactFunc(items, func(a, b item) bool { return a.rel == b.rel })

	var buf bytes.Buffer
	zw, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	tw := tar.NewWriter(zw) // gzip header: no name, no mtime (zero values)
	for _, it := range items {
		mode := int64(0o644)
		if it.exec {
			mode = 0o755
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: it.rel, Mode: mode, Size: int64(len(it.data)), ModTime: time.Unix(0, 0), Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, fmt.Errorf("bundle %s: %s: %w", src.Name, it.rel, err)
		}
		if _, err := tw.Write(it.data); err != nil {
			return nil, err
		}
		sum := sha256.Sum256(it.data)
		p.Config.Files = append(p.Config.Files, File{Path: it.rel, Digest: "sha256:" + hex.EncodeToString(sum[:]), Size: int64(len(it.data))})
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	if err := zw.Close(); err != nil {
		return nil, err
	}
	p.layer = buf.Bytes()
	if p.config, err = json.Marshal(p.Config); err != nil {
		return nil, err
	}
	return p, nil
}

// withImages records imgs in p's config, sorted by Ref.
func (p *Packed) withImages(imgs []Image) error {
	imgs = slices.Clone(imgs)
	slices.SortFunc(imgs, func(a, b Image) int { return strings.Compare(a.Ref, b.Ref) })
	p.Config.Images = imgs
	var err error
	p.config, err = json.Marshal(p.Config)
	return err
}

// Push writes p's layer, config and manifest to dst (a registry, the cache) and returns the
// manifest's descriptor. The same files make the same descriptor.
func (p *Packed) Push(ctx context.Context, dst content.Storage) (ocispec.Descriptor, error) {
	layer := content.NewDescriptorFromBytes(LayerMediaType, p.layer)
	config := content.NewDescriptorFromBytes(ConfigMediaType, p.config)
	for _, b := range []struct {
		desc ocispec.Descriptor
		data []byte
	}{{layer, p.layer}, {config, p.config}} {
		if err := pushIfAbsent(ctx, dst, b.desc, b.data); err != nil {
			return ocispec.Descriptor{}, err
		}
	}
	return oras.PackManifest(ctx, dst, oras.PackManifestVersion1_1, ArtifactType, oras.PackManifestOptions{
		Layers:           []ocispec.Descriptor{layer},
		ConfigDescriptor: &config,
		ManifestAnnotations: map[string]string{
			ocispec.AnnotationCreated: Created,
			AnnotationKind:            string(p.Config.Kind),
			AnnotationName:            p.Config.Name,
		},
	})
}

// Size is the size of the packed layer.
func (p *Packed) Size() int64 { return int64(len(p.layer)) }

func pushIfAbsent(ctx context.Context, dst content.Storage, desc ocispec.Descriptor, data []byte) error {
	ok, err := dst.Exists(ctx, desc)
	if err != nil {
		return fmt.Errorf("blob %s: %w", desc.Digest, err)
	}
	if ok {
		return nil
	}
	if err := dst.Push(ctx, desc, bytes.NewReader(data)); err != nil && !errors.Is(err, errdef.ErrAlreadyExists) {
		return fmt.Errorf("blob %s: %w", desc.Digest, err)
	}
	return nil
}
