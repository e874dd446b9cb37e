package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/cobra"
)

// isolate gives the test a home and a state folder of its own, and no config file; it returns
// the home.
func isolate(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	t.Setenv("XDG_STATE_HOME", filepath.Join(dir, "state"))
	t.Setenv("HOME", dir)
	t.Setenv("AGENTENV_CONFIG", "")
	return dir
}

// TestBadCommandLinesExit2 walks command lines a user gets wrong (flags, counts, arguments,
// commands, files and ids that do not exist) and checks each exits 2 naming what is wrong, with
// nothing recorded in the ledger. It needs no engine: every case is refused before any provider
// is called.
func TestBadCommandLinesExit2(t *testing.T) {
	dir := isolate(t)
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	typo := write("typo.toml", "[ledgr]\ndsn = \"elsewhere.bolt\"\n")
	noLedger := write("not-a-ledger.bolt", strings.Repeat("not a ledger ", 100))
	badProvider := write("bad-provider.yaml", "name: x\nsteps:\n- {id: s, type: deploy_sandbox, provider: dokcer}\n")
	hostEnv := write("host-env.yaml", "name: x\nsteps:\n- {id: s, type: deploy_sandbox, provider: process, env: {A: \"env:HOME\"}}\n")
	noSteps := write("no-steps.yaml", "name: x\nsteps: []\n")
	misspelt := write("misspelt.yaml", "name: x\nsteps:\n- {id: s, type: deploy_sandbox, provider: process}\n- {id: w, type: write_file, sandbox: s, path: a, content: '${step.s.outputs.record}'}\n")
	var bomb strings.Builder
	bomb.WriteString("name: bomb\nsteps:\n- {id: s0, type: deploy_sandbox, provider: process, command: &a0 [x, x, x, x, x, x, x, x, x]}\n")
	for i := 1; i <= 9; i++ {
		fmt.Fprintf(&bomb, "- {id: s%d, type: deploy_sandbox, provider: process, command: &a%d [%s]}\n", i, i, strings.Repeat(fmt.Sprintf("*a%d, ", i-1), 8)+fmt.Sprintf("*a%d", i-1))
	}
	bombFile := write("bomb.yaml", bomb.String())
	envOut := write("env-out.yaml", "name: out\nservers:\n- {name: kv, command: [serve, kv]}\nservice_db:\n  init_sql: [/etc/hostname]\n")

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"nosuchcmd"}, `unknown command "nosuchcmd" for "agentenv"`},
		{[]string{"sandbx"}, `(did you mean sandbox?)`},
		{[]string{"runs", "nosuch"}, `unknown command "nosuch" for "agentenv runs"`},
		{[]string{"gc", "extra"}, `agentenv gc takes no arguments, got ["extra"]`},
		{[]string{"version", "1"}, `agentenv version takes no arguments`},
		{[]string{"run", "hello", "extra"}, "agentenv run: accepts at most 1 arg(s), received 2"},
		{[]string{"runs", "get"}, "agentenv runs get: accepts 1 arg(s), received 0"},
		{[]string{"env", "deploy"}, "agentenv env deploy: accepts 1 arg(s), received 0"},
		{[]string{"sandbox", "create", "sleep", "1"}, "sandbox create takes its command after --"},
		{[]string{"run", "hello", "--k", "0"}, "--k 0: want 1 or more"},
		{[]string{"run", "hello", "--k", "-3"}, "--k -3: want 1 or more"},
		{[]string{"run", "hello", "--concurrency", "-3"}, "--concurrency -3"},
		{[]string{"run", "hello", "--retries", "-1"}, "--retries -1"},
		{[]string{"run", "hello", "--max-cost-usd", "-1"}, "--max-cost-usd -1"},
		{[]string{"run", "hello", "--k", "x"}, `invalid argument "x" for "--k"`},
		{[]string{"run", "hello", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"sandbox", "create", "--provider", "process", "--ttl", "-1h", "--", "sleep", "1"}, "ttl -1h0m0s: want more than 0"},
		{[]string{"sandbox", "create", "--provider", "process", "--port", "99999", "--", "sleep", "1"}, "port 99999: want 1-65535"},
		{[]string{"run", filepath.Join(dir, "missing.yaml")}, "missing.yaml: no such file or directory"},
		{[]string{"run", dir}, "has no task.yaml or task.json"},
		{[]string{"env", "validate", filepath.Join(dir, "missing.yaml")}, "missing.yaml: no such file or directory"},
		{[]string{"env", "validate", envOut}, `service_db.init_sql[0]: file "/etc/hostname" is outside the env file's folder`},
		{[]string{"--config", filepath.Join(dir, "missing.toml"), "version"}, "missing.toml"},
		{[]string{"--config", typo, "version"}, `unknown key "ledgr.dsn" (did you mean "ledger.dsn"?)`},
		{[]string{"--ledger", noLedger, "runs", "ls"}, "not-a-ledger.bolt: not a bbolt ledger"},
		{[]string{"runs", "get", "run-nope"}, "no run or group run-nope in the ledger"},
		{[]string{"runs", "export", "group-nope"}, "no group group-nope in the ledger"},
		{[]string{"runs", "push", "group-nope", "127.0.0.1:5000/team/runs:v1"}, "no group group-nope in the ledger"},
		{[]string{"runs", "push", "group-nope", "runs:v1"}, `reference "runs:v1": want host[:port]/repo`},
		{[]string{"runs", "pull", "group-nope"}, `reference "group-nope": want host[:port]/repo`},
		{[]string{"runs", "pull"}, "agentenv runs pull: accepts 1 arg(s), received 0"},
		{[]string{"run", "--resume", "group-nope"}, "no group group-nope in the ledger"},
		{[]string{"run", noSteps}, "steps: empty: a task needs at least one step"},
		{[]string{"run", badProvider}, `steps[0] (s).provider: provider "dokcer" is not configured (did you mean "docker"?)`},
		{[]string{"run", noSteps, "--provider", "dokcer"}, "steps: empty"},
		{[]string{"run", "hello", "--provider", "42"}, `--provider: provider "42" is not configured`},
		{[]string{"run", hostEnv}, `env.A: "env:HOME" would reach the sandbox as that text`},
		{[]string{"run", misspelt}, `bad output reference "${step.s.outputs.record}"`},
		{[]string{"run", bombFile}, "document too large"},
		// Harbor task folders and datasets.
		{[]string{"tasks", "check", "testdata/harbor/not-a-task"}, "testdata/harbor/not-a-task: not a Harbor task folder or dataset (no task.toml"},
		{[]string{"run", "testdata/harbor/not-a-task"}, "has no task.yaml or task.json"},
		{[]string{"run", "../../harbor/testdata/bad/wrong-type"}, "wrong-type/task.toml:4: key agent.timeout_sec: want a number"},
		{[]string{"tasks", "check", "../../harbor/testdata/bad/wrong-type"}, "wrong-type/task.toml:8: key environment.memory_mb: want an integer"},
		{[]string{"run", "testdata/harbor/cheat", "--agent", "bogus"}, `agent "bogus": want one of oracle, nop, openai, anthropic`},
		{[]string{"run", "../../harbor/testdata/corpus", "--include", "no-such-task*"}, "no task folder (one with task.toml) matches"},
		{[]string{"tasks", "check", "../../harbor/testdata/corpus", "--include", "no-such-task*"}, "no task folder (one with task.toml) matches"},
	} {
		var out, errb bytes.Buffer
		code := run(c.args, strings.NewReader(""), &out, &errb)
		if code != exitBadInput || !strings.Contains(errb.String(), c.want) {
			t.Errorf("agentenv %s: exit %d, stderr %q; want exit 2 naming %q", strings.Join(c.args, " "), code, errb.String(), c.want)
		}
	}
	// With --json, the error is JSON on stdout too.
	var jout, jerr bytes.Buffer
	if code := run([]string{"runs", "get", "run-nope", "--json"}, nil, &jout, &jerr); code != exitBadInput ||
		!strings.Contains(jout.String(), `"exit_code": 2`) || !strings.Contains(jout.String(), `"error": "no run or group run-nope`) {
		t.Errorf("runs get run-nope --json: exit %d, stdout %q; want the error as JSON", code, jout.String())
	}
	t.Setenv("AGENTENV_FAULTS", "process/craete:1:error")
	var out, errb bytes.Buffer
	if code := run([]string{"run", "hello"}, nil, &out, &errb); code != exitBadInput || !strings.Contains(errb.String(), `process/craete: unknown operation (did you mean "create"?)`) {
		t.Errorf("a misspelt AGENTENV_FAULTS operation: exit %d, stderr %q; want exit 2 naming it", code, errb.String())
	}
	t.Setenv("AGENTENV_FAULTS", "")
	out.Reset()
	errb.Reset()
	if code := run([]string{"ledger", "ls", "--all", "--json"}, nil, &out, &errb); code != 0 || strings.TrimSpace(out.String()) != "[]" {
		t.Errorf("ledger ls after bad input: exit %d, %s%s; want an empty ledger", code, out.String(), errb.String())
	}
}

