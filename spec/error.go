package spec

import (
	"strings"

	"github.com/agentenv/agentenv/internal/yamlfile"
)

// Error is one problem in an env file, with where it is (file, line, field path). Load and Parse
// return all of them at once, joined with errors.Join; each wraps [agentenv.ErrInvalid].
type Error = yamlfile.Error

// oneOf formats the allowed values of an enum for a message: "http or stdio", "a, b or c".
func oneOf[T ~string](values []T) string {
	s := make([]string, len(values))
	for i, v := range values {
		s[i] = string(v)
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " or " + s[len(s)-1]
}
