package task

import (
	"github.com/agentenv/agentenv/internal/yamlfile"
)

// Error is one problem in a task file, with where it is (file, line, field path). Load and Parse
// return all of them at once, joined with errors.Join; each wraps [agentenv.ErrInvalid].
type Error = yamlfile.Error