// TestEveryCommandRefusesBadArguments walks the whole command tree, so that a command added
// later is walked too: every command refuses an unknown flag, and every command whose
// arguments are bounded refuses too many, each with exit 2 naming the mistake, before it does
// anything (nothing is recorded).
func TestEveryCommandRefusesBadArguments(t *testing.T) {
	isolate(t)
	root, closeApp := newRoot(strings.NewReader(""), io.Discard, io.Discard)
	defer closeApp()
	var cmds []*cobra.Command
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		cmds = append(cmds, c)
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	extra := slices.Repeat([]string{"extra"}, 20)
	cases, arbitrary := 0, 0
	for _, c := range cmds {
		path := strings.Fields(c.CommandPath())[1:]
		lines := [][]string{append(slices.Clone(path), "--no-such-flag")}
		wants := []string{"unknown flag: --no-such-flag"}
		if c.Args != nil && c.Args(c, extra) == nil {
			arbitrary++ // takes any number (a command after --): nothing is too many
		} else {
			name := "agentenv" // the message names the command, some without the root's name
			if len(path) > 0 {
				name = strings.Join(path, " ")
			}
			lines = append(lines, append(slices.Clone(path), extra...))
			wants = append(wants, name)
		}
		for i, args := range lines {
			var out, errb bytes.Buffer
			code := run(args, strings.NewReader(""), &out, &errb)
			if code != exitBadInput || !strings.Contains(errb.String(), wants[i]) {
				t.Errorf("agentenv %s: exit %d, stderr %q; want exit 2 naming %q", strings.Join(args, " "), code, errb.String(), wants[i])
			}
			cases++
		}
	}
	if len(cmds) < 40 {
		t.Errorf("walked %d commands; the tree has more than 40", len(cmds))
	}
	var out, errb bytes.Buffer
	if code := run([]string{"ledger", "ls", "--all", "--json"}, nil, &out, &errb); code != 0 || strings.TrimSpace(out.String()) != "[]" {
		t.Errorf("ledger after %d bad command lines: exit %d, %s%s; want it empty", cases, code, out.String(), errb.String())
	}
	t.Logf("%d commands, %d bad command lines refused (%d commands take any number of arguments)", len(cmds), cases, arbitrary)
}

