package task

import (
	"fmt"
	"strings"

	"github.com/agentenv/agentenv"
)

// Error is one problem in a task file, with where it is. Load and Parse return all of them at
// once, joined with errors.Join; each wraps [agentenv.ErrInvalid].
type Error struct {
	File string // the task file's path as given to Load or Parse
	Line int    // 1-based line of the field, or 0 when it has none
	Path string // the field: "steps[2].depends_on[0]"; empty for the whole file
	Msg  string // what is wrong, lower case
}

// Error formats e as "file:line: path: msg", the form editors jump to.
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	b.WriteString(": ")
	if e.Path != "" {
		b.WriteString(e.Path)
		b.WriteString(": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns agentenv.ErrInvalid.
func (e *Error) Unwrap() error { return agentenv.ErrInvalid }

// suggest returns ` (did you mean "x"?)` for the candidate closest to s, or "" when none is
// close enough to be a plausible typo.
func suggest(s string, candidates []string) string {
	maxDist := 1
	if len(s) >= 5 {
		maxDist = 2
	}
	best, bestDist := "", maxDist+1
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), c); d < bestDist {
			best, bestDist = c, d
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Damerau-Levenshtein distance (with adjacent transpositions) of a and b.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64 // field names are short; a long key is no typo of one
	}
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}
