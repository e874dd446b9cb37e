package harbor

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
	"github.com/pelletier/go-toml/v2/unstable"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/suggest"
)

// Error is one problem in a task folder's file, with where it is. It wraps
// agentenv.ErrInvalid.
type Error struct {
	File string // the file's path
	Line int    // 1-based, or 0 when the problem has no line (a missing file)
	Col  int    // 1-based, for a TOML syntax error; else 0
	Key  string // the key: "environment.cpus", "steps[1].agent.timeout_sec"; empty for the file
	Msg  string // what is wrong, lower case
}

// Error formats e as "file:line[:col]: key K: msg".
func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Col > 0 {
			fmt.Fprintf(&b, ":%d", e.Col)
		}
	}
	b.WriteString(": ")
	if e.Key != "" {
		fmt.Fprintf(&b, "key %s: ", e.Key)
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Unwrap returns agentenv.ErrInvalid.
func (e *Error) Unwrap() error { return agentenv.ErrInvalid }

// parseTOML decodes data, the file named file, into a generic document and the line of each
// key path in it ("environment.cpus", "steps[0].agent.timeout_sec", "environment.mcp_servers[1].url").
func parseTOML(file string, data []byte) (map[string]any, map[string]int, error) {
	var doc map[string]any
	if err := toml.Unmarshal(data, &doc); err != nil {
		var de *toml.DecodeError
		if errors.As(err, &de) {
			line, col := de.Position()
			msg := strings.TrimPrefix(de.Error(), "toml: ")
			return nil, nil, &Error{File: file, Line: line, Col: col, Key: strings.Join(de.Key(), "."), Msg: msg}
		}
		return nil, nil, &Error{File: file, Msg: err.Error()}
	}
	return doc, keyLines(data), nil
}

// keyLines maps each key path of a valid TOML document to its line. Array tables take an
// index per element, as do inline tables inside arrays.
func keyLines(data []byte) map[string]int {
	lines := map[string]int{}
	arrays := map[string]int{} // resolved path of an array table -> elements so far
	var p unstable.Parser
	p.Reset(data)
	line := func(n *unstable.Node) int {
		if n == nil || n.Raw.Length == 0 && n.Raw.Offset == 0 && len(n.Data) == 0 {
			return 0
		}
		return p.Shape(n.Raw).Start.Line
	}
	// resolve turns the dotted key parts of a header into a path, indexing every prefix that
	// names an array table with its latest element.
	resolve := func(base string, parts []string) string {
		path := base
		for _, k := range parts {
			if path == "" {
				path = quoteKey(k)
			} else {
				path += "." + quoteKey(k)
			}
			if n, ok := arrays[path]; ok {
				path = fmt.Sprintf("%s[%d]", path, n-1)
			}
		}
		return path
	}
	var walk func(path string, v *unstable.Node)
	walk = func(path string, v *unstable.Node) {
		switch v.Kind {
		case unstable.InlineTable:
			for it := v.Children(); it.Next(); {
				kv := it.Node()
				parts, first := keyParts(kv)
				k := resolve(path, parts)
				lines[k] = line(first)
				walk(k, kv.Value())
			}
		case unstable.Array:
			i := 0
			for it := v.Children(); it.Next(); i++ {
				e := it.Node()
				if e.Kind == unstable.InlineTable || e.Kind == unstable.Array {
					k := fmt.Sprintf("%s[%d]", path, i)
					lines[k] = line(e)
					walk(k, e)
				}
			}
		}
	}
	cur := ""
	for p.NextExpression() {
		e := p.Expression()
		switch e.Kind {
		case unstable.Table:
			parts, first := keyParts(e)
			cur = resolve("", parts)
			lines[cur] = line(first)
		case unstable.ArrayTable:
			parts, first := keyParts(e)
			base := resolve("", parts[:len(parts)-1])
			raw := quoteKey(parts[len(parts)-1])
			if base != "" {
				raw = base + "." + raw
			}
			arrays[raw]++
			cur = fmt.Sprintf("%s[%d]", raw, arrays[raw]-1)
			lines[raw] = line(first)
			lines[cur] = line(first)
		case unstable.KeyValue:
			parts, first := keyParts(e)
			k := resolve(cur, parts)
			lines[k] = line(first)
			walk(k, e.Value())
		}
	}
	return lines
}

// keyParts returns the parts of a node's dotted key and the first part's node.
func keyParts(n *unstable.Node) ([]string, *unstable.Node) {
	var parts []string
	var first *unstable.Node
	for it := n.Key(); it.Next(); {
		if first == nil {
			first = it.Node()
		}
		parts = append(parts, string(it.Node().Data))
	}
	return parts, first
}

// quoteKey writes a key part as it stands in a path: bare when it is a bare TOML key.
func quoteKey(k string) string {
	for _, c := range k {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return strconv.Quote(k)
		}
	}
	if k == "" {
		return `""`
	}
	return k
}

