package task_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

func TestParseErrors(t *testing.T) {
	const sb = "- {id: sb, type: deploy_sandbox, provider: fake}\n"
	tests := []struct {
		name string
		src  string
		want []string // each must appear in the error
	}{
		{"cycle", `steps:
- {id: a, type: exec, sandbox: a, command: [x], depends_on: [c]}
- {id: b, type: exec, sandbox: a, command: [x], depends_on: [a]}
- {id: c, type: exec, sandbox: a, command: [x], depends_on: [b]}`,
			[]string{"depends_on: dependency cycle: a -> c -> b -> a"}},
		{"self cycle", "steps:\n- {id: a, type: aggregate, verifiers: [a], depends_on: [a]}",
			[]string{"dependency cycle: a -> a"}},
		{"forward depends_on", "steps:\n" + sb + "- {id: w, type: write_file, sandbox: sb, path: p, depends_on: [v]}\n- {id: v, type: file_contains, sandbox: sb, path: p, contains: x, depends_on: [sb]}",
			[]string{`t.yaml:3: steps[1].depends_on[0]: step "v" comes later`}},
		{"unknown depends_on", "steps:\n" + sb + "- {id: w, type: write_file, sandbox: sb, path: p, depends_on: [sbx]}",
			[]string{`steps[1].depends_on[0]: unknown step "sbx" (did you mean "sb"?)`}},
		{"unknown step type", "steps:\n- {id: a, type: deploy_sandbx}",
			[]string{`t.yaml:2: steps[0].type: unknown step type "deploy_sandbx" (did you mean "deploy_sandbox"?)`}},
		{"unknown field", "steps:\n" + sb + "- id: w\n  type: write_file\n  sandbox: sb\n  pth: p\n",
			[]string{`t.yaml:6: steps[1].pth: unknown field (did you mean "path"?)`, `steps[1].path: missing field`}},
		{"unknown nested field", "steps:\n- id: e\n  type: deploy_env\n  file: env.yaml\n- id: r\n  type: tool_result\n  env: e\n  tool: x\n  expect: {contians: y}\n",
			[]string{`t.yaml:9: steps[1].expect.contians: unknown field (did you mean "contains"?)`}},
		{"unknown top-level field", "name: x\nstesp: []\n", []string{`t.yaml:2: stesp: unknown field (did you mean "steps"?)`}},
		{"duplicate id", "steps:\n" + sb + sb, []string{`duplicate step id "sb" (first at line 2)`}},
		{"no steps", "steps: []", []string{"steps: empty: a task needs at least one step"}},
		{"env of the host", "steps:\n- {id: sb, type: deploy_sandbox, env: {A: \"env:HOME\"}}", []string{`env.A: "env:HOME" would reach the sandbox as that text`}},
		{"missing id and type", "steps:\n- {provider: x}", []string{"steps[0].id: missing field", "steps[0].type: missing field"}},
		{"ref to a non-dependency", "steps:\n" + sb + "- {id: w, type: write_file, sandbox: sb, path: p, depends_on: []}",
			[]string{`steps[1].sandbox: step "sb" is not a dependency of "w"`}},
		{"ref of the wrong type", "steps:\n" + sb + "- {id: w, type: write_file, sandbox: sb, path: p}\n- {id: x, type: exec, sandbox: w, command: [a]}",
			[]string{`steps[2].sandbox: step "w" is a write_file; want deploy_sandbox`}},
		{"unknown output", "steps:\n" + sb + "- {id: w, type: write_file, sandbox: sb, path: p, content: '${steps.sb.outputs.sandboxid}'}",
			[]string{`${steps.sb.outputs.sandboxid}: a deploy_sandbox step has no output "sandboxid"`}},
		{"output of a non-dependency", "steps:\n" + sb + "- {id: w, type: write_file, sandbox: sb, path: p}\n- {id: x, type: write_file, sandbox: sb, path: q, depends_on: [sb], content: '${steps.w.outputs.bytes}'}",
			[]string{`step "w" is not a dependency of "x"`}},
		{"bad output reference", "steps:\n" + sb + "- {id: w, type: write_file, sandbox: sb, path: p, content: '${steps.sb.sandbox_id}'}",
			[]string{`bad output reference "${steps.sb.sandbox_id}"`}},
		{"misspelt output reference", "steps:\n" + sb + "- {id: w, type: write_file, sandbox: sb, path: p, content: '${step.sb.outputs.record} ${user.name}'}",
			[]string{`bad output reference "${step.sb.outputs.record}"`}},
		{"bad enum", "score: al_pass\nsteps:\n" + sb, []string{`t.yaml:1: score: want all_pass, any_pass, weighted_average or min, got "al_pass" (did you mean "all_pass"?)`}},
		{"bad duration", "steps:\n- {id: a, type: deploy_sandbox, timeout: 5}", []string{`steps[0].timeout: want a positive duration`}},
		{"wrong scalar type", "steps:\n" + sb + "- {id: x, type: exec, sandbox: sb, command: ls}", []string{`steps[1].command: want a list`}},
		{"weight on a non-verifier", "steps:\n- {id: a, type: deploy_sandbox, weight: 2}", []string{"only verifiers have a weight"}},
		{"agent kind", "steps:\n- {id: e, type: deploy_env, file: x}\n- {id: p, type: prompt_agent, env: e, agent: scriptd}", []string{`want scripted, openai or anthropic, got "scriptd" (did you mean "scripted"?)`}},
		{"capture not a regexp", "steps:\n- {id: e, type: deploy_env, file: x}\n- {id: p, type: prompt_agent, env: e, agent: scripted, calls: [{tool: a}, {tool: b, capture: {ref: 'ref=(e\\d+'}}]}",
			[]string{"steps[1]", "calls[1].capture.ref: error parsing regexp: missing closing )"}},
		{"capture of two groups", "steps:\n- {id: e, type: deploy_env, file: x}\n- {id: p, type: prompt_agent, env: e, agent: scripted, calls: [{tool: a}, {tool: b, capture: {ref: '(a)(b)'}}]}",
			[]string{"calls[1].capture.ref: want at most one group"}},
		{"capture on the first call", "steps:\n- {id: e, type: deploy_env, file: x}\n- {id: p, type: prompt_agent, env: e, agent: scripted, calls: [{tool: b, capture: {ref: 'x'}}]}",
			[]string{"calls[0].capture: the first call has no previous result"}},
		{"two agents", "steps:\n- {id: e, type: deploy_env, file: x}\n- {id: p, type: prompt_agent, env: e, prompt: hi, agent: {a2a: 'http://x', deployed: e}}", []string{"agent: name one agent"}},
		{"agent mapping field", "steps:\n- {id: e, type: deploy_env, file: x}\n- {id: p, type: prompt_agent, env: e, prompt: hi, agent: {a2:  'http://x'}}", []string{`steps[1].agent.a2: unknown field (did you mean "a2a"?)`}},
		{"deployed agent of the wrong type", "steps:\n- {id: e, type: deploy_env, file: x}\n- {id: p, type: prompt_agent, env: e, prompt: hi, agent: {deployed: e}}", []string{`step "e" is a deploy_env; want deploy_agent`}},
		{"empty", "", []string{"t.yaml: empty task file"}},
		{"syntax", "steps: [", []string{"t.yaml:1:"}},
		{"json", `{"steps": [{"id": "a", "type": "deploy_sandbox", "imag": "x"}]}`, []string{`steps[0].imag: unknown field (did you mean "image"?)`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := task.Parse("t.yaml", []byte(tc.src))
			if err == nil {
				t.Fatalf("Parse = nil, want an error containing %q", tc.want)
			}
			if !errors.Is(err, agentenv.ErrInvalid) {
				t.Errorf("Parse = %v, want it to wrap ErrInvalid", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("Parse error:\n%v\nwant it to contain %q", err, w)
				}
			}
		})
	}
}

