// Package shellquote writes argument lists as /bin/sh command lines, for providers that can run
// a command in a VM only as a shell script (E2B's process API, Modal's exec of docker).
package shellquote

import "strings"

// Join puts each of args in single quotes (closing, escaping and reopening them around a quote
// inside) and joins them with spaces, so that /bin/sh reads back exactly args, whatever they
// hold.
func Join(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
