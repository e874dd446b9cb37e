//go:build integration

package main_test

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent/model/modeltest"
	"github.com/agentenv/agentenv/internal/testproc"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
)

// harborImageMap maps the corpus's base images onto the local ones (no registry is reachable).
const harborImageMap = "AGENTENV_IMAGES_MAP=ubuntu:24.04=agentenv-debian:bookworm,postgres:16=agentenv-postgres:local"

// newHarborCLI is newCLI for Harbor tasks: base images mapped, and at its end every cached
// build it made removed with `images prune --all`, after which nothing labelled with any of
// its ledger's records may be left on the engine.
func newHarborCLI(t *testing.T) *cli {
	t.Helper()
	c := newCLI(t)
	// An allowlist task's egress proxy runs agentenv:dev, which is this checkout's runtime image.
	runtime, _ := dockertest.RuntimeImage(t)
	c.env = append(c.env, harborImageMap, "AGENTENV_IMAGES_RUNTIME="+runtime)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if r := c.run(ctx, nil, "images", "prune", "--all"); r.code != 0 {
			t.Errorf("images prune --all: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if ls := c.run(ctx, nil, "images", "ls", "--json"); strings.TrimSpace(ls.stdout) != "[]" {
			t.Errorf("images ls after prune --all: %s%s", ls.stdout, ls.stderr)
		}
		c.noRecordLeftovers(false)
	})
	return c
}

// records are the ids of every record of the test's ledger, gone ones too, with whether each
// is a live build image (the cache: left by design until pruned).
func (c *cli) records() (ids []string, cached map[string]bool) {
	c.t.Helper()
	ls := c.run(context.Background(), nil, "ledger", "ls", "--all", "--json")
	var recs []struct {
		ID, State, Role, Kind string
	}
	if err := json.Unmarshal([]byte(ls.stdout), &recs); err != nil {
		c.t.Fatalf("ledger ls --all --json: %v\n%s%s", err, ls.stdout, ls.stderr)
	}
	cached = map[string]bool{}
	for _, r := range recs {
		ids = append(ids, r.ID)
		if r.State == string(agentenv.StateLive) && r.Kind == string(agentenv.KindImage) && r.Role == string(agentenv.RoleBuild) {
			cached[r.ID] = true
		}
	}
	return ids, cached
}

// noRecordLeftovers fails if the engine has anything (a container, a network, a volume, an
// image, a dangling image or a build's intermediate container) labelled with a record of the
// test's ledger; with keepCache, live cached builds are allowed.
func (c *cli) noRecordLeftovers(keepCache bool) {
	c.t.Helper()
	ctx := context.Background()
	ids, cached := c.records()
	mine := map[string]bool{}
	for _, id := range ids {
		mine[id] = true
		if keepCache && cached[id] {
			continue
		}
		left, err := dockertest.Leftovers(ctx, c.dc, map[string]string{agentenv.LabelRecord: id})
		if err != nil {
			c.t.Fatal(err)
		}
		if len(left) > 0 {
			c.t.Errorf("record %s left %v", id, left)
		}
	}
	// Every image, intermediate ones included: a build cut short leaves nameless ones.
	imgs, err := c.dc.ImageList(ctx, client.ImageListOptions{All: true, Filters: make(client.Filters).Add("dangling", "true")})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, im := range imgs.Items {
		if id := im.Labels[agentenv.LabelRecord]; mine[id] && !(keepCache && cached[id]) {
			c.t.Errorf("dangling image %s of record %s is left", im.ID, id)
		}
	}
	cs, err := c.dc.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: make(client.Filters).Add("label", agentenv.LabelRecord)})
	if err != nil {
		c.t.Fatal(err)
	}
	for _, ct := range cs.Items {
		if mine[ct.Labels[agentenv.LabelRecord]] {
			c.t.Errorf("container %s of record %s is left (%s)", ct.ID[:12], ct.Labels[agentenv.LabelRecord], ct.State)
		}
	}
}

