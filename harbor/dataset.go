package harbor

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"

	"github.com/agentenv/agentenv"
)

// Dataset returns the task folders directly under dir (absolute, sorted by name) whose names
// match any include glob (all if none) and no exclude glob (path.Match syntax on the folder
// name); a dir that is itself a task is a dataset of one, filtered the same way. No task found
// is an error wrapping agentenv.ErrInvalid, as is a malformed glob.
func Dataset(dir string, include, exclude []string) ([]string, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("harbor dataset %s: %w", dir, err)
	}
	for _, g := range append(append([]string{}, include...), exclude...) {
		if _, err := path.Match(g, ""); err != nil {
			return nil, fmt.Errorf("harbor dataset %s: glob %q: %v: %w", dir, g, err, agentenv.ErrInvalid)
		}
	}
	keep := func(name string) bool {
		in := len(include) == 0
		for _, g := range include {
			if ok, _ := path.Match(g, name); ok {
				in = true
				break
			}
		}
		for _, g := range exclude {
			if ok, _ := path.Match(g, name); ok {
				return false
			}
		}
		return in
	}
	var out []string
	if IsTask(abs) {
		if keep(filepath.Base(abs)) {
			out = append(out, abs)
		}
	} else {
		entries, err := os.ReadDir(abs)
		if err != nil {
			return nil, fmt.Errorf("harbor dataset %s: %w: %w", dir, err, agentenv.ErrInvalid)
		}
		for _, e := range entries {
			p := filepath.Join(abs, e.Name())
			if fi, err := os.Stat(p); err == nil && fi.IsDir() && IsTask(p) && keep(e.Name()) {
				out = append(out, p)
			}
		}
		sort.Strings(out)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("harbor dataset %s: no task folder (one with task.toml) matches: %w", dir, agentenv.ErrInvalid)
	}
	return out, nil
}

// Digest is a sha256 over every file of the task folder (paths, modes, contents; a link by
// its target), "sha256:HEX": any change to a file, its name or its mode changes it.
func (t *Task) Digest() (string, error) {
	return DigestDir(t.Dir)
}

// DigestDir is Digest of the folder dir.
func DigestDir(dir string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		mode := fi.Mode()
		switch {
		case mode.IsDir():
			fmt.Fprintf(h, "d %q %o\n", rel, mode.Perm())
		case mode&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(h, "l %q %q\n", rel, target)
		case mode.IsRegular():
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			fmt.Fprintf(h, "f %q %o %d\n", rel, mode.Perm(), fi.Size())
			if _, err := io.Copy(h, f); err != nil {
				return err
			}
		default:
			fmt.Fprintf(h, "o %q %v\n", rel, mode.Type())
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("digest %s: %w", dir, err)
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), nil
}