// TestParseReportsEveryErrorAtOnce: errors of the top level, of a step's type, of a step's
// fields, of the graph and of references all come in one answer, and a step that names a
// broken step is not blamed for it.
func TestParseReportsEveryErrorAtOnce(t *testing.T) {
	src := `nmae: x
score: al_pass
steps:
- {id: sb, type: deploy_sandbox, provider: fake}
- {id: up, type: deploy_sandbx}
- {id: w, type: write_file, sandbox: sb, pth: p, depends_on: [sb]}
- {id: x, type: exec, sandbox: up, command: [ls], depends_on: [up, nope]}
- {id: y, type: write_file, sandbox: sb, path: p, content: '${step.sb.outputs.record}', depends_on: [sb]}
- {id: z, type: write_file, sandbox: sb, path: q, content: '${steps.up.outputs.record}', depends_on: [sb, up]}
`
	_, err := task.Parse("t.yaml", []byte(src))
	if err == nil {
		t.Fatal("Parse = nil, want errors")
	}
	for _, w := range []string{
		`t.yaml:1: nmae: unknown field (did you mean "name"?)`,
		`t.yaml:2: score: want all_pass`,
		`t.yaml:5: steps[1].type: unknown step type "deploy_sandbx"`,
		`steps[2].pth: unknown field (did you mean "path"?)`,
		`steps[3].depends_on[1]: unknown step "nope"`,
		`bad output reference "${step.sb.outputs.record}"`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("Parse error:\n%v\nwant it to contain %q", err, w)
		}
	}
	// x and z name up, whose type is the error: they are not blamed for it.
	for _, no := range []string{`step "up" is a`, `has no output "record"`, "steps[5]"} {
		if strings.Contains(err.Error(), no) {
			t.Errorf("Parse error:\n%v\nblames a step for another's error (%q)", err, no)
		}
	}
}