// reader turns a generic TOML document into typed values, collecting every error and warning
// with the line of its key.
type reader struct {
	file  string // the path errors name
	short string // the name warnings name: "task.toml"
	lines map[string]int
	errs  []error
	warns []warning
}

// line returns the line of path, or of its nearest ancestor that has one.
func (r *reader) line(path string) int {
	for path != "" {
		if l, ok := r.lines[path]; ok && l > 0 {
			return l
		}
		i := strings.LastIndexAny(path, ".[")
		if i < 0 {
			break
		}
		path = path[:i]
	}
	return 0
}

func (r *reader) fail(path, format string, args ...any) {
	r.errs = append(r.errs, &Error{File: r.file, Line: r.line(path), Key: path, Msg: fmt.Sprintf(format, args...)})
}

// warning is one warning and the line it is about, for sorting.
type warning struct {
	line int
	text string
}

func (r *reader) warn(path, format string, args ...any) {
	l := r.line(path)
	r.warns = append(r.warns, warning{l, fmt.Sprintf("%s:%d: key %s: %s", r.short, l, path, fmt.Sprintf(format, args...))})
}

// warnings returns the warnings in the order of their lines.
func (r *reader) warnings() []string {
	if len(r.warns) == 0 {
		return nil
	}
	sort.SliceStable(r.warns, func(i, j int) bool { return r.warns[i].line < r.warns[j].line })
	out := make([]string, len(r.warns))
	for i, w := range r.warns {
		out[i] = w.text
	}
	return out
}

// err joins every error, in the order of their lines.
func (r *reader) err() error {
	if len(r.errs) == 0 {
		return nil
	}
	sort.SliceStable(r.errs, func(i, j int) bool { return r.errs[i].(*Error).Line < r.errs[j].(*Error).Line })
	return errors.Join(r.errs...)
}

// table is one TOML table being read: the keys asked for are its known keys; what is left
// over is unknown.
type table struct {
	r     *reader
	path  string
	m     map[string]any
	asked []string
}

func (r *reader) table(path string, m map[string]any) *table {
	return &table{r: r, path: path, m: m}
}

func (t *table) key(k string) string {
	if t.path == "" {
		return quoteKey(k)
	}
	return t.path + "." + quoteKey(k)
}

// get returns the value of k, marking k known.
func (t *table) get(k string) (any, bool) {
	if !slices.Contains(t.asked, k) {
		t.asked = append(t.asked, k)
	}
	if t.m == nil {
		return nil, false
	}
	v, ok := t.m[k]
	return v, ok
}

// has reports whether k is set, marking it known.
func (t *table) has(k string) bool {
	_, ok := t.get(k)
	return ok
}

// unknown warns of every key of t not asked for: Harbor ignores them.
func (t *table) unknown() {
	var keys []string
	for k := range t.m {
		if !slices.Contains(t.asked, k) {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		t.r.warn(t.key(k), "unknown key, ignored%s", suggest.DidYouMean(k, t.asked))
	}
}

// describe names a TOML value's type for "want X, got Y" messages.
func describe(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("string %q", x)
	case bool:
		return fmt.Sprintf("boolean %v", x)
	case int64:
		return fmt.Sprintf("integer %d", x)
	case float64:
		return fmt.Sprintf("float %v", x)
	case map[string]any:
		return "a table"
	case []any:
		return "an array"
	default:
		return fmt.Sprintf("%T", v)
	}
}

func (t *table) str(k string) (string, bool) {
	v, ok := t.get(k)
	if !ok {
		return "", false
	}
	s, isStr := v.(string)
	if !isStr {
		t.r.fail(t.key(k), "want a string, got %s", describe(v))
		return "", false
	}
	return s, true
}

// user reads a user name or uid, as Harbor's `str | int`.
func (t *table) user(k string) string {
	v, ok := t.get(k)
	if !ok {
		return ""
	}
	switch x := v.(type) {
	case string:
		return x
	case int64:
		if x < 0 {
			t.r.fail(t.key(k), "want a user name or a uid of 0 or more, got %d", x)
			return ""
		}
		return strconv.FormatInt(x, 10)
	}
	t.r.fail(t.key(k), "want a user name or uid, got %s", describe(v))
	return ""
}

