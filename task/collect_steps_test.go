package task_test

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

// TestCollectFiles copies two files out of a process sandbox into the run's folder, beside
// its trajectories: each is listed in the run document with its path, stored name, size and
// sha256, and its bytes are those the sandbox held.
func TestCollectFiles(t *testing.T) {
	r := newRig(t, nil)
	tk := mustParse(t, "t.yaml", `name: collect
steps:
- {id: sb, type: deploy_sandbox, provider: process}
- {id: a, type: write_file, sandbox: sb, path: out/report.txt, content: "the report\n"}
- {id: b, type: write_file, sandbox: sb, path: log.txt, content: "a log line\n"}
- {id: keep, type: collect_files, sandbox: sb, paths: [out/report.txt, /log.txt]}
`)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	st := stepOf(ep, "keep")
	if st.Status != agentenv.StepPassed {
		t.Fatalf("keep: %s %s", st.Status, st.Error)
	}
	arts := task.Artifacts(st)
	if len(arts) != 2 || st.Outputs["files"] != "2" || st.Outputs["bytes"] != "22" {
		t.Fatalf("artifacts %+v, outputs %v", arts, st.Outputs)
	}
	runDir := filepath.Join(r.workdir, "runs", ep.Run)
	for i, want := range []struct{ path, name, data string }{
		{"out/report.txt", "artifacts/keep/out/report.txt", "the report\n"},
		{"/log.txt", "artifacts/keep/log.txt", "a log line\n"},
	} {
		a := arts[i]
		sum := sha256.Sum256([]byte(want.data))
		if a.Path != want.path || a.Name != want.name || a.Size != int64(len(want.data)) || a.SHA256 != hex.EncodeToString(sum[:]) ||
			a.File != filepath.Join(runDir, filepath.FromSlash(want.name)) {
			t.Errorf("artifact %d = %+v, want %s stored as %s in %s", i, a, want.path, want.name, runDir)
		}
		if got, err := os.ReadFile(a.File); err != nil || string(got) != want.data {
			t.Errorf("%s holds %q (%v), want %q", a.File, got, err, want.data)
		}
	}
	doc, err := r.ledger.Runs().Get(t.Context(), ep.Run)
	if err != nil {
		t.Fatal(err)
	}
	if i := indexOfStep(doc, "keep"); i < 0 || len(task.Artifacts(doc.Steps[i])) != 2 {
		t.Errorf("the run document does not list the artifacts: %+v", doc.Steps)
	}
	r.assertClean(t)
}

// TestCollectFilesFails: a missing file and files past max_bytes fail the step as the agent's
// error, naming the path, and store nothing; bad fields are refused at load naming the field.
func TestCollectFilesFails(t *testing.T) {
	r := newRig(t, nil)
	tk := mustParse(t, "t.yaml", `name: collect
steps:
- {id: sb, type: deploy_sandbox, provider: process}
- {id: a, type: write_file, sandbox: sb, path: big.txt, content: "0123456789"}
- {id: missing, type: collect_files, sandbox: sb, paths: [big.txt, nowhere.txt], fail_task_on_error: false}
- {id: over, type: collect_files, sandbox: sb, paths: [big.txt], max_bytes: 9, fail_task_on_error: false}
`)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	for id, want := range map[string]string{
		"missing": "paths[1]: nowhere.txt: no such file in the sandbox",
		"over":    "past max_bytes 9: nothing stored",
	} {
		st := stepOf(ep, id)
		if st.Status != agentenv.StepFailed || st.ErrorKind != agentenv.StepErrorAgent || !strings.Contains(st.Error, want) {
			t.Errorf("%s: %s (%s) %q, want failed as the agent's error with %q", id, st.Status, st.ErrorKind, st.Error, want)
		}
	}
	if _, err := os.Stat(filepath.Join(r.workdir, "runs", ep.Run, task.ArtifactsDir)); !os.IsNotExist(err) {
		t.Errorf("failed steps stored files: %v", err)
	}
	r.assertClean(t)

	for _, c := range []struct{ src, want string }{
		{"{id: c, type: collect_files, sandbox: sb}", "paths"},
		{"{id: c, type: collect_files, sandbox: sb, paths: []}", "paths: name at least one file"},
		{"{id: c, type: collect_files, sandbox: sb, paths: [../etc/passwd]}", `paths[0]: "../etc/passwd" leaves its folder`},
		{"{id: c, type: collect_files, sandbox: sb, paths: [/]}", `paths[0]: "/" is the sandbox's root`},
		{"{id: c, type: collect_files, sandbox: sb, paths: [out, out/]}", `paths[1]: "out/" is paths[0] again`},
		{"{id: c, type: collect_files, sandbox: sb, paths: [a.txt, ./a.txt]}", `paths[1]: "./a.txt" is paths[0] again`},
		{"{id: c, type: collect_files, sandbox: sb, paths: [a], max_bytes: -1}", "max_bytes: want 1 to"},
		{"{id: c, type: collect_files, sandbox: sb, paths: [a], max_bytes: 2000000000}", "max_bytes: want 1 to"},
		{"{id: c, type: collect_files, paths: [a]}", "set sandbox"},
		{"{id: c, type: collect_files, sandbox: sb, component: x, paths: [a]}", "component: only with env"},
		{"{id: c, type: collect_files, sandbox: sb, paths: [a], pathz: [b]}", "pathz"},
	} {
		src := "name: bad\nsteps:\n- {id: sb, type: deploy_sandbox, provider: process}\n- " + c.src + "\n"
		_, err := task.Parse("bad.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "bad.yaml:4") {
			t.Errorf("Parse(%s) = %v, want an error at bad.yaml:4 with %q", c.src, err, c.want)
		}
	}
}

