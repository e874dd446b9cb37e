//go:build integration

package main_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/eval"
	"github.com/agentenv/agentenv/explorer"
	"github.com/agentenv/agentenv/internal/registryserver"
	"github.com/agentenv/agentenv/ledger"
	"github.com/agentenv/agentenv/lifecycle"
)

// collectTaskYAML writes a report in a docker sandbox of the Debian image (whose find lists a
// folder), keeps it with collect_files, keeps a folder of logs too (every file below it), and
// checks the report.
const collectTaskYAML = `name: collect
steps:
  - id: box
    type: deploy_sandbox
    provider: docker
    image: agentenv-debian:bookworm
    command: [sleep, "3600"]
  - id: put
    type: write_file
    sandbox: box
    path: /tmp/out/report.txt
    content: "the report\n"
  - id: keep
    type: collect_files
    sandbox: box
    paths: [/tmp/out/report.txt]
  - id: logs
    type: exec
    sandbox: box
    command: [sh, -c, "mkdir -p /tmp/logs/deep && echo one > /tmp/logs/a.log && echo two > /tmp/logs/deep/b.log"]
  - id: keep_logs
    type: collect_files
    sandbox: box
    paths: [/tmp/logs/]
    depends_on: [logs]
  - id: check
    type: file_contains
    sandbox: box
    path: /tmp/out/report.txt
    contains: report
`