// TestLoaderChecksProvidersWithTheFile: a Loader's provider check reports in the same answer as
// the file's own errors; a provider with a placeholder is left to the instance.
func TestLoaderChecksProvidersWithTheFile(t *testing.T) {
	l := task.Loader{Provider: func(chain string) error {
		if chain != "docker" {
			return errors.New("provider " + chain + " is not configured")
		}
		return nil
	}}
	_, err := l.Parse("t.yaml", []byte(`steps:
- {id: a, type: deploy_sandbox, provider: dokcer}
- {id: b, type: deploy_sandbox, provider: docker, imgae: x}
- {id: c, type: deploy_sandbox, provider: "<which>"}
`))
	for _, w := range []string{"t.yaml:2: steps[0] (a).provider: provider dokcer is not configured", "steps[1].imgae: unknown field"} {
		if err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("Parse = %v, want it to name %q", err, w)
		}
	}
	if err != nil && strings.Contains(err.Error(), "<which>") {
		t.Errorf("Parse checked a provider with a placeholder: %v", err)
	}
}

func TestParseDefaults(t *testing.T) {
	tk := mustParse(t, "dir/t.yaml", `
steps:
- {id: a, type: deploy_sandbox}
- {id: b, type: deploy_sandbox}
- {id: c, type: file_contains, sandbox: a, path: x, contains: y, weight: 2, depends_on: [a]}
- {id: d, type: file_contains, sandbox: a, path: x, contains: y, depends_on: [a], fail_task_on_error: false, timeout: 3s}
- {id: agg, type: aggregate, verifiers: [d]}
`)
	if tk.Name != "t" || tk.Score != task.Min || tk.Dir != "dir" || !strings.HasPrefix(tk.Digest, "sha256:") {
		t.Errorf("task = %+v", tk)
	}
	if got := tk.Steps[1].DependsOn; len(got) != 1 || got[0] != "a" {
		t.Errorf("b.DependsOn = %v, want [a] (all earlier steps)", got)
	}
	if got := tk.Steps[4].DependsOn; len(got) != 4 {
		t.Errorf("agg.DependsOn = %v, want all 4 earlier steps", got)
	}
	c, d := tk.Steps[2], tk.Steps[3]
	if !c.FailTaskOnError || c.Weight != 2 || d.FailTaskOnError || d.Timeout.String() != "3s" || c.Timeout == 0 {
		t.Errorf("c = %+v, d = %+v", c, d)
	}
	if got := tk.Verifiers(); len(got) != 2 || got[0] != "c" || got[1] != "agg" {
		t.Errorf("Verifiers() = %v, want [c agg] (d is consumed by agg)", got)
	}
}

// TestBadInputDeploysNothing checks that a missing placeholder and bad seeds are errors before
// anything is created or recorded.
func TestBadInputDeploysNothing(t *testing.T) {
	src := `steps:
- {id: sb, type: deploy_sandbox, provider: fake}
- {id: w, type: write_file, sandbox: sb, path: "<file>", content: "<body>"}
`
	tk := mustParse(t, "t.yaml", src)
	if got := tk.Placeholders(); len(got) != 2 || got[0] != "file" || got[1] != "body" {
		t.Errorf("Placeholders() = %v, want [file body]", got)
	}
	seeds := filepath.Join(t.TempDir(), "seeds.csv")
	for _, tc := range []struct{ seeds, csv, want string }{
		{"", "", "placeholder <file>, <body> has no value"},
		{seeds, "file\nx.txt\n", "seeds row 1: placeholder <body> has no value"},
		{seeds, "file,body\n", "no rows after the header"},
		{seeds, "file,bo dy\nx,y\n", `"bo dy" is not a placeholder name`},
	} {
		if tc.seeds != "" {
			if err := os.WriteFile(seeds, []byte(tc.csv), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		r := newRig(t, nil)
		_, err := r.runner.Run(t.Context(), tk, task.RunOptions{Seeds: tc.seeds})
		if err == nil || !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Run(seeds %q) = %v, want an ErrInvalid containing %q", tc.csv, err, tc.want)
		}
		if n := r.fake.Calls("create"); n != 0 {
			t.Errorf("Run with bad input created %d sandboxes", n)
		}
		if runs, _ := r.ledger.Runs().List(t.Context(), nil, 0); len(runs) != 0 {
			t.Errorf("Run with bad input recorded %d runs", len(runs))
		}
	}
}

func TestLoadPath(t *testing.T) {
	dir := t.TempDir()
	if _, err := task.LoadPath(dir); err == nil || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("LoadPath(empty folder) = %v, want ErrNotExist", err)
	}
	src := "name: x\nsteps:\n- {id: a, type: deploy_sandbox}\n"
	if err := os.WriteFile(filepath.Join(dir, "task.yaml"), []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	tk, err := task.LoadPath(dir)
	if err != nil || tk.Name != "x" || tk.Dir != dir {
		t.Errorf("LoadPath(folder) = %+v, %v", tk, err)
	}
}
