package bind

import (
	"os/exec"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// placeholder is a task file's <name> placeholder, as package task matches it.
var placeholder = regexp.MustCompile(`<([A-Za-z_][A-Za-z0-9_]*)>`)

// hostile are values an agent could answer with to rewrite a query or a command.
var hostile = []string{
	"plain", "it's", "'); DROP TABLE notes.notes; --", "a;b", "$1", "$$x$$", `back\slash`,
	"naïve ✓ 日本", "\"double\"", "$(id)", "`id`", "${HOME}", "a\nrm -rf /", "", "*", "EOF",
}

func TestBindSQLBindsEveryValue(t *testing.T) {
	cases := []struct {
		query, want string
		args        func(v string) []string
	}{
		{"SELECT 1 WHERE x = <v>", "SELECT 1 WHERE x = $1", func(v string) []string { return []string{v} }},
		{"SELECT 1 WHERE x = '<v>'", "SELECT 1 WHERE x = $1", func(v string) []string { return []string{v} }},
		{"SELECT 1 WHERE x LIKE '%<v>%' AND y = 'it''s'", "SELECT 1 WHERE x LIKE $1 AND y = 'it''s'", func(v string) []string { return []string{"%" + v + "%"} }},
		{"SELECT 1 WHERE x = $$a <v>$$ AND z = $2", "SELECT 1 WHERE x = $1 AND z = $2", func(v string) []string { return []string{"a " + v} }},
		{"SELECT '<v>''s', <v>", "SELECT $1, $2", func(v string) []string { return []string{v + "'s", v} }},
	}
	for _, c := range cases {
		for _, v := range hostile {
			got, args, err := SQL(c.query, placeholder, func(m string) string {
				if m == "<v>" {
					return v
				}
				return m
			}, 1)
			if err != nil {
				t.Fatalf("SQL(%q): %v", c.query, err)
			}
			if got != c.want || !slices.Equal(args, c.args(v)) {
				t.Errorf("SQL(%q) with %q = %q %q, want %q %q", c.query, v, got, args, c.want, c.args(v))
			}
		}
	}
}

func TestBindSQLRefusesNamesAndComments(t *testing.T) {
	for q, where := range map[string]string{
		`SELECT "<v>" FROM t`:         "a quoted identifier",
		"SELECT E'<v>'":               "a prefixed string literal",
		"SELECT 1 -- <v>":             "a comment",
		"SELECT 1 /* a /* <v> */ */":  "a comment",
		"SELECT 'unterminated <v>":    "an unterminated string literal",
		"SELECT $q$ <v> never closed": "an unterminated dollar-quoted literal",
	} {
		_, _, err := SQL(q, placeholder, func(string) string { return "x" }, 1)
		if err == nil || !strings.Contains(err.Error(), where) || !strings.Contains(err.Error(), "<v>") {
			t.Errorf("SQL(%q) = %v, want an error naming <v> inside %s", q, err, where)
		}
	}
}

// TestQuoteShellReadsBackTheValue runs each filled script through /bin/sh: the shell prints
// exactly the value, wherever it stood, and runs nothing else.
func TestQuoteShellReadsBackTheValue(t *testing.T) {
	for _, s := range append(printScripts, `printf '%s' "pre-<v>-post" | sed 's/^pre-//; s/-post$//'`) {
		for _, v := range hostile {
			readsBack(t, s, v)
		}
	}
}

// printScripts print the value of <v>, wherever it stands.
var printScripts = []string{
	"printf '%s' <v>",
	`printf '%s' "<v>"`,
	`printf '%s' '<v>'`,
	`printf '%s' "$(printf '%s' <v>)"`,
	`x=<v>; printf '%s' "$x"`,
}

// readsBack fills script with v, runs it with /bin/sh and fails t unless it printed exactly v
// (a $(...) drops trailing newlines, as the shell does).
func readsBack(t *testing.T, script, v string) {
	t.Helper()
	got, err := Shell(script, placeholder, func(string) string { return v })
	if err != nil {
		t.Fatalf("Shell(%q): %v", script, err)
	}
	out, err := exec.Command("/bin/sh", "-c", got).Output()
	if err != nil {
		t.Fatalf("sh -c %q: %v", got, err)
	}
	if string(out) != v && !(strings.Contains(script, "$(") && string(out) == strings.TrimRight(v, "\n")) {
		t.Errorf("script %q with %q printed %q", script, v, out)
	}
}

func TestQuoteShellRefusesWhatCannotBeQuoted(t *testing.T) {
	for s, where := range map[string]string{
		"echo `echo <v>`":           "backquotes",
		"echo $((1 + <v>))":         "$((",
		"echo ${X:-<v>}":            "${",
		"echo hi # <v>":             "comment",
		"cat <<EOF\n<v>\nEOF\necho": "here-document",
		"cat <<'EOF'\n<v>\nEOF":     "here-document",
	} {
		_, err := Shell(s, placeholder, func(string) string { return "x" })
		if err == nil || !strings.Contains(err.Error(), where) {
			t.Errorf("Shell(%q) = %v, want an error naming %s", s, err, where)
		}
	}
}

func TestShellScriptFindsTheScript(t *testing.T) {
	for argv, want := range map[string]int{
		"sh -c S":         2,
		"/bin/bash -ec S": 2,
		"sh -x -c S a b":  3,
		"sh S":            -1,
		"echo -c S":       -1,
		"python -c S":     -1,
	} {
		if got := ScriptIndex(strings.Fields(argv)); got != want {
			t.Errorf("ScriptIndex(%s) = %d, want %d", argv, got, want)
		}
	}
}
