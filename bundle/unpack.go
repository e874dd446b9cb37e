package bundle

import (
	"archive/tar"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/agentenv/agentenv"
)

// unpack writes the files of the gzipped tar layer into dir (which must exist and be empty),
// checking each against cfg: only regular files (and folders) at clean relative paths that cfg
// lists, each of the size and digest cfg gives it, and every file cfg lists. Anything else (a
// link, "..", an absolute path, a file not listed or changed) is an error wrapping
// agentenv.ErrInvalid, naming the entry; the caller removes dir then.
func unpack(layer io.Reader, cfg Config, dir string) error {
	want := make(map[string]File, len(cfg.Files))
	for _, f := range cfg.Files {
		want[f.Path] = f
	}
	zr, err := gzip.NewReader(layer)
	if err != nil {
		return fmt.Errorf("bundle layer: %w: %w", err, agentenv.ErrInvalid)
	}
	defer zr.Close()
	tr := tar.NewReader(zr)
	got := map[string]bool{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("bundle layer: %w: %w", err, agentenv.ErrInvalid)
		}
		name := hdr.Name
		clean := path.Clean(strings.TrimSuffix(name, "/"))
		switch {
		case path.IsAbs(name) || strings.HasPrefix(name, "\\") || filepath.VolumeName(name) != "":
			return fmt.Errorf("bundle layer: entry %q is an absolute path: refused: %w", name, agentenv.ErrInvalid)
		case clean == ".." || strings.HasPrefix(clean, "../") || clean != strings.TrimSuffix(name, "/") || strings.Contains(name, "\\"):
			return fmt.Errorf("bundle layer: entry %q is not a clean path inside the bundle: refused: %w", name, agentenv.ErrInvalid)
		}
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(clean)), 0o755); err != nil {
				return err
			}
			continue
		case tar.TypeReg:
		default:
			return fmt.Errorf("bundle layer: entry %q is a %s, not a regular file: refused: %w", name, typeName(hdr.Typeflag), agentenv.ErrInvalid)
		}
		f, ok := want[clean]
		switch {
		case !ok:
			return fmt.Errorf("bundle layer: entry %q is not among the config's files: refused: %w", name, agentenv.ErrInvalid)
		case got[clean]:
			return fmt.Errorf("bundle layer: entry %q comes twice: refused: %w", name, agentenv.ErrInvalid)
		case hdr.Size != f.Size:
			return fmt.Errorf("bundle layer: %s has %d bytes, the config says %d: refused: %w", clean, hdr.Size, f.Size, agentenv.ErrInvalid)
		}
		got[clean] = true
		if err := writeChecked(filepath.Join(dir, filepath.FromSlash(clean)), tr, f, hdr.Mode&0o111 != 0); err != nil {
			return err
		}
	}
	for _, f := range cfg.Files {
		if !got[f.Path] {
			return fmt.Errorf("bundle layer: %s, which the config lists, is missing: %w", f.Path, agentenv.ErrInvalid)
		}
	}
	return nil
}

// writeChecked writes f's bytes from r to p, checking their digest.
func writeChecked(p string, r io.Reader, f File, exec bool) error {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	mode := os.FileMode(0o644)
	if exec {
		mode = 0o755
	}
	out, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return fmt.Errorf("bundle layer: %s: %w", f.Path, err)
	}
	h := sha256.New()
	_, err = io.Copy(io.MultiWriter(out, h), io.LimitReader(r, f.Size))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("bundle layer: %s: %w", f.Path, err)
	}
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != f.Digest {
		return fmt.Errorf("bundle layer: %s has digest %s, the config says %s: refused: %w", f.Path, got, f.Digest, agentenv.ErrInvalid)
	}
	return nil
}

func typeName(t byte) string {
	switch t {
	case tar.TypeSymlink:
		return "symbolic link"
	case tar.TypeLink:
		return "hard link"
	case tar.TypeChar, tar.TypeBlock:
		return "device"
	case tar.TypeFifo:
		return "fifo"
	}
	return fmt.Sprintf("tar entry of type %q", t)
}
