package task

import (
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// FuzzFill checks substitution as the integrity of a grade needs it: a seed's value and a
// step's output are put in once and never expanded again, whatever they hold (a value that
// looks like a placeholder or an output reference stays as it is), an sql query's values are
// bound as parameters and never enter its text, and nothing panics.
func FuzzFill(f *testing.F) {
	f.Add("plain", "answer")
	f.Add("<other>", "${steps.a.outputs.b}")
	f.Add("'); DROP TABLE notes.notes; --", "$(id) `id` ${HOME}")
	f.Add("\x00\n\t<", "}")
	f.Fuzz(func(t *testing.T, seed, output string) {
		var n yaml.Node
		src := "query: \"SELECT <q> WHERE x = '${steps.agent.outputs.response}'\"\nargv: [echo, \"<q>\", \"${steps.agent.outputs.response}\"]\n"
		if err := yaml.Unmarshal([]byte(src), &n); err != nil {
			t.Fatal(err)
		}
		fields := n.Content[0]
		filled, err := fillPlaceholders(TypeSQL, fields, map[string]string{"q": seed, "other": "EXPANDED"})
		if err != nil {
			t.Fatalf("fillPlaceholders: %v", err)
		}
		out, err := fillOutputs(TypeSQL, filled, func(step, name string) (string, error) {
			if step != "agent" || name != "response" {
				return "EXPANDED", nil
			}
			return output, nil
		})
		if err != nil {
			t.Fatalf("fillOutputs: %v", err)
		}
		var got struct {
			Query string   `yaml:"query"`
			Argv  []string `yaml:"argv"`
			Args  []string `yaml:"args"`
		}
		if err := out.Decode(&got); err != nil {
			t.Fatalf("decode: %v", err)
		}
		// The seed goes in first, so an output reference inside it is filled by the second
		// pass as the task author's own would be; the output, filled last, is never expanded.
		wantSeed := strings.ReplaceAll(seed, "${steps.agent.outputs.response}", output)
		if strings.Contains(seed, "${steps.") {
			return // a seed that names outputs is the task's own data, filled by design
		}
		if len(got.Argv) != 3 || got.Argv[1] != wantSeed || got.Argv[2] != output {
			t.Fatalf("argv = %q, want [echo %q %q]", got.Argv, wantSeed, output)
		}
		// The query's values are bound as parameters: its text never holds them.
		if want := "SELECT $1 WHERE x = $2"; got.Query != want {
			t.Fatalf("query = %q, want %q", got.Query, want)
		}
		if len(got.Args) != 2 || got.Args[0] != wantSeed || got.Args[1] != output {
			t.Fatalf("args = %q, want [%q %q]", got.Args, wantSeed, output)
		}
	})
}
