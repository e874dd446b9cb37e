// Package bind fills values into the two kinds of text where a value could otherwise rewrite
// a task's step: an sql step's query and the script of a shell's -c.
//
// In a query, each placeholder or output reference becomes a query parameter ($N, numbered
// after the step's own args) and its value is appended to args, so it is data to PostgreSQL
// whatever it holds. A reference inside a standard string literal ('...' or $tag$...$tag$)
// turns the whole literal into one parameter whose value is the literal's text with the
// reference filled ('%<q>%' binds "%" + q + "%"). A reference inside an E'...' (or other
// prefixed) literal, a quoted identifier or a comment is an error (a task file reports it when it is loaded):
// placeholders stand for values, never for names or SQL text.
//
// In a shell script (the argument after -c of sh, bash, dash, ash, ksh or zsh in a command
// argv), each value is quoted for where it stands: in single quotes outside quotes, escaped
// inside double quotes, closed and reopened inside single quotes, so the shell reads back
// exactly the value and never a command. A reference inside backquotes, $((...)), ${...}, a
// comment or a here-document is an error (a task file reports it when it is loaded). Other argv elements are
// passed to the program as they are, with no shell, and need no quoting.
package bind

import (
	"fmt"
	"path"
	"regexp"
	"strconv"
	"strings"
)

// SQL rewrites query so that every match of ref is a query parameter numbered from next,
// and returns the new query and the parameters' values in order. value gives a reference's
// value. An error names the first reference that stands where it cannot be bound.
func SQL(query string, ref *regexp.Regexp, value func(string) string, next int) (string, []string, error) {
	locs := ref.FindAllStringIndex(query, -1)
	if len(locs) == 0 {
		return query, nil, nil
	}
	starts := map[int]int{}
	for _, l := range locs {
		starts[l[0]] = l[1]
	}
	// within reports the first reference starting in [a, b).
	within := func(a, b int) (string, bool) {
		for _, l := range locs {
			if l[0] >= a && l[1] <= b {
				return query[l[0]:l[1]], true
			}
		}
		return "", false
	}
	var b strings.Builder
	var args []string
	param := func(v string) {
		args = append(args, v)
		b.WriteString("$" + strconv.Itoa(next+len(args)-1))
	}
	refuse := func(r, where string) error {
		return fmt.Errorf("%s stands inside %s, where it cannot be bound as a query parameter; use it as a whole value or inside a plain '...' literal", r, where)
	}
	for i := 0; i < len(query); {
		if end, ok := starts[i]; ok {
			param(value(query[i:end]))
			i = end
			continue
		}
		c := query[i]
		switch {
		case strings.HasPrefix(query[i:], "--"):
			end := strings.IndexByte(query[i:], '\n')
			if end < 0 {
				end = len(query) - i
			}
			if r, ok := within(i, i+end); ok {
				return "", nil, refuse(r, "a comment")
			}
			b.WriteString(query[i : i+end])
			i += end
		case strings.HasPrefix(query[i:], "/*"):
			end, depth := i+2, 1
			for end < len(query) && depth > 0 {
				switch {
				case strings.HasPrefix(query[end:], "/*"):
					depth, end = depth+1, end+2
				case strings.HasPrefix(query[end:], "*/"):
					depth, end = depth-1, end+2
				default:
					end++
				}
			}
			if r, ok := within(i, end); ok {
				return "", nil, refuse(r, "a comment")
			}
			b.WriteString(query[i:end])
			i = end
		case c == '"':
			end := closeQuote(query, i, '"', false)
			if r, ok := within(i, end); ok {
				return "", nil, refuse(r, "a quoted identifier")
			}
			b.WriteString(query[i:end])
			i = end
		case c == '\'':
			prefixed := i > 0 && (isLetter(query[i-1]) || query[i-1] == '&')
			end := closeQuote(query, i, '\'', prefixed)
			if r, ok := within(i, end); ok {
				if prefixed {
					return "", nil, refuse(r, "a prefixed string literal (E'...', U&'...', B'...', X'...')")
				}
				body := query[i+1 : end-1]
				if end-i < 2 || query[end-1] != '\'' {
					return "", nil, refuse(r, "an unterminated string literal")
				}
				param(ref.ReplaceAllStringFunc(strings.ReplaceAll(body, "''", "'"), value))
			} else {
				b.WriteString(query[i:end])
			}
			i = end
		case c == '$' && (i == 0 || !isIdent(query[i-1])):
			tag := dollarTag(query[i:])
			if tag == "" {
				b.WriteByte(c)
				i++
				continue
			}
			close := strings.Index(query[i+len(tag):], tag)
			end := len(query)
			if close >= 0 {
				end = i + len(tag) + close + len(tag)
			}
			if r, ok := within(i, end); ok {
				if close < 0 {
					return "", nil, refuse(r, "an unterminated dollar-quoted literal")
				}
				param(ref.ReplaceAllStringFunc(query[i+len(tag):end-len(tag)], value))
			} else {
				b.WriteString(query[i:end])
			}
			i = end
		default:
			b.WriteByte(c)
			i++
		}
	}
	return b.String(), args, nil
}