// harborTask copies testdata/harbor/NAME into a folder of the test, with @NONCE@ in its files
// replaced by the test's tag, so that the engine's layer cache of another test (or an earlier
// run) does not make its build instant.
func harborTask(t *testing.T, c *cli, name string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), name)
	if err := os.CopyFS(dst, os.DirFS(filepath.Join("testdata", "harbor", name))); err != nil {
		t.Fatal(err)
	}
	err := filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(p, []byte(strings.ReplaceAll(string(b), "@NONCE@", c.tag)), 0o755)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// runRecord is what `runs get RUN --json` says of a run: its steps' statuses and outputs.
type runRecord struct {
	Status string   `json:"status"`
	Score  *float64 `json:"score"`
	Steps  []struct {
		ID      string            `json:"id"`
		Status  string            `json:"status"`
		Error   string            `json:"error"`
		Outputs map[string]string `json:"outputs"`
	} `json:"steps"`
}

func (c *cli) getRun(id string) runRecord {
	c.t.Helper()
	r := c.run(context.Background(), nil, "runs", "get", id, "--json")
	var rr runRecord
	if err := json.Unmarshal([]byte(r.stdout), &rr); err != nil {
		c.t.Fatalf("runs get %s --json: %v\n%s%s", id, err, r.stdout, r.stderr)
	}
	return rr
}

// step returns the outputs and error of step id of rr, failing the test if it has none.
func (rr runRecord) step(t *testing.T, id string) (map[string]string, string) {
	t.Helper()
	for _, s := range rr.Steps {
		if s.ID == id {
			return s.Outputs, s.Error
		}
	}
	t.Fatalf("run has no step %s: %+v", id, rr.Steps)
	return nil, ""
}

// firstField is the first whitespace-separated word of text that starts with prefix.
func firstField(text, prefix string) string {
	for _, f := range strings.Fields(strings.NewReplacer(`"`, " ", ",", " ").Replace(text)) {
		if strings.HasPrefix(f, prefix) {
			return f
		}
	}
	return ""
}