func (t *table) boolean(k string) (bool, bool) {
	v, ok := t.get(k)
	if !ok {
		return false, false
	}
	b, isBool := v.(bool)
	if !isBool {
		t.r.fail(t.key(k), "want true or false, got %s", describe(v))
		return false, false
	}
	return b, true
}

func (t *table) number(k string) (float64, bool) {
	v, ok := t.get(k)
	if !ok {
		return 0, false
	}
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		if math.IsNaN(x) || math.IsInf(x, 0) {
			t.r.fail(t.key(k), "want a finite number, got %v", x)
			return 0, false
		}
		return x, true
	}
	t.r.fail(t.key(k), "want a number, got %s", describe(v))
	return 0, false
}

// integer reads an integer; a float with no fractional part is accepted, as pydantic does.
func (t *table) integer(k string) (int, bool) {
	v, ok := t.get(k)
	if !ok {
		return 0, false
	}
	switch x := v.(type) {
	case int64:
		if x > math.MaxInt32 || x < math.MinInt32 {
			t.r.fail(t.key(k), "integer %d out of range", x)
			return 0, false
		}
		return int(x), true
	case float64:
		if x == math.Trunc(x) && math.Abs(x) <= math.MaxInt32 {
			return int(x), true
		}
	}
	t.r.fail(t.key(k), "want an integer, got %s", describe(v))
	return 0, false
}

// count reads an integer that must not be negative.
func (t *table) count(k string) (int, bool) {
	n, ok := t.integer(k)
	if ok && n < 0 {
		t.r.fail(t.key(k), "want 0 or more, got %d", n)
		return 0, false
	}
	return n, ok
}

// seconds reads a `*_sec` number of seconds as a duration; it must not be negative.
func (t *table) seconds(k string) (time.Duration, bool) {
	f, ok := t.number(k)
	if !ok {
		return 0, false
	}
	if f < 0 || f > 1e9 {
		t.r.fail(t.key(k), "want a number of seconds from 0 to 1e9, got %v", f)
		return 0, false
	}
	return time.Duration(f * float64(time.Second)), true
}

func (t *table) strings(k string) ([]string, bool) {
	v, ok := t.get(k)
	if !ok {
		return nil, false
	}
	list, isList := v.([]any)
	if !isList {
		t.r.fail(t.key(k), "want an array of strings, got %s", describe(v))
		return nil, false
	}
	out := make([]string, 0, len(list))
	for i, e := range list {
		s, isStr := e.(string)
		if !isStr {
			t.r.fail(fmt.Sprintf("%s[%d]", t.key(k), i), "want a string, got %s", describe(e))
			return nil, false
		}
		out = append(out, s)
	}
	return out, true
}

func (t *table) strMap(k string) map[string]string {
	v, ok := t.get(k)
	if !ok {
		return nil
	}
	m, isMap := v.(map[string]any)
	if !isMap {
		t.r.fail(t.key(k), "want a table of strings, got %s", describe(v))
		return nil
	}
	out := make(map[string]string, len(m))
	for name, e := range m {
		s, isStr := e.(string)
		if !isStr {
			t.r.fail(t.key(k)+"."+quoteKey(name), "want a string, got %s", describe(e))
			continue
		}
		out[name] = s
	}
	return out
}

// sub returns the table k, or an empty one when k is absent or not a table (reported).
func (t *table) sub(k string) *table {
	v, ok := t.get(k)
	if !ok {
		return t.r.table(t.key(k), nil)
	}
	m, isMap := v.(map[string]any)
	if !isMap {
		t.r.fail(t.key(k), "want a table, got %s", describe(v))
		return t.r.table(t.key(k), nil)
	}
	return t.r.table(t.key(k), m)
}

// tables returns the array of tables k, each element as a table.
func (t *table) tables(k string) []*table {
	v, ok := t.get(k)
	if !ok {
		return nil
	}
	list, isList := v.([]any)
	if !isList {
		t.r.fail(t.key(k), "want an array of tables, got %s", describe(v))
		return nil
	}
	var out []*table
	for i, e := range list {
		p := fmt.Sprintf("%s[%d]", t.key(k), i)
		m, isMap := e.(map[string]any)
		if !isMap {
			t.r.fail(p, "want a table, got %s", describe(e))
			continue
		}
		out = append(out, t.r.table(p, m))
	}
	return out
}
