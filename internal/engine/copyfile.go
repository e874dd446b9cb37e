package engine

import (
	"archive/tar"
	"fmt"
	"io"

	"github.com/agentenv/agentenv"
)

// CopiedFile reads the one file of r, the tar archive a container copy (CopyFromContainer)
// answers, of at most max bytes. A path that is not a regular file, or a larger file, is
// ErrInvalid.
func CopiedFile(r io.Reader, max int64) ([]byte, error) {
	tr := tar.NewReader(r)
	h, err := tr.Next()
	if err != nil {
		return nil, err
	}
	if h.Typeflag != tar.TypeReg {
		return nil, fmt.Errorf("not a regular file: %w", agentenv.ErrInvalid)
	}
	data, err := io.ReadAll(io.LimitReader(tr, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("larger than %d bytes: %w", max, agentenv.ErrInvalid)
	}
	return data, nil
}
