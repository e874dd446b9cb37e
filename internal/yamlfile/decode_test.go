package yamlfile_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/yamlfile"
)

func TestParse(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"empty", "", "f.yaml: empty thing"},
		{"comment only", "# nothing\n", "f.yaml: empty thing"},
		{"two documents", "a: 1\n---\nb: 2\n", "f.yaml:2: want one YAML document, found another"},
		{"syntax", "a: [1\n", "f.yaml:1: did not find expected ',' or ']'"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := yamlfile.Parse("f.yaml", "thing", []byte(c.in))
			if err == nil || !errors.Is(err, agentenv.ErrInvalid) || !strings.HasPrefix(err.Error(), c.want) {
				t.Errorf("Parse = %v, want ErrInvalid starting %q", err, c.want)
			}
		})
	}
}

// bomb is n levels of anchors, each a list of nine aliases of the one before: 9^n nodes from a
// few hundred bytes.
func bomb(n int) string {
	var b strings.Builder
	b.WriteString("a0: &a0 [x, x, x, x, x, x, x, x, x]\n")
	for i := 1; i <= n; i++ {
		fmt.Fprintf(&b, "a%d: &a%d [", i, i)
		for j := range 9 {
			if j > 0 {
				b.WriteString(", ")
			}
			fmt.Fprintf(&b, "*a%d", i-1)
		}
		b.WriteString("]\n")
	}
	return b.String()
}

// TestParseBounds: an alias bomb, deep nesting and an oversized file are refused by Parse,
// before any decoder walks them, naming the bound.
func TestParseBounds(t *testing.T) {
	for _, c := range []struct{ name, in, want string }{
		{"alias bomb", bomb(10), "document too large"},
		{"deep nesting", strings.Repeat("[", 100) + strings.Repeat("]", 100), "nested more than 64 levels deep"},
		{"oversized", "a: \"" + strings.Repeat("x", yamlfile.MaxSize) + "\"\n", "more than the 8388608 a file may have"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := yamlfile.Parse("f.yaml", "thing", []byte(c.in))
			if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Errorf("Parse = %v, want ErrInvalid naming %q", err, c.want)
			}
		})
	}
	if _, err := yamlfile.Parse("f.yaml", "thing", []byte(bomb(3))); err != nil {
		t.Errorf("Parse of 9^3 nodes = %v, want it accepted", err)
	}
}

func TestDecoderReportsEveryProblemWithItsLine(t *testing.T) {
	root, err := yamlfile.Parse("f.yaml", "thing", []byte("name: [x]\nnmae: y\nport: big\nwait: 5\nname: z\n"))
	if err != nil {
		t.Fatal(err)
	}
	d := yamlfile.NewDecoder("f.yaml")
	d.Fields(root, "", []string{"name", "port", "wait"}, func(key string, v *yaml.Node, p string) {
		switch key {
		case "name":
			d.Str(v, p)
		case "port":
			d.Integer(v, p)
		case "wait":
			d.Duration(v, p)
		}
	})
	want := []string{
		"f.yaml:1: name: want a string, got a list",
		`f.yaml:2: nmae: unknown field (did you mean "name"?)`,
		"f.yaml:3: port: want an integer, got \"big\"",
		`f.yaml:4: wait: want a duration such as "30s" or "2m", got an integer`,
		"f.yaml:5: name: duplicate field (first at line 1)",
	}
	got := strings.Split(errors.Join(d.Errs...).Error(), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("errors:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if !d.Failed["name"] || d.Lines["wait"] != 4 {
		t.Errorf("Failed %v, Lines %v; want name failed and wait at line 4", d.Failed, d.Lines)
	}
}