// TestTasksCheckCorpus: the corpus checked as its author would: the
// three deliberately failing tasks fail with the right problem, every other passes with the
// oracle at 1 and nop at 0. A second run of one task reuses its cached build.
func TestTasksCheckCorpus(t *testing.T) {
	t.Parallel()
	c := newHarborCLI(t)
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	r := c.run(ctx, nil, "tasks", "check", "../../harbor/testdata/corpus", "--concurrency", "4", "--json")
	if r.code != 1 {
		t.Fatalf("tasks check: exit %d, want 1 (three tasks fail on purpose)\n%s%s", r.code, r.stdout, r.stderr)
	}
	var res struct {
		Group string `json:"group"`
		Rows  []struct {
			Task        string
			Oracle, Nop *float64
			Problem     string
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("tasks check --json: %v\n%s", err, r.stdout)
	}
	failing := map[string]string{
		"agent-timeout":      "oracle below 1 (failed): step agent: harness ran out of its wall time of 2s",
		"build-error":        "build error: build: build image",
		"verifier-no-reward": "verifier error: step verify: the tests wrote no reward",
	}
	seen := map[string]bool{}
	for _, row := range res.Rows {
		seen[row.Task] = true
		if want, ok := failing[row.Task]; ok {
			if !strings.HasPrefix(row.Problem, want) {
				t.Errorf("%s: problem %q, want it to start %q", row.Task, row.Problem, want)
			}
			continue
		}
		if row.Problem != "" || row.Oracle == nil || *row.Oracle != 1 || row.Nop == nil || *row.Nop != 0 {
			t.Errorf("%s: oracle %v, nop %v, problem %q; want ok with 1 and 0", row.Task, ptr(row.Oracle), ptr(row.Nop), row.Problem)
		}
	}
	if build := failing["build-error"]; !seen["build-error"] {
		t.Errorf("no row for build-error (%s)", build)
	}
	if len(res.Rows) != 23 || !seen["compose-postgres"] || !seen["compose-init"] || !seen["compose-volume"] || !seen["allowlist"] || !seen["multi-step-gate"] || !seen["mcp-http"] || !seen["phase-network"] {
		t.Errorf("%d rows (compose-postgres %v, compose-init %v, compose-volume %v, mcp-http %v, phase-network %v), want the corpus's 23 tasks", len(res.Rows), seen["compose-postgres"], seen["compose-init"], seen["compose-volume"], seen["mcp-http"], seen["phase-network"])
	}
	if !strings.Contains(r.stdout, "build-error/environment/Dockerfile") && !strings.Contains(r.stdout, "non-zero code") {
		t.Errorf("build-error's problem names neither the Dockerfile nor the failing step:\n%s", r.stdout)
	}

	// Again, one task: its build is the cache's.
	again := c.run(ctx, nil, "run", "../../harbor/testdata/corpus", "--include", "hello-file", "--json")
	run := firstField(again.stdout, "run-")
	if again.code != 0 || run == "" {
		t.Fatalf("run hello-file again: exit %d\n%s%s", again.code, again.stdout, again.stderr)
	}
	rr := c.getRun(run)
	out, _ := rr.step(t, "container")
	if out["built"] != "false" || !strings.HasPrefix(out["image"], "agentenv-image:img-") {
		t.Errorf("second run's container step outputs %v: want built false, the cached image", out)
	}
	// Its artifacts: the one it names that the container has, and what the tests left in
	// /logs/artifacts/; the one it lacks is listed as missing.
	arts, _ := rr.step(t, "artifacts")
	var got []string
	var listed []struct{ Name, File string }
	if err := json.Unmarshal([]byte(arts["artifacts"]), &listed); err != nil {
		t.Fatalf("artifacts step outputs %v: %v", arts, err)
	}
	for _, a := range listed {
		data, err := os.ReadFile(a.File)
		if err != nil {
			t.Errorf("artifact %s: %v", a.Name, err)
		}
		got = append(got, a.Name+"="+strings.Fields(string(data) + " _")[0])
	}
	if want := "artifacts/artifacts/logs/artifacts/checked.txt=checked artifacts/artifacts/app/hello.txt=hello,"; strings.Join(got, " ") != want || arts["missing"] != `["/app/nowhere"]` {
		t.Errorf("artifacts %q, missing %s; want %q and /app/nowhere", got, arts["missing"], want)
	}
	c.noRecordLeftovers(true)
}

func ptr(f *float64) any {
	if f == nil {
		return nil
	}
	return *f
}

// TestHarborIntegrity: a solution that cheats (looks for the tests, writes its own reward
// files, does not do the work) scores 0, and it did not find the tests during its phase.
func TestHarborIntegrity(t *testing.T) {
	t.Parallel()
	c := newHarborCLI(t)
	r := c.run(t.Context(), nil, "run", harborTask(t, c, "cheat"), "--json")
	run := firstField(r.stdout, "run-")
	if r.code != 1 || run == "" || !strings.Contains(r.stdout, `"score": 0`) {
		t.Fatalf("run cheat: exit %d, want 1 and score 0\n%s%s", r.code, r.stdout, r.stderr)
	}
	rr := c.getRun(run)
	if rr.Score == nil || *rr.Score != 0 {
		t.Errorf("run %s scored %v, want 0", run, ptr(rr.Score))
	}
	out, _ := rr.step(t, "verify")
	if !strings.Contains(out["stdout"], "evidence: tests: absent") {
		t.Errorf("the agent phase's evidence: %q; want /tests absent", out["stdout"])
	}
	if out["rewards"] != `{"reward":0}` {
		t.Errorf("rewards %s, want the tests' 0, not the agent's 1", out["rewards"])
	}
	c.noRunLeftovers(run + "\n")
}

// TestHarborModelAgent: the built-in model agent, against a scripted model, does hello-file's
// work with run_command and scores 1; the ATIF export holds the call.
func TestHarborModelAgent(t *testing.T) {
	t.Parallel()
	c := newHarborCLI(t)
	m := modeltest.New(t,
		modeltest.Reply{Calls: []modeltest.Call{{ID: "c1", Name: "run_command", Args: `{"command": "echo 'hello, harbor' > /app/hello.txt && cat /app/hello.txt"}`}}},
		modeltest.Reply{Text: "I wrote /app/hello.txt."},
	)
	env := []string{"AGENTENV_MODEL_BASE_URL=" + m.OpenAIURL(), "AGENTENV_MODEL_NAME=scripted", "AGENTENV_MODEL_API_KEY=test"}
	r := c.run(t.Context(), env, "run", "../../harbor/testdata/corpus", "--include", "hello-file", "--agent", "openai")
	if r.code != 0 || !strings.Contains(r.stdout, "mean score 1") {
		t.Fatalf("run hello-file --agent openai: exit %d (%d model requests)\n%s%s", r.code, len(m.Requests()), r.stdout, r.stderr)
	}
	if n := len(m.Requests()); n != 2 {
		t.Errorf("%d model requests, want 2 (the call, then the answer)", n)
	}
	group := firstField(r.stdout, "group-")
	ex := c.run(t.Context(), nil, "runs", "export", group, "--format", "atif")
	if ex.code != 0 || !strings.Contains(ex.stdout, `"run_command"`) || !strings.Contains(ex.stdout, "hello, harbor") {
		t.Errorf("runs export %s --format atif: exit %d; want the run_command call\n%s%s", group, ex.code, ex.stdout, ex.stderr)
	}
	c.noRunLeftovers(r.stdout)
}

// signalRun starts `agentenv run dir`, sends sig once stderr has shown line and after has
// passed, and returns the exit code (128+signal when killed by it) and the output.
func (c *cli) signalRun(dir, line string, after time.Duration, sig syscall.Signal) (int, string) {
	c.t.Helper()
	cmd := c.cmd(c.t.Context(), nil, "run", dir)
	var out, errb testproc.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for !strings.Contains(errb.String(), line) {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			c.t.Fatalf("never saw %q:\n%s%s", line, out.String(), errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(after)
	_ = cmd.Process.Signal(sig)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		err = <-done
		c.t.Errorf("agentenv run still running 2 minutes after %s", sig)
	}
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			code = 128 + int(ws.Signal())
		}
	}
	return code, out.String() + errb.String()
}

