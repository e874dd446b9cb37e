// Package suggest finds the known name a mistyped one most likely meant, for "did you mean"
// hints in error messages about config keys, env and task file fields, and step names.
package suggest

import (
	"fmt"
	"strings"
)

// DidYouMean returns ` (did you mean "x"?)` for the candidate closest to s, or "" when none is
// close enough to be a plausible typo (an edit distance of 1, or 2 for names of 5 or more) or
// the closest is s itself (a name that is right but used where it may not be).
func DidYouMean(s string, candidates []string) string {
	limit := 1
	if len(s) >= 5 {
		limit = 2
	}
	best, d := Closest(s, candidates)
	if best == "" || best == s || d > limit {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// Closest returns the candidate nearest to s, case-insensitively, and its distance; "" when
// there are no candidates.
func Closest(s string, candidates []string) (string, int) {
	best, bestDist := "", 1<<30
	for _, c := range candidates {
		if d := Distance(strings.ToLower(s), c); d < bestDist {
			best, bestDist = c, d
		}
	}
	return best, bestDist
}

// Distance is the Damerau-Levenshtein distance (with adjacent transpositions) of a and b.
// Names are short: past 64 bytes either way it returns 64, no typo of a name.
func Distance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
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