// explorerOf serves an explorer over c's ledger and runs folder, as `agentenv ui` would.
func explorerOf(t *testing.T, c *cli) *httptest.Server {
	t.Helper()
	l, err := ledger.Open(t.Context(), filepath.Join(c.state, "agentenv", "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	srv := httptest.NewUnstartedServer(nil)
	hosts, err := explorer.Hosts(srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	x, err := explorer.New(explorer.Config{Ledger: l, RunsDir: filepath.Join(c.state, "agentenv", "runs"), Hosts: hosts})
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = x.Handler()
	srv.Start()
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = x.Close(ctx)
	})
	return srv
}

func httpGet(t *testing.T, u string) (int, string) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatalf("GET %s: %v", u, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// pulledGroup is what `runs get GROUP --json` says, the parts a pull must keep.
type pulledGroup struct {
	Group  string `json:"group"`
	Name   string `json:"name"`
	Status string `json:"status"`
	Lines  []struct {
		Task     string   `json:"task"`
		Instance int      `json:"instance"`
		Attempt  int      `json:"attempt"`
		Run      string   `json:"run"`
		Outcome  string   `json:"outcome"`
		Score    *float64 `json:"score"`
	} `json:"episodes"`
	Tasks  json.RawMessage `json:"tasks"`
	Totals json.RawMessage `json:"totals"`
}

func (c *cli) groupDoc(t *testing.T, id string) pulledGroup {
	t.Helper()
	r := c.run(t.Context(), nil, "runs", "get", id, "--json")
	var g pulledGroup
	if err := json.Unmarshal([]byte(r.stdout), &g); r.code != 0 || err != nil {
		t.Fatalf("runs get %s --json: exit %d, %v\n%s%s", id, r.code, err, r.stdout, r.stderr)
	}
	return g
}

// files returns each file a run document names (trajectories, artifacts), by step, with its
// contents.
func (c *cli) runFiles(t *testing.T, id string) map[string]string {
	t.Helper()
	r := c.run(t.Context(), nil, "runs", "get", id, "--json")
	var doc agentenv.Run
	if err := json.Unmarshal([]byte(r.stdout), &doc); r.code != 0 || err != nil {
		t.Fatalf("runs get %s --json: exit %d, %v\n%s%s", id, r.code, err, r.stdout, r.stderr)
	}
	out := map[string]string{}
	read := func(key, p string) {
		if !strings.HasPrefix(p, c.state) {
			t.Errorf("run %s: %s is %s, not in this machine's state folder %s", id, key, p, c.state)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			t.Errorf("run %s: %s: %v", id, key, err)
		}
		out[key] = string(b)
	}
	for _, s := range doc.Steps {
		if p := s.Outputs["trajectory"]; p != "" {
			read(s.ID+".trajectory", p)
		}
		if a := s.Outputs["artifacts"]; a != "" {
			var arts []struct{ Name, File, SHA256 string }
			if err := json.Unmarshal([]byte(a), &arts); err != nil {
				t.Fatal(err)
			}
			for _, art := range arts {
				read(s.ID+"."+art.Name, art.File)
			}
		}
	}
	return out
}

// TestRunsPushPull runs an eval of notes-task (a scripted agent's trajectory, and a
// collect_files step from its env's servicedb component) and a task whose collect_files step
// keeps a report from a docker sandbox; the report is listed and
// downloadable from the explorer's handler. The group is pushed to a real registry
// (deterministically: twice, one digest) and pulled into a second state folder and ledger,
// where `runs get --json` shows the same episodes, scores and trajectory and artifact
// contents, and the explorer's group page the episodes; a second pull is a no-op. Bad input:
// a collect_files path with .. and a missing one, a push of a running group or an unknown
// one, a pull of a task bundle.
func TestRunsPushPull(t *testing.T) {
	t.Parallel()
	reg := registryserver.Start(t, registryserver.Options{})
	c := bundleCLI(t)
	c.buildRuntimeImage()
	dir := t.TempDir()
	write := func(name, data string) string {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// notes-task as it ships, and a collect_files step from its env's servicedb component.
	for _, f := range []string{"notes/env.yaml", "notes-task/task.yaml"} {
		b, err := os.ReadFile(filepath.Join("../../examples", f))
		if err != nil {
			t.Fatal(err)
		}
		if f == "notes-task/task.yaml" {
			b = append(b, "\n  - id: keep_db\n    type: collect_files\n    env: env\n    component: servicedb\n    paths: [/etc/passwd]\n"...)
		}
		write(f, string(b))
	}
	notes := filepath.Join(dir, "notes-task")
	write("collect.yaml", collectTaskYAML)
	evalFile := write("shared.yaml", "name: shared\ntasks:\n  - task: "+notes+"\n    k: 1\n  - task: collect.yaml\n    k: 2\n")

	ran := c.run(t.Context(), nil, "run", evalFile)
	group := groupOf(ran.stdout)
	if ran.code != 0 || group == "" {
		t.Fatalf("run %s: exit %d\n%s%s", evalFile, ran.code, ran.stdout, ran.stderr)
	}
	want := c.groupDoc(t, group)
	if len(want.Lines) != 3 {
		t.Fatalf("group %s has %d episodes, want 3", group, len(want.Lines))
	}

	// The artifact, listed and downloadable on the machine that ran it.
	x1 := explorerOf(t, c)
	var collectRun string
	for _, l := range want.Lines {
		if l.Task == "collect" {
			collectRun = l.Run
		}
	}
	var rv explorer.RunView
	code, body := httpGet(t, x1.URL+"/api/v1/runs/"+collectRun)
	if err := json.Unmarshal([]byte(body), &rv); code != http.StatusOK || err != nil || len(rv.Artifacts) != 3 {
		t.Fatalf("GET /api/v1/runs/%s = %d, %v, artifacts %+v, want the report and the folder's two logs\n%s", collectRun, code, err, rv.Artifacts, body)
	}
	for i, want := range []struct{ path, data string }{{"/tmp/logs/a.log", "one\n"}, {"/tmp/logs/deep/b.log", "two\n"}} {
		a := rv.Artifacts[1+i]
		if code, got := httpGet(t, x1.URL+a.URL); a.Path != want.path || code != http.StatusOK || got != want.data {
			t.Errorf("artifact %+v = %d %q, want %s holding %q", a, code, got, want.path, want.data)
		}
	}
	if a := rv.Artifacts[0]; a.Path != "/tmp/out/report.txt" || a.Size != int64(len("the report\n")) || len(a.SHA256) != 64 {
		t.Errorf("artifact %+v, want /tmp/out/report.txt of 11 bytes", a)
	}
	if code, got := httpGet(t, x1.URL+rv.Artifacts[0].URL); code != http.StatusOK || got != "the report\n" {
		t.Errorf("GET %s = %d %q, want the report", rv.Artifacts[0].URL, code, got)
	}
	if code, page := httpGet(t, x1.URL+"/runs/"+collectRun); code != http.StatusOK || !strings.Contains(page, `href="`+rv.Artifacts[0].URL+`"`) {
		t.Errorf("run page = %d, want a link to %s", code, rv.Artifacts[0].URL)
	}
	wantFiles := map[string]map[string]string{}
	for _, l := range want.Lines {
		wantFiles[l.Run] = c.runFiles(t, l.Run)
	}

	ref := reg.Addr + "/team/runs/shared:v1"
	push := func() string {
		r := c.run(t.Context(), nil, "runs", "push", group, ref, "--plain-http")
		m := pinnedLine.FindStringSubmatch(r.stdout)
		if r.code != 0 || m == nil || m[1]+":"+m[2] != ref {
			t.Fatalf("runs push: exit %d, want %s@sha256:…\n%s%s", r.code, ref, r.stdout, r.stderr)
		}
		return m[3]
	}
	start := time.Now()
	digest := push()
	t.Logf("runs push of %s (3 episodes): %s", group, time.Since(start).Round(time.Millisecond))
	if again := push(); again != digest {
		t.Errorf("a second push of the same group: digest %s, was %s", again, digest)
	}

	// Another machine: its own state folder, ledger and bundle cache.
	c2 := bundleCLI(t)
	start = time.Now()
	pull := c2.run(t.Context(), nil, "runs", "pull", ref, "--plain-http")
	t.Logf("runs pull into an empty cache and ledger: %s", time.Since(start).Round(time.Millisecond))
	if pull.code != 0 || strings.TrimSpace(pull.stdout) != group {
		t.Fatalf("runs pull: exit %d, want %s\n%s%s", pull.code, group, pull.stdout, pull.stderr)
	}
	got := c2.groupDoc(t, group)
	if !reflect.DeepEqual(got.Lines, want.Lines) || string(got.Tasks) != string(want.Tasks) || string(got.Totals) != string(want.Totals) || got.Group != want.Group || got.Name != want.Name || got.Status != want.Status {
		t.Errorf("pulled group:\n%+v\nwant\n%+v", got, want)
	}
	for run, files := range wantFiles {
		if gotFiles := c2.runFiles(t, run); !reflect.DeepEqual(gotFiles, files) {
			t.Errorf("run %s's files after the pull: %v, want %v", run, keysOf(gotFiles), keysOf(files))
		}
	}
	for _, key := range []string{"agent.trajectory", "keep_db.artifacts/keep_db/etc/passwd"} {
		if v, ok := wantFiles[want.Lines[0].Run][key]; !ok || v == "" {
			t.Errorf("notes-task's episode has no %s: %v", key, keysOf(wantFiles[want.Lines[0].Run]))
		}
	}
	again := c2.run(t.Context(), nil, "runs", "pull", ref, "--plain-http")
	if again.code != 0 || !strings.Contains(again.stderr, "nothing to do") {
		t.Errorf("a second runs pull: exit %d, want a no-op\n%s%s", again.code, again.stdout, again.stderr)
	}
	x2 := explorerOf(t, c2)
	code, page := httpGet(t, x2.URL+"/groups/"+group)
	if code != http.StatusOK {
		t.Fatalf("GET /groups/%s = %d\n%s", group, code, page)
	}
	for _, l := range want.Lines {
		if !strings.Contains(page, l.Run) {
			t.Errorf("the pulled group's page does not show episode %s", l.Run)
		}
	}
	if err := json.Unmarshal([]byte(mustGet(t, x2.URL+"/api/v1/runs/"+collectRun)), &rv); err != nil || len(rv.Artifacts) != 3 {
		t.Fatalf("pulled run's artifacts: %v, %+v", err, rv.Artifacts)
	}
	if code, got := httpGet(t, x2.URL+rv.Artifacts[0].URL); code != http.StatusOK || got != "the report\n" {
		t.Errorf("GET %s on the second machine = %d %q, want the report", rv.Artifacts[0].URL, code, got)
	}

	// Bad input.
	write("dotdot.yaml", "name: dotdot\nsteps:\n  - {id: box, type: deploy_sandbox, provider: process}\n  - {id: keep, type: collect_files, sandbox: box, paths: [../../etc/passwd]}\n")
	if r := c2.run(t.Context(), nil, "run", filepath.Join(dir, "dotdot.yaml")); r.code != 2 || !strings.Contains(r.stderr, "dotdot.yaml:4") || !strings.Contains(r.stderr, `paths[0]: "../../etc/passwd" leaves its folder`) {
		t.Errorf("run dotdot.yaml: exit %d, want 2 naming the file, line and field\n%s", r.code, r.stderr)
	}
	write("missing.yaml", "name: missing\nsteps:\n  - {id: box, type: deploy_sandbox, provider: process}\n  - {id: keep, type: collect_files, sandbox: box, paths: [nowhere.txt]}\n")
	if r := c2.run(t.Context(), nil, "run", filepath.Join(dir, "missing.yaml")); r.code == 0 || !strings.Contains(r.stdout+r.stderr, "paths[0]: nowhere.txt: no such file in the sandbox") {
		t.Errorf("run missing.yaml: exit %d, want a failed step naming the path\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := c2.run(t.Context(), nil, "runs", "push", "group-nosuch", ref, "--plain-http"); r.code != 2 || !strings.Contains(r.stderr, "no group group-nosuch") {
		t.Errorf("runs push of an unknown group: exit %d\n%s", r.code, r.stderr)
	}
	putRunningGroup(t, c2, "group-running")
	if r := c2.run(t.Context(), nil, "runs", "push", "group-running", ref, "--plain-http"); r.code != 2 || !strings.Contains(r.stderr, "is still running") {
		t.Errorf("runs push of a running group: exit %d\n%s", r.code, r.stderr)
	}
	taskRef := reg.Addr + "/team/notes-task:v1"
	c.push(t, "../../examples/notes-task", taskRef)
	if r := c2.run(t.Context(), nil, "runs", "pull", taskRef, "--plain-http"); r.code != 2 || !strings.Contains(r.stderr, "a bundle of kind task, not a run group") {
		t.Errorf("runs pull of a task bundle: exit %d\n%s", r.code, r.stderr)
	}
	c.noLiveRecords(t)
	c2.noLiveRecords(t)
}

// putRunningGroup writes a group document owned by this test process, so running and alive.
func putRunningGroup(t *testing.T, c *cli, id string) {
	t.Helper()
	l, err := ledger.Open(t.Context(), filepath.Join(c.state, "agentenv", "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	me, err := lifecycle.CurrentOwner()
	if err != nil {
		t.Fatal(err)
	}
	g := eval.Group{ID: id, Name: "live", Tasks: []eval.GroupTask{{Task: "hello", K: 1, Instances: 1}}, Status: agentenv.RunRunning, Owner: me, Created: time.Now()}
	if err := (eval.Store{Ledger: l}).Put(t.Context(), g); err != nil {
		t.Fatal(err)
	}
}

func mustGet(t *testing.T, u string) string {
	t.Helper()
	code, body := httpGet(t, u)
	if code != http.StatusOK {
		t.Fatalf("GET %s = %d\n%s", u, code, body)
	}
	return body
}

func keysOf(m map[string]string) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}