// TestHarborKilledThenGC: agentenv run SIGKILLed during the build, the agent phase and the
// verifier; after each, gc leaves nothing of the run, no container of the build and no
// dangling image of its records.
func TestHarborKilledThenGC(t *testing.T) {
	t.Parallel()
	c := newHarborCLI(t)
	// gc watches a dead creator's build for the build's own bound: slow-build's is 45 s.
	for _, tc := range []struct{ task, line string }{
		{"slow-build", "container (deploy_sandbox) running"},
		{"slow-agent", "agent (prompt_agent) running"},
		{"slow-verifier", "verify (reward) running"},
	} {
		code, out := c.signalRun(harborTask(t, c, tc.task), tc.line, 3*time.Second, syscall.SIGKILL)
		if code != 137 {
			t.Errorf("%s: exit %d after SIGKILL, want 137\n%s", tc.task, code, out)
		}
		c.gcUntilSettled(t)
		c.noRecordLeftovers(true)
		if run := firstField(out, "run-"); run != "" {
			c.noRunLeftovers(run + "\n")
		}
	}
	// slow-agent and slow-verifier share their environment/ (one digest): one build, reused.
	if _, cached := c.records(); len(cached) != 1 {
		t.Errorf("%d cached builds after the kills, want 1 (slow-agent's, reused by slow-verifier; slow-build's was cut)", len(cached))
	}
}

// TestHarborInterruptDuringBuild: Ctrl-C during a build exits 130 and leaves no container of
// the build and no dangling image; after gc, nothing at all.
func TestHarborInterruptDuringBuild(t *testing.T) {
	t.Parallel()
	c := newHarborCLI(t)
	start := time.Now()
	code, out := c.signalRun(harborTask(t, c, "slow-build"), "container (deploy_sandbox) running", 3*time.Second, syscall.SIGINT)
	if code != 130 {
		t.Errorf("exit %d after SIGINT, want 130\n%s", code, out)
	}
	t.Logf("SIGINT during the build: exit %d after %s", code, time.Since(start).Round(time.Millisecond))
	c.noRecordLeftovers(false)
	c.gcUntilSettled(t)
	c.noRecordLeftovers(false)
}

