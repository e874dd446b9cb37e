package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOneOutcomeWordEverywhere: an episode whose command verifier exits 3 is "scored below 1"
// in `agentenv run --json`, in `runs ls` and `runs get` and in the export, as on the explorer's pages (which
// read it with the same function, task.OutcomeOf).
func TestOneOutcomeWordEverywhere(t *testing.T) {
	dir := isolate(t)
	file := filepath.Join(dir, "exit3.yaml")
	if err := os.WriteFile(file, []byte(`name: exit3
steps:
- {id: sb, type: deploy_sandbox, provider: process}
- {id: check, type: command_succeeds, sandbox: sb, command: [sh, -c, "exit 3"]}
`), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := run([]string{"run", file, "--json"}, nil, &out, &errb); code != exitFailed {
		t.Fatalf("run: exit %d, want %d\n%s%s", code, exitFailed, out.String(), errb.String())
	}
	const word = `"outcome": "scored below 1"`
	if !strings.Contains(out.String(), word) {
		t.Errorf("run --json does not say %s:\n%s", word, out.String())
	}
	var group, episode string
	for _, f := range strings.Fields(strings.NewReplacer(`"`, " ", ",", " ").Replace(out.String())) {
		switch {
		case group == "" && strings.HasPrefix(f, "group-"):
			group = f
		case episode == "" && strings.HasPrefix(f, "run-"):
			episode = f
		}
	}
	if group == "" || episode == "" {
		t.Fatalf("no group or run id in %s", out.String())
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"runs", "ls"}, "scored below 1"},
		{[]string{"runs", "get", episode}, "scored below 1"},
		{[]string{"runs", "get", group}, "scored below 1"},
		{[]string{"runs", "export", group, "--format", "csv"}, ",scored below 1,0,"},
		{[]string{"runs", "export", group, "--format", "chat-jsonl"}, `"outcome":"scored below 1"`},
	} {
		out.Reset()
		errb.Reset()
		if code := run(c.args, nil, &out, &errb); code != 0 || !strings.Contains(out.String(), c.want) {
			t.Errorf("agentenv %s: exit %d, want it to say %q:\n%s%s", strings.Join(c.args, " "), code, c.want, out.String(), errb.String())
		}
	}
}