// TestCollectFolders: a path ending in / collects every regular file below that folder, each
// named by its own path, sorted, without following a symbolic link out of it, and a file named
// by itself too is stored once; a folder that is not there fails the step as the agent's error.
func TestCollectFolders(t *testing.T) {
	r := newRig(t, nil)
	outside := filepath.Join(t.TempDir(), "host.txt")
	if err := os.WriteFile(outside, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	tk := mustParse(t, "t.yaml", `name: collect
steps:
- {id: sb, type: deploy_sandbox, provider: process}
- {id: a, type: write_file, sandbox: sb, path: out/b.txt, content: "bee"}
- {id: b, type: write_file, sandbox: sb, path: out/sub/a.txt, content: "ay"}
- {id: c, type: write_file, sandbox: sb, path: other.txt, content: "other"}
- {id: ln, type: exec, sandbox: sb, command: [ln, -s, `+outside+`, out/link.txt], depends_on: [a]}
- {id: keep, type: collect_files, sandbox: sb, paths: [out/sub/a.txt, out/], depends_on: [a, b, c, ln]}
- {id: none, type: collect_files, sandbox: sb, paths: [nowhere/], fail_task_on_error: false, depends_on: [keep]}
`)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	st := stepOf(ep, "keep")
	if st.Status != agentenv.StepPassed {
		t.Fatalf("keep: %s %s", st.Status, st.Error)
	}
	var got []string
	for _, a := range task.Artifacts(st) {
		data, err := os.ReadFile(a.File)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, a.Path+"="+a.Name+"="+string(data))
	}
	want := []string{"out/sub/a.txt=artifacts/keep/out/sub/a.txt=ay", "out/b.txt=artifacts/keep/out/b.txt=bee"}
	if strings.Join(got, " ") != strings.Join(want, " ") || st.Outputs["files"] != "2" {
		t.Errorf("collected %q (outputs %v), want %q", got, st.Outputs, want)
	}
	none := stepOf(ep, "none")
	if none.Status != agentenv.StepFailed || none.ErrorKind != agentenv.StepErrorAgent || !strings.Contains(none.Error, "paths[0]: list folder nowhere/: find exited 1") {
		t.Errorf("none: %s (%s) %q, want failed as the agent's error naming the folder", none.Status, none.ErrorKind, none.Error)
	}
	r.assertClean(t)
}

func indexOfStep(r agentenv.Run, id string) int {
	for i, s := range r.Steps {
		if s.ID == id {
			return i
		}
	}
	return -1
}

// TestCollectOptional: with optional, a path is collected as a folder or a file whatever its
// spelling, and one the sandbox lacks is skipped and listed in "missing"; without it, the same
// missing path fails the step.
func TestCollectOptional(t *testing.T) {
	r := newRig(t, nil)
	tk := mustParse(t, "t.yaml", `name: collect
steps:
- {id: sb, type: deploy_sandbox, provider: process}
- {id: a, type: write_file, sandbox: sb, path: out/b.txt, content: "bee"}
- {id: b, type: write_file, sandbox: sb, path: one.txt, content: "one"}
- {id: some, type: collect_files, sandbox: sb, paths: [out, one.txt, gone.txt, gone/], optional: true, depends_on: [a, b]}
- {id: strict, type: collect_files, sandbox: sb, paths: [one.txt, gone.txt], fail_task_on_error: false, depends_on: [some]}
`)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	st := stepOf(ep, "some")
	if st.Status != agentenv.StepPassed {
		t.Fatalf("some: %s %s", st.Status, st.Error)
	}
	var got []string
	for _, a := range task.Artifacts(st) {
		got = append(got, a.Path+"="+a.Name)
	}
	if want := "out/b.txt=artifacts/some/out/b.txt one.txt=artifacts/some/one.txt"; strings.Join(got, " ") != want || st.Outputs["missing"] != `["gone.txt","gone/"]` {
		t.Errorf("collected %q, missing %s; want %q, [gone.txt gone/]", got, st.Outputs["missing"], want)
	}
	if strict := stepOf(ep, "strict"); strict.Status != agentenv.StepFailed || !strings.Contains(strict.Error, "gone.txt") {
		t.Errorf("strict: %s %q, want failed naming gone.txt", strict.Status, strict.Error)
	}
	r.assertClean(t)
}
