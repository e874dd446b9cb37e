// Package atomicfile writes a file that appears whole or not at all: the content goes to a
// temporary file beside the target, which is renamed over it only once everything was written
// and synced. A failed or interrupted write leaves the target as it was.
package atomicfile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// Write calls fill with a writer to a new temporary file in path's folder and, if fill and the
// writes succeed, gives the file perm and renames it to path. On any error the temporary file
// is removed and path is untouched.
func Write(path string, perm os.FileMode, fill func(w io.Writer) error) (err error) {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := fill(f); err != nil {
		return err
	}
	if err := errors.Join(f.Chmod(perm), f.Sync(), f.Close()); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// WriteBytes is Write of data.
func WriteBytes(path string, perm os.FileMode, data []byte) error {
	return Write(path, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}
