package bind

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzShell: whatever the value, a script that prints it prints exactly it (a $(...) drops
// trailing newlines, as the shell does), wherever it stands; the shell runs nothing else.
func FuzzShell(f *testing.F) {
	for _, v := range hostile {
		f.Add(v, uint8(0))
	}
	f.Fuzz(func(t *testing.T, v string, at uint8) {
		if strings.ContainsRune(v, 0) || !utf8.ValidString(v) {
			return // an argv cannot hold a NUL; task files are UTF-8
		}
		readsBack(t, printScripts[int(at)%len(printScripts)], v)
	})
}

// FuzzSQL: whatever the query and the value, SQL either refuses the query or returns one in
// which the value does not stand (it is in the arguments, each holding it).
func FuzzSQL(f *testing.F) {
	for _, q := range []string{"SELECT 1 WHERE x = <v>", "SELECT '%<v>%', $$a <v>$$", `SELECT "<v>"`, "SELECT 1 -- <v>"} {
		f.Add(q, "'); DROP TABLE t; --")
	}
	f.Fuzz(func(t *testing.T, query, v string) {
		got, args, err := SQL(query, placeholder, func(string) string { return v }, 1)
		if err != nil {
			return
		}
		if n := len(placeholder.FindAllString(query, -1)); n > 0 && len(args) == 0 {
			t.Errorf("SQL(%q) bound none of its %d references", query, n)
		}
		for _, a := range args {
			if !strings.Contains(a, v) {
				t.Errorf("SQL(%q) with %q: argument %q does not hold the value", query, v, a)
			}
		}
		if len(v) >= 2 && !strings.ContainsAny(v, "$0123456789") && !strings.Contains(query, v) && strings.Contains(got, v) {
			t.Errorf("SQL(%q) with %q = %q: the value stands in the query", query, v, got)
		}
	})
}