// closeQuote returns the index just past the quote q that closes the one at s[i]; a doubled q
// is part of the text, and with backslash a backslash escapes the next byte.
func closeQuote(s string, i int, q byte, backslash bool) int {
	for j := i + 1; j < len(s); j++ {
		switch {
		case backslash && s[j] == '\\':
			j++
		case s[j] == q && j+1 < len(s) && s[j+1] == q:
			j++
		case s[j] == q:
			return j + 1
		}
	}
	return len(s)
}

// dollarTag returns the opening $tag$ (or $$) at the start of s, or "".
func dollarTag(s string) string {
	if len(s) < 2 || s[0] != '$' {
		return ""
	}
	if s[1] == '$' {
		return "$$"
	}
	if !isLetter(s[1]) && s[1] != '_' {
		return ""
	}
	for j := 2; j < len(s); j++ {
		switch {
		case s[j] == '$':
			return s[:j+1]
		case !isIdent(s[j]):
			return ""
		}
	}
	return ""
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }

func isIdent(c byte) bool { return isLetter(c) || c >= '0' && c <= '9' || c == '_' || c == '$' }

// shells are the programs whose -c argument is a script.
var shells = map[string]bool{"sh": true, "bash": true, "dash": true, "ash": true, "ksh": true, "zsh": true}

// ScriptIndex returns the index of the script in argv when argv runs a shell with -c (sh -c,
// bash -ec, /bin/sh -xc ...), or -1.
func ScriptIndex(argv []string) int {
	if len(argv) < 3 || !shells[path.Base(argv[0])] {
		return -1
	}
	c := false
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		if !strings.HasPrefix(a, "-") || a == "-" || a == "--" {
			if c {
				return i
			}
			return -1
		}
		if !strings.HasPrefix(a, "--") && strings.ContainsRune(a[1:], 'c') {
			c = true
		}
	}
	return -1
}

