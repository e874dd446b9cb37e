package yamlfile_test

import (
	"errors"
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
