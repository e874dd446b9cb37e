// Package confine says whether a path a file names lies inside that file's folder, symbolic
// links followed: task and env files may name host files (seed data, init SQL, files to copy
// into a sandbox), and none of them may reach outside its own folder.
package confine

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
)

// OutsideError is Path's answer for a path outside its folder.
type OutsideError struct {
	Path string // as the file named it
	Dir  string // the folder, absolute, its links followed
}

func (e *OutsideError) Error() string { return e.Path + " is outside " + e.Dir }

// Path resolves p against the folder dir (p as it is when absolute) and returns the clean path
// to open, its links not resolved. Once the symbolic links of both are followed it must lie
// inside dir, or the error is an *OutsideError; a path that does not exist yet is judged by its
// name (reading it fails later, with its own error). Other errors are the file system's.
func Path(dir, p string) (string, error) {
	base, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	full := p
	if !filepath.IsAbs(full) {
		full = filepath.Join(base, p)
	}
	full = filepath.Clean(full)
	real, err := filepath.EvalSymlinks(full)
	switch {
	case errors.Is(err, os.ErrNotExist):
		real = full
	case err != nil:
		return "", err
	}
	if rb, err := filepath.EvalSymlinks(base); err == nil {
		base = rb
	}
	if rel, err := filepath.Rel(base, real); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", &OutsideError{Path: p, Dir: base}
	}
	return full, nil
}