// TestExportWithABadFormatLeavesTheFile: a refused export does not touch the file it was to
// write, and a good one replaces it whole.
func TestExportWithABadFormatLeavesTheFile(t *testing.T) {
	dir := isolate(t)
	var out, errb bytes.Buffer
	if code := run([]string{"run", "hello", "--json"}, nil, &out, &errb); code != 0 {
		t.Fatalf("run hello: exit %d\n%s", code, errb.String())
	}
	group := ""
	for _, f := range strings.Fields(strings.NewReplacer(`"`, " ", ",", " ").Replace(out.String())) {
		if strings.HasPrefix(f, "group-") {
			group = f
			break
		}
	}
	if group == "" {
		t.Fatalf("no group id in %s", out.String())
	}
	target := filepath.Join(dir, "scores.csv")
	if err := os.WriteFile(target, []byte("precious\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	errb.Reset()
	if code := run([]string{"runs", "export", group, "--format", "xml", "-o", target}, nil, &out, &errb); code != exitBadInput || !strings.Contains(errb.String(), `export format "xml"`) {
		t.Errorf("export --format xml: exit %d, %s; want exit 2 naming the format", code, errb.String())
	}
	if b, _ := os.ReadFile(target); string(b) != "precious\n" {
		t.Errorf("a refused export left the file holding %q", b)
	}
	if code := run([]string{"runs", "export", group, "--format", "csv", "-o", target}, nil, &out, &errb); code != 0 {
		t.Fatalf("export --format csv: exit %d, %s", code, errb.String())
	}
	if b, _ := os.ReadFile(target); !strings.HasPrefix(string(b), "group,task,") || !strings.Contains(string(b), group) {
		t.Errorf("export wrote %q, want the group's scores", b)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 { // state and scores.csv: no temporary file left
		t.Errorf("the folder holds %d entries after the exports, want 2", len(ents))
	}
}

// TestBadInputCorpus runs every file of testdata/badinput through the commands that read its
// kind (task: run, env: env validate and env deploy, eval: run, config: --config ... version);
// each must exit 2 with stderr naming what each of its first lines "# want: ..." says (a file of
// several errors gets them all in one answer), and nothing may be recorded.
func TestBadInputCorpus(t *testing.T) {
	isolate(t)
	args := map[string][]func(f string) []string{
		"task": {func(f string) []string { return []string{"run", f} }},
		"env": {
			func(f string) []string { return []string{"env", "validate", f} },
			func(f string) []string { return []string{"env", "deploy", f} },
		},
		"eval":   {func(f string) []string { return []string{"run", f} }},
		"config": {func(f string) []string { return []string{"--config", f, "version"} }},
	}
	n := 0
	for kind, cmds := range args {
		files, err := filepath.Glob(filepath.Join("testdata", "badinput", kind, "[0-9]*"))
		if err != nil || len(files) == 0 {
			t.Fatalf("no %s cases: %v", kind, err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			var wants []string
			for _, line := range strings.Split(string(b), "\n") {
				w, ok := strings.CutPrefix(line, "# want: ")
				if !ok {
					break
				}
				wants = append(wants, w)
			}
			if len(wants) == 0 {
				t.Fatalf("%s: the first line must be \"# want: ...\"", f)
			}
			before := string(b)
			for _, cmd := range cmds {
				var out, errb bytes.Buffer
				args := cmd(f)
				code := run(args, strings.NewReader(""), &out, &errb)
				if code != exitBadInput {
					t.Errorf("%v: exit %d, stderr %q; want exit 2", args, code, errb.String())
				}
				for _, w := range wants {
					if !strings.Contains(errb.String(), w) {
						t.Errorf("%v: stderr %q; want it to name %q", args, errb.String(), w)
					}
				}
				if after, _ := os.ReadFile(f); string(after) != before {
					t.Errorf("%s changed", f)
				}
			}
			n++
		}
	}
	var out, errb bytes.Buffer
	if code := run([]string{"ledger", "ls", "--all", "--json"}, nil, &out, &errb); code != 0 || strings.TrimSpace(out.String()) != "[]" {
		t.Errorf("ledger after %d bad files: exit %d, %s%s; want it empty", n, code, out.String(), errb.String())
	}
	t.Logf("%d bad files refused", n)
}