// TestHarborBadTasks: a typo'd key is a warning naming task.toml and its line, once, and the
// run goes on; a Dockerfile that fails to build is the episode's error naming the failing
// step, exit 1, nothing left.
func TestHarborBadTasks(t *testing.T) {
	t.Parallel()
	c := newHarborCLI(t)
	r := c.run(t.Context(), nil, "run", "testdata/harbor/typo-key")
	for _, w := range []string{
		`typo-key/task.toml:8: key environment.cpu: unknown key, ignored (did you mean "cpus"?)`,
		`typo-key/task.toml:11: key verifier.timout_sec: unknown key, ignored (did you mean "timeout_sec"?)`,
	} {
		if n := strings.Count(r.stderr, "warning: "); n != 2 || !strings.Contains(r.stderr, w) {
			t.Errorf("run typo-key: %d warnings, want 2, one naming %q:\n%s", n, w, r.stderr)
		}
	}
	if r.code != 0 || !strings.Contains(r.stdout, "mean score 1") {
		t.Errorf("run typo-key: exit %d, want 0 and score 1 (a warning does not stop it)\n%s%s", r.code, r.stdout, r.stderr)
	}
	ch := c.run(t.Context(), nil, "tasks", "check", "testdata/harbor/typo-key")
	if n := strings.Count(ch.stderr, "warning: "); ch.code != 0 || n != 2 {
		t.Errorf("tasks check typo-key: exit %d, %d warnings; want 0 and each warning once\n%s%s", ch.code, n, ch.stdout, ch.stderr)
	}

	bad := c.run(t.Context(), nil, "run", harborTask(t, c, "bad-dockerfile"), "--json")
	if bad.code != 1 || !strings.Contains(bad.stdout, `"outcome": "error"`) {
		t.Errorf("run bad-dockerfile: exit %d, want 1 and outcome error\n%s%s", bad.code, bad.stdout, bad.stderr)
	}
	run := firstField(bad.stdout, "run-")
	_, serr := c.getRun(run).step(t, "container")
	for _, want := range []string{"bad-dockerfile/environment/Dockerfile", "false-command-that-does-not-exist"} {
		if !strings.Contains(serr, want) {
			t.Errorf("the container step's error %q does not name %q", serr, want)
		}
	}
	c.noRecordLeftovers(true)
	c.noRunLeftovers(run + "\n")
}

// TestHarborMCPStdioModelAgent: the mcp-stdio corpus task's stdio server (vault, inside the
// task's container) is served behind the episode's gateway; the built-in model agent, driven by
// the scripted model, calls get_secret through it, reads the secret in the tool's answer and
// writes it with its own terminal tool: reward 1, and the call is in the gateway trajectory the
// episode kept.
func TestHarborMCPStdioModelAgent(t *testing.T) {
	t.Parallel()
	c := newHarborCLI(t)
	m := modeltest.New(t,
		modeltest.Reply{Calls: []modeltest.Call{{ID: "c1", Name: "get_secret", Args: `{}`}}},
		modeltest.Reply{Calls: []modeltest.Call{{ID: "c2", Name: "run_command", Args: `{"command": "echo tulip-42 > /app/secret.txt"}`}}},
		modeltest.Reply{Text: "I wrote the secret to /app/secret.txt."},
	)
	env := []string{"AGENTENV_MODEL_BASE_URL=" + m.OpenAIURL(), "AGENTENV_MODEL_NAME=scripted", "AGENTENV_MODEL_API_KEY=test"}
	rctx, rcancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer rcancel()
	r := c.run(rctx, env, "run", "../../harbor/testdata/corpus/mcp-stdio", "--agent", "openai")
	if r.code != 0 || !strings.Contains(r.stdout, "score 1") {
		t.Fatalf("run mcp-stdio --agent openai: exit %d (%d model requests)\n%s%s", r.code, len(m.Requests()), r.stdout, r.stderr)
	}
	reqs := m.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model requests, want 3 (get_secret, run_command, the answer)", len(reqs))
	}
	// The model was offered the vault's tool and its own terminal, and saw the secret come back.
	first, _ := json.Marshal(reqs[0].Body["tools"])
	for _, tool := range []string{`"get_secret"`, `"run_command"`} {
		if !strings.Contains(string(first), tool) {
			t.Errorf("the model was not offered %s: %s", tool, first)
		}
	}
	if second, _ := json.Marshal(reqs[1].Body["messages"]); !strings.Contains(string(second), "tulip-42") {
		t.Errorf("the get_secret answer did not reach the model: %s", second)
	}

	run := regexp.MustCompile(`run-[0-9A-Za-z_-]+`).FindString(r.stdout)
	g := c.run(t.Context(), nil, "runs", "get", run, "--json")
	if run == "" || g.code != 0 {
		t.Fatalf("runs get %q: exit %d\n%s%s", run, g.code, g.stdout, g.stderr)
	}
	var doc struct {
		Attrs map[string]string `json:"attrs"`
	}
	if err := json.Unmarshal([]byte(g.stdout), &doc); err != nil {
		t.Fatalf("runs get %s --json: %v\n%s", run, err, g.stdout)
	}
	data, err := os.ReadFile(doc.Attrs["gateway_trajectory.tools"])
	if err != nil {
		t.Fatalf("the tools step's gateway trajectory (attrs %v): %v", doc.Attrs, err)
	}
	if !strings.Contains(string(data), `"tool":"get_secret"`) || !strings.Contains(string(data), "tulip-42") {
		t.Errorf("the gateway trajectory lacks the get_secret call and its answer:\n%s", data)
	}
	c.noRunLeftovers(r.stdout)
}