// Shell returns script with every match of ref replaced by its value, quoted for where it
// stands so that the shell reads back exactly the value. An error names the first reference
// that stands where no quoting is sure to hold.
func Shell(script string, ref *regexp.Regexp, value func(string) string) (string, error) {
	locs := ref.FindAllStringIndex(script, -1)
	if len(locs) == 0 {
		return script, nil
	}
	starts := map[int]int{}
	for _, l := range locs {
		starts[l[0]] = l[1]
	}
	const (
		unquoted = iota
		single
		double
		command // $( ... ): a fresh unquoted context until its )
		refused // backquotes, $((, ${, where a value cannot be quoted surely
	)
	type frame struct {
		mode  int
		depth int    // open ( inside a command frame
		what  string // for refused frames
		end   byte   // closing byte of a refused frame
	}
	stack := []frame{{mode: unquoted}}
	var b strings.Builder
	var heredocs []string // delimiters of here-documents whose bodies start at the next newline
	for i := 0; i < len(script); {
		top := &stack[len(stack)-1]
		if end, ok := starts[i]; ok {
			v := value(script[i:end])
			switch top.mode {
			case unquoted, command:
				b.WriteString("'" + strings.ReplaceAll(v, "'", `'\''`) + "'")
			case single:
				b.WriteString(strings.ReplaceAll(v, "'", `'\''`))
			case double:
				r := strings.NewReplacer(`\`, `\\`, `"`, `\"`, "$", `\$`, "`", "\\`")
				b.WriteString(r.Replace(v))
			default:
				return "", fmt.Errorf("%s stands inside %s of the shell script, where its value cannot be quoted surely; assign it to a variable first (v=%s) and use \"$v\"", script[i:end], top.what, script[i:end])
			}
			i = end
			continue
		}
		c := script[i]
		b.WriteByte(c)
		i++
		switch top.mode {
		case single:
			if c == '\'' {
				stack = stack[:len(stack)-1]
			}
			continue
		case refused:
			switch {
			case c == '\\' && i < len(script):
				b.WriteByte(script[i])
				i++
			case c == top.end:
				stack = stack[:len(stack)-1]
			}
			continue
		}
		switch {
		case c == '\\' && i < len(script):
			b.WriteByte(script[i])
			i++
		case c == '`':
			stack = append(stack, frame{mode: refused, what: "backquotes", end: '`'})
		case c == '$' && strings.HasPrefix(script[i:], "(("):
			stack = append(stack, frame{mode: refused, what: "$((...))", end: ')'})
		case c == '$' && strings.HasPrefix(script[i:], "{"):
			stack = append(stack, frame{mode: refused, what: "${...}", end: '}'})
		case c == '$' && strings.HasPrefix(script[i:], "("):
			b.WriteByte('(')
			i++
			stack = append(stack, frame{mode: command})
		case top.mode == double:
			if c == '"' {
				stack = stack[:len(stack)-1]
			}
		case c == '"':
			stack = append(stack, frame{mode: double})
		case c == '\'':
			stack = append(stack, frame{mode: single})
		case c == '(' && top.mode == command:
			top.depth++
		case c == ')' && top.mode == command:
			if top.depth == 0 {
				stack = stack[:len(stack)-1]
			} else {
				top.depth--
			}
		case c == '#' && (i == 1 || strings.ContainsRune(" \t\n;&|()", rune(script[i-2]))):
			end := strings.IndexByte(script[i:], '\n')
			if end < 0 {
				end = len(script) - i
			}
			for _, l := range locs {
				if l[0] >= i && l[0] < i+end {
					return "", fmt.Errorf("%s stands inside a comment of the shell script", script[l[0]:l[1]])
				}
			}
			b.WriteString(script[i : i+end])
			i += end
		case c == '<' && strings.HasPrefix(script[i:], "<") && !strings.HasPrefix(script[i:], "<<"):
			b.WriteByte('<')
			i++
			j := i
			if j < len(script) && script[j] == '-' {
				j++
			}
			for j < len(script) && (script[j] == ' ' || script[j] == '\t') {
				j++
			}
			k := j
			for k < len(script) && !strings.ContainsRune(" \t\n;&|<>()", rune(script[k])) {
				k++
			}
			if d := strings.Trim(script[j:k], `'"\`); d != "" {
				heredocs = append(heredocs, d)
			}
		case c == '\n' && len(heredocs) > 0:
			for _, d := range heredocs {
				end := len(script)
				for j := i; j < len(script); {
					nl := strings.IndexByte(script[j:], '\n')
					line := script[j:]
					if nl >= 0 {
						line = script[j : j+nl]
					}
					if strings.TrimLeft(line, "\t") == d {
						end = j + len(line)
						break
					}
					if nl < 0 {
						break
					}
					j += nl + 1
				}
				for _, l := range locs {
					if l[0] >= i && l[0] < end {
						return "", fmt.Errorf("%s stands inside a here-document of the shell script; write the value with write_file instead", script[l[0]:l[1]])
					}
				}
				b.WriteString(script[i:end])
				i = end
			}
			heredocs = nil
		}
	}
	return b.String(), nil
}
