package spec

import (
	"fmt"
	"path/filepath"

	"github.com/agentenv/agentenv/internal/yamlfile"
)

// Files returns every file of this host the env reads: the env file itself, then its service
// DB's init_sql and seed files, each absolute and cleaned. A file named by an absolute path is
// an [*Error] naming its field: the env could not be moved with its files (a bundle).
func (e *Env) Files() ([]string, error) {
	if e.File == "" {
		return nil, nil
	}
	self, err := filepath.Abs(e.File)
	if err != nil {
		return nil, fmt.Errorf("env %s: %w", e.File, err)
	}
	out := []string{self}
	if e.ServiceDB == nil {
		return out, nil
	}
	for _, list := range []struct {
		key   string
		paths []string
	}{{"service_db.init_sql", e.ServiceDB.InitSQL}, {"service_db.seed", e.ServiceDB.Seed}} {
		for i, p := range list.paths {
			field := yamlfile.Index(list.key, i)
			if filepath.IsAbs(p) {
				return nil, &Error{File: e.File, Line: e.lines[field], Path: field,
					Msg: fmt.Sprintf("%q is an absolute path: write it relative to the env file, so that the env moves with its files", p)}
			}
			abs, err := filepath.Abs(e.Path(p))
			if err != nil {
				return nil, fmt.Errorf("env %s: %s: %w", e.File, field, err)
			}
			out = append(out, abs)
		}
	}
	return out, nil
}