// TestHarborMCPHTTPModelAgent: the mcp-http corpus task's servers run in its compose service
// mcp-server (Node, the official TypeScript SDK), codes over streamable HTTP and words over SSE;
// the service's port is published on 127.0.0.1 only and the episode's gateway reaches both
// there. The built-in model agent, driven by the scripted model, calls get_code and get_word
// through it and writes their answers with its own terminal tool: reward 1, and both calls are
// in the gateway trajectory the episode kept.
func TestHarborMCPHTTPModelAgent(t *testing.T) {
	t.Parallel()
	c := newHarborCLI(t)
	m := modeltest.New(t,
		modeltest.Reply{Calls: []modeltest.Call{{ID: "c1", Name: "get_code", Args: `{}`}, {ID: "c2", Name: "get_word", Args: `{}`}}},
		modeltest.Reply{Calls: []modeltest.Call{{ID: "c3", Name: "run_command", Args: `{"command": "echo otter-5150-lantern > /app/answer.txt"}`}}},
		modeltest.Reply{Text: "I wrote the code and the word to /app/answer.txt."},
	)
	env := []string{"AGENTENV_MODEL_BASE_URL=" + m.OpenAIURL(), "AGENTENV_MODEL_NAME=scripted", "AGENTENV_MODEL_API_KEY=test"}
	rctx, rcancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer rcancel()
	r := c.run(rctx, env, "run", "../../harbor/testdata/corpus/mcp-http", "--agent", "openai")
	if r.code != 0 || !strings.Contains(r.stdout, "score 1") {
		t.Fatalf("run mcp-http --agent openai: exit %d (%d model requests)\n%s%s", r.code, len(m.Requests()), r.stdout, r.stderr)
	}
	reqs := m.Requests()
	if len(reqs) != 3 {
		t.Fatalf("%d model requests, want 3 (the two tools, run_command, the answer)", len(reqs))
	}
	first, _ := json.Marshal(reqs[0].Body["tools"])
	for _, tool := range []string{`"get_code"`, `"get_word"`, `"run_command"`} {
		if !strings.Contains(string(first), tool) {
			t.Errorf("the model was not offered %s: %s", tool, first)
		}
	}
	second, _ := json.Marshal(reqs[1].Body["messages"])
	for _, answer := range []string{"otter-5150", "lantern"} {
		if !strings.Contains(string(second), answer) {
			t.Errorf("the answer %s did not reach the model: %s", answer, second)
		}
	}

	run := regexp.MustCompile(`run-[0-9A-Za-z_-]+`).FindString(r.stdout)
	g := c.run(t.Context(), nil, "runs", "get", run, "--json")
	if run == "" || g.code != 0 {
		t.Fatalf("runs get %q: exit %d\n%s%s", run, g.code, g.stdout, g.stderr)
	}
	var doc struct {
		Attrs map[string]string `json:"attrs"`
		Steps []struct {
			ID      string            `json:"id"`
			Outputs map[string]string `json:"outputs"`
		} `json:"steps"`
	}
	if err := json.Unmarshal([]byte(g.stdout), &doc); err != nil {
		t.Fatalf("runs get %s --json: %v\n%s", run, err, g.stdout)
	}
	data, err := os.ReadFile(doc.Attrs["gateway_trajectory.tools"])
	if err != nil {
		t.Fatalf("the tools step's gateway trajectory (attrs %v): %v", doc.Attrs, err)
	}
	for _, want := range []string{`"tool":"get_code"`, `"tool":"get_word"`, "otter-5150", "lantern"} {
		if !strings.Contains(string(data), want) {
			t.Errorf("the gateway trajectory lacks %s:\n%s", want, data)
		}
	}
	// The server's port was published on the loopback only.
	eps := "no step svc_mcp-server"
	for _, s := range doc.Steps {
		if s.ID == "svc_mcp-server" {
			eps = s.Outputs["endpoints"]
		}
	}
	if !strings.HasPrefix(eps, `{"8000":"127.0.0.1:`) {
		t.Errorf("mcp-server's endpoints: %s; want port 8000 on 127.0.0.1", eps)
	}
	c.noRunLeftovers(r.stdout)
}

// TestHarborOnDockerVM: on docker_vm, which builds no images on the host, a Harbor task's
// environment/Dockerfile is built inside its sandbox's own VM: the oracle passes, with no image
// record (no cache across VMs) and nothing of the run left; agentenv run SIGKILLed during such
// a build leaves the VM to its record, which gc removes.
func TestHarborOnDockerVM(t *testing.T) {
	t.Parallel()
	c := newHarborCLI(t)
	// A short create bound: should gc watch the killed create as in flight (for the bound plus
	// the task's build_timeout_sec), it stops within gcUntilSettled's passes.
	c.env = append(c.env, "AGENTENV_PROVIDER_DEFAULT=docker_vm", "AGENTENV_LIFECYCLE_CREATE_TIMEOUT=10s")
	start := time.Now()
	r := c.run(t.Context(), nil, "run", "../../harbor/testdata/corpus/hello-file", "--agent", "oracle")
	if r.code != 0 || !strings.Contains(r.stdout, "1 passed") {
		t.Fatalf("run hello-file on docker_vm: exit %d, want 0 and passed\n%s%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("hello-file on docker_vm passed in %s", time.Since(start).Round(time.Millisecond))
	c.noRunLeftovers(r.stdout)
	if _, cached := c.records(); len(cached) != 0 {
		t.Errorf("%d cached builds after a run on docker_vm, want none", len(cached))
	}

	code, out := c.signalRun(harborTask(t, c, "slow-build"), "container (deploy_sandbox) running", 8*time.Second, syscall.SIGKILL)
	if code != 137 {
		t.Errorf("exit %d after SIGKILL, want 137\n%s", code, out)
	}
	run := firstField(out, "run-")
	before, err := dockertest.Leftovers(t.Context(), c.dc, map[string]string{agentenv.LabelRun: run})
	if err != nil || len(before) == 0 {
		t.Errorf("run %s's objects after the kill: %v, %v; want its VM, left to gc", run, before, err)
	}
	t.Logf("left by the kill: %v; gc's first pass: %d creates in flight", before, c.gcUntilSettled(t))
	c.noRecordLeftovers(false)
}

// TestHarborAllowlist: the allowlist corpus task with its solution, as the test's server sees
// it: a testserver container on a network of the test's, named hello.allowed.test there, which
// the task's allowed_hosts ("*.allowed.test") let through. The server is beside the proxy only
// (the test joins the proxy's sandbox to its network once it runs, as an outside host would be
// on its route out), so test.sh reaches it through the proxy, by CONNECT and by an absolute
// URI, and not directly; it also checks that other hosts and IP literals are refused 403 and
// that nothing gets out without the proxy. Scored 1, and the proxy is a record of the run torn
// down with it.
func TestHarborAllowlist(t *testing.T) {
	t.Parallel()
	c := newHarborCLI(t)
	out, errb, joined := c.runBesideServer(t, "../../harbor/testdata/corpus/allowlist", "hello.allowed.test")
	rr := c.getRun(firstField(out, "run-"))
	proxy, _ := rr.step(t, "egress")
	runtime, _ := dockertest.RuntimeImage(t)
	if proxy["record"] != joined || proxy["image"] != runtime {
		t.Errorf("egress step outputs %v: want record %s, image %s (images.runtime)", proxy, joined, runtime)
	}
	if strings.Contains(errb, "cannot allow hosts") {
		t.Errorf("the run still warns that hosts are not allowed by name:\n%s", errb)
	}
}

// TestHarborPhaseNetwork: the phase-network corpus task (an environment "public", the agent's
// phase an allowlist of *.agent.test, the verifier's no network) with its solution, beside a
// server named hello.agent.test. In the agent's phase the solution reaches the server through
// the proxy and holds a tunnel to it open in the background, and other hosts are refused; in
// the verifier's phase test.sh finds every host refused and that tunnel closed. Scored 1, with
// each phase's switch a step of the run, done before its phase.
func TestHarborPhaseNetwork(t *testing.T) {
	t.Parallel()
	c := newHarborCLI(t)
	out, _, _ := c.runBesideServer(t, "../../harbor/testdata/corpus/phase-network", "hello.agent.test")
	rr := c.getRun(firstField(out, "run-"))
	for _, id := range []string{"network_agent", "network_verify"} {
		if out, errText := rr.step(t, id); errText != "" || out["exit_code"] != "0" {
			t.Errorf("step %s: exit %s, error %q; want it done", id, out["exit_code"], errText)
		}
	}
}

// runBesideServer runs the Harbor task dir with its solution while a testserver container
// named alias (on port 8080, answering "ok") stands on a network of the test's, which the
// run's egress proxy joins once it runs, as an outside host on its route out would be; the
// task sees AGENTENV_TEST_EGRESS_SERVER=ALIAS:8080. It fails the test unless the run exits 0
// with score 1, and returns its stdout (--json), its stderr and the proxy's record.
func (c *cli) runBesideServer(t *testing.T, dir, alias string) (stdout, stderr, proxy string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
	defer cancel()
	labels := map[string]string{"agentenv-test": c.tag}
	t.Cleanup(func() {
		if err := dockertest.Remove(context.Background(), c.dc, labels); err != nil {
			t.Errorf("remove the test's server and network: %v", err)
		}
	})
	netName := "agentenv-test-" + c.tag
	if _, err := c.dc.NetworkCreate(ctx, netName, client.NetworkCreateOptions{Labels: labels}); err != nil {
		t.Fatal(err)
	}
	_, err := c.dc.ContainerCreate(ctx, client.ContainerCreateOptions{
		Name:             netName + "-server",
		Config:           &container.Config{Image: c.image, Cmd: []string{"serve", ":8080"}, Labels: labels},
		HostConfig:       &container.HostConfig{NetworkMode: container.NetworkMode(netName)},
		NetworkingConfig: &network.NetworkingConfig{EndpointsConfig: map[string]*network.EndpointSettings{netName: {Aliases: []string{alias}}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.dc.ContainerStart(ctx, netName+"-server", client.ContainerStartOptions{}); err != nil {
		t.Fatal(err)
	}

	cmd := c.cmd(ctx, []string{"AGENTENV_TEST_EGRESS_SERVER=" + alias + ":8080"}, "run", dir, "--json")
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	// Join the run's proxy (a container of a record of this test's ledger, role task:egress)
	// to the server's network once it is there.
	var runErr error
	for done := false; !done; {
		select {
		case runErr = <-exited:
			done = true
		case <-time.After(500 * time.Millisecond):
		}
		if proxy != "" || done {
			continue
		}
		ids, _ := c.records()
		cs, err := c.dc.ContainerList(ctx, client.ContainerListOptions{Filters: make(client.Filters).Add("label", agentenv.LabelRole+"=task:egress")})
		if err != nil {
			t.Fatal(err)
		}
		for _, ct := range cs.Items {
			if slices.Contains(ids, ct.Labels[agentenv.LabelRecord]) {
				if _, err := c.dc.NetworkConnect(ctx, netName, client.NetworkConnectOptions{Container: ct.ID}); err != nil {
					t.Fatalf("join the proxy to the server's network: %v", err)
				}
				proxy = ct.Labels[agentenv.LabelRecord]
			}
		}
	}
	if proxy == "" {
		t.Errorf("the run's proxy was never seen running")
	}
	if runErr != nil || firstField(out.String(), "run-") == "" || !strings.Contains(out.String(), `"score": 1`) {
		t.Fatalf("run %s: %v, want exit 0 and score 1\n%s%s", dir, runErr, out.String(), errb.String())
	}
	return out.String(), errb.String(), proxy
}
