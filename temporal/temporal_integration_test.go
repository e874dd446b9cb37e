//go:build integration

package temporal_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/config"
	"github.com/agentenv/agentenv/eval"
	"github.com/agentenv/agentenv/internal/registryserver"
	"github.com/agentenv/agentenv/internal/temporalserver"
	"github.com/agentenv/agentenv/internal/testbin"
	"github.com/agentenv/agentenv/internal/testproc"
	"github.com/agentenv/agentenv/ledger"
	"github.com/agentenv/agentenv/ledger/postgres/pgtest"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/task"
)

// rig is one test's Temporal server, task queue of its own, PostgreSQL ledger schema of its
// own, and the agentenv binary under test, run as workers and submitters would be.
type rig struct {
	t     testing.TB
	bin   string
	addr  string
	queue string
	dsn   string
	dir   string
	led   agentenv.Ledger
}

func newRig(t testing.TB) *rig {
	t.Helper()
	r := &rig{t: t, bin: testbin.Agentenv(t), addr: temporalserver.Addr(t), dir: t.TempDir(),
		queue: fmt.Sprintf("agentenv-test-%x", rand.Uint64())}
	r.dsn = pgtest.Schema(t, "ledger_temporal")
	led, err := ledger.Open(t.Context(), r.dsn, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("open the test ledger: %v", err)
	}
	t.Cleanup(func() { led.Close() })
	r.led = led
	dc := dockertest.Require(t)
	t.Cleanup(func() {
		// Whatever a failing test left, gc collects; then nothing the ledger names may remain.
		r.run(context.Background(), "gc")
		recs, err := r.led.List(context.Background(), agentenv.Filter{})
		if err != nil {
			t.Errorf("list records: %v", err)
			return
		}
		for _, rec := range recs {
			left, err := dockertest.Leftovers(context.Background(), dc, map[string]string{agentenv.LabelRecord: rec.ID})
			if err != nil {
				t.Errorf("leftovers of %s: %v", rec.ID, err)
			}
			if len(left) > 0 {
				t.Errorf("record %s (%s) left %v on the engine", rec.ID, rec.State, left)
				_ = dockertest.Remove(context.Background(), dc, map[string]string{agentenv.LabelRecord: rec.ID})
			}
		}
	})
	return r
}

// cmd returns the agentenv command with args for a machine whose state folder is state (the
// rig's own if empty), sharing the rig's ledger, server and queue. When ctx ends it is
// interrupted as a user would, and killed a minute and a half later if still running.
func (r *rig) cmd(ctx context.Context, state string, args ...string) *exec.Cmd {
	if state == "" {
		state = filepath.Join(r.dir, "machine")
	}
	cmd := exec.CommandContext(ctx, r.bin, args...)
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 90 * time.Second
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+state, "HOME="+state, "AGENTENV_CONFIG=",
		"AGENTENV_LEDGER_DSN="+r.dsn, "AGENTENV_RUNNER_TEMPORAL="+r.addr, "AGENTENV_RUNNER_TASK_QUEUE="+r.queue)
	return cmd
}

type result struct {
	code           int
	stdout, stderr string
}

// run runs agentenv with args to its end (bounded by ctx, or 3 minutes).
func (r *rig) run(ctx context.Context, args ...string) result {
	r.t.Helper()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 3*time.Minute)
		defer cancel()
	}
	cmd := r.cmd(ctx, "", args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	res := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		res.code = ee.ExitCode()
	} else if err != nil {
		r.t.Fatalf("agentenv %v: %v", args, err)
	}
	return res
}

// worker is one `agentenv worker` process. Every worker of a rig shares one state folder, as
// processes of one machine do: the process provider's sandboxes are folders of that machine,
// which a worker elsewhere could not remove (Docker's and the ledger's are shared).
type worker struct {
	name string
	cmd  *exec.Cmd
	log  *testproc.Buffer
	done chan error
}

// startWorker starts a worker with slots episodes at once; it is stopped (SIGTERM) when the
// test ends if still running.
func (r *rig) startWorker(name string, slots int) *worker {
	r.t.Helper()
	w := &worker{name: name, log: &testproc.Buffer{}, done: make(chan error, 1)}
	w.cmd = r.cmd(context.Background(), filepath.Join(r.dir, "machine"), "worker", "--slots", strconv.Itoa(slots))
	w.cmd.Stdout, w.cmd.Stderr = w.log, w.log
	if err := w.cmd.Start(); err != nil {
		r.t.Fatalf("start worker %s: %v", name, err)
	}
	go func() { w.done <- w.cmd.Wait() }()
	r.t.Cleanup(func() {
		if w.cmd.ProcessState == nil {
			w.stop(r.t)
		}
		if r.t.Failed() {
			r.t.Logf("worker %s log:\n%s", name, w.log.String())
		}
	})
	return w
}

// stop stops w as Ctrl-C would and waits (bounded) for it to exit.
func (w *worker) stop(t testing.TB) {
	t.Helper()
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-w.done:
	case <-time.After(6 * time.Minute):
		_ = w.cmd.Process.Kill()
		<-w.done
		t.Errorf("worker %s did not stop within 6 minutes of SIGTERM", w.name)
	}
}

// killBusy kills (SIGKILL) the first of workers seen owning a record that is not gone, that is
// one in the middle of an episode, and returns it; nil if none was seen before ctx ended. A
// worker between episodes would lose nothing, and the test would prove nothing.
func (r *rig) killBusy(ctx context.Context, workers []*worker, start time.Time) *worker {
	for ctx.Err() == nil {
		recs, _ := r.led.List(ctx, agentenv.Filter{States: agentenv.NotGone()})
		for _, rec := range recs {
			for _, w := range workers {
				if rec.Owner.PID != w.cmd.Process.Pid {
					continue
				}
				if err := w.cmd.Process.Kill(); err != nil {
					r.t.Logf("kill worker %s: %v", w.name, err)
					return nil
				}
				<-w.done
				r.t.Logf("killed worker %s, owner of %s (%s, run %s), %s in", w.name, rec.ID, rec.Kind, rec.Run, time.Since(start).Round(time.Second))
				return w
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	return nil
}

// writeEval writes an eval of the given tasks (path or built-in name, k) at concurrency conc.
func (r *rig) writeEval(name string, conc int, tasks map[string]int) string {
	r.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "name: %s\nconcurrency: %d\ntasks:\n", name, conc)
	for _, tk := range slices.Sorted(maps.Keys(tasks)) {
		fmt.Fprintf(&b, "  - task: %s\n    k: %d\n", tk, tasks[tk])
	}
	p := filepath.Join(r.dir, name+".yaml")
	if err := os.WriteFile(p, []byte(b.String()), 0o600); err != nil {
		r.t.Fatal(err)
	}
	return p
}

// slowTask writes a task that holds a process sandbox for secs seconds, then passes.
func (r *rig) slowTask(secs int) string {
	r.t.Helper()
	src := fmt.Sprintf(`name: slow
steps:
  - id: box
    type: deploy_sandbox
    provider: process
  - id: pause
    type: exec
    sandbox: box
    command: [sleep, "%d"]
  - id: check
    type: command_succeeds
    depends_on: [pause]
    sandbox: box
    command: [echo, slow]
    stdout_contains: slow
`, secs)
	p := filepath.Join(r.dir, "slow.yaml")
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		r.t.Fatal(err)
	}
	return p
}

// groupJSON is the part of `agentenv runs get GROUP --json` the tests read.
type groupJSON struct {
	Group    string       `json:"group"`
	Status   string       `json:"status"`
	Totals   task.Summary `json:"totals"`
	Episodes []struct {
		Run     string       `json:"run"`
		Outcome task.Outcome `json:"outcome"`
	} `json:"episodes"`
	NotRun int `json:"not_run"`
}

func (r *rig) group(id string) groupJSON {
	r.t.Helper()
	res := r.run(r.t.Context(), "runs", "get", id, "--json")
	var g groupJSON
	if err := json.Unmarshal([]byte(res.stdout), &g); err != nil {
		r.t.Fatalf("runs get %s: %v (exit %d)\n%s%s", id, err, res.code, res.stdout, res.stderr)
	}
	return g
}

// waitGroup waits (bounded by d) until group id is no longer running, and returns it.
func (r *rig) waitGroup(id string, d time.Duration) groupJSON {
	r.t.Helper()
	deadline := time.Now().Add(d)
	for {
		g := r.group(id)
		if g.Status != string(agentenv.RunRunning) {
			return g
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("group %s still running after %s: %+v", id, d, g.Totals)
		}
		time.Sleep(time.Second)
	}
}

// checkOneResultPerSlot checks that every slot of group id has exactly one episode that is
// not replaced, that it passed, and that every replaced episode names the group and ended.
// It returns how many attempts lost with a worker the slots' run documents record.
func (r *rig) checkOneResultPerSlot(id string, slots int) (lost int) {
	r.t.Helper()
	st := eval.Store{Ledger: r.led}
	g, err := st.Get(r.t.Context(), id)
	if err != nil {
		r.t.Fatal(err)
	}
	runs, err := st.Episodes(r.t.Context(), g)
	if err != nil {
		r.t.Fatal(err)
	}
	current := map[string]int{}
	for _, run := range runs {
		if run.Status == agentenv.RunRunning {
			r.t.Errorf("run %s still running after its group ended", run.ID)
		}
		if run.Attrs[eval.AttrResumedBy] != "" {
			continue
		}
		key := run.Attrs[eval.AttrGroupTask] + "/" + run.Attrs[eval.AttrInstance] + "/" + run.Attrs[eval.AttrAttempt]
		current[key]++
		if task.OutcomeOf(run) != task.OutcomePassed {
			r.t.Errorf("run %s (slot %s): outcome %s, error %q", run.ID, key, task.OutcomeOf(run), run.Error)
		}
		for _, a := range run.Attempts {
			if strings.Contains(a.Error, "worker was lost") {
				lost++
				if a.Receipt == nil || !a.Receipt.Clean() {
					r.t.Errorf("run %s: the lost attempt's teardown is not clean: %+v", run.ID, a.Receipt)
				}
			}
		}
	}
	if len(current) != slots {
		r.t.Errorf("group %s: %d slots have an episode, want %d", id, len(current), slots)
	}
	for k, n := range current {
		if n != 1 {
			r.t.Errorf("group %s: slot %s has %d scored episodes, want 1", id, k, n)
		}
	}
	return lost
}

// checkNothingLive checks that the ledger holds no record that is not gone.
func (r *rig) checkNothingLive() {
	r.t.Helper()
	recs, err := r.led.List(r.t.Context(), agentenv.Filter{})
	if err != nil {
		r.t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.State != agentenv.StateGone {
			r.t.Errorf("record %s (%s %s, run %s) is %s", rec.ID, rec.Provider, rec.Kind, rec.Run, rec.State)
		}
	}
}

var progressLine = regexp.MustCompile(`(group-[0-9a-f]+)\s+(\d+)/(\d+) done`)

// TestTemporalThreeWorkersKilledOne runs an eval of 40 episodes (the notes task on Docker,
// hello and a slow task on the process provider) on three workers through `run --runner
// temporal`. Once ten episodes are done it kills with SIGKILL the first worker seen in the
// middle of an episode, and checks that every slot ends with exactly one passed episode (the
// lost ones torn down, with a clean receipt, and kept as attempts), that the summary is the
// local runner's for the same eval (all 40 passed, pass@k 1), and that after one gc nothing is
// live in the ledger or labelled on the engine.
func TestTemporalThreeWorkersKilledOne(t *testing.T) {
	r := newRig(t)
	if res := r.run(t.Context(), "images", "build"); res.code != 0 {
		t.Fatalf("images build: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	notes, _ := filepath.Abs("../examples/notes-task/task.yaml")
	hello, _ := filepath.Abs("../examples/hello/task.yaml")
	evalFile := r.writeEval("forty", 6, map[string]int{notes: 12, hello: 14, r.slowTask(4): 14})
	workers := []*worker{r.startWorker("w1", 2), r.startWorker("w2", 2), r.startWorker("w3", 2)}

	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Minute)
	defer cancel()
	// --retries as a sweep on a loaded machine has it: a deploy that times out is the
	// infrastructure's, run again, never scored (and it reaches the workers through the group).
	sub := r.cmd(ctx, "", "run", evalFile, "--runner", "temporal", "--retries", "2")
	var out bytes.Buffer
	sub.Stdout = &out
	stderr, err := sub.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	var group string
	var subErr bytes.Buffer
	killing := false
	killed := make(chan *worker, 1)
	killCtx, stopKilling := context.WithCancel(ctx)
	defer stopKilling()
	sc := bufio.NewScanner(stderr)
	for sc.Scan() {
		line := sc.Text()
		subErr.WriteString(line + "\n")
		m := progressLine.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		group = m[1]
		if done, _ := strconv.Atoi(m[2]); done >= 10 && !killing {
			killing = true
			go func() { killed <- r.killBusy(killCtx, workers, start) }()
		}
	}
	werr := sub.Wait()
	stopKilling()
	var victim *worker
	if killing {
		victim = <-killed
	}
	if victim == nil || group == "" {
		t.Fatalf("the run ended before a busy worker was killed (err %v):\n%s%s", werr, out.String(), subErr.String())
	}
	if werr != nil {
		t.Fatalf("run --runner temporal: %v\n%s%s", werr, out.String(), subErr.String())
	}
	t.Logf("40 episodes on 3 workers (one killed): %s", time.Since(start).Round(time.Second))

	g := r.group(group)
	if g.Status != "completed" || g.Totals.Passed != 40 || g.Totals.Errors+g.Totals.Cancelled+g.Totals.Failed != 0 || g.Totals.PassAt["1"] != 1 {
		t.Errorf("group %s: status %s, totals %+v; want completed, 40 passed, pass@1 1 (as the local runner scores this eval)\n%s", group, g.Status, g.Totals, out.String())
	}
	if !strings.Contains(out.String(), group) {
		t.Errorf("the submitter's summary does not name the group:\n%s", out.String())
	}
	if lost := r.checkOneResultPerSlot(group, 40); lost == 0 {
		t.Errorf("no slot records an attempt lost with worker %s, killed while it owned a live record", victim.name)
	}
	if res := r.run(t.Context(), "gc"); res.code != 0 {
		t.Errorf("gc: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	r.checkNothingLive()
}

// TestTemporalQueueLateWorkerRestartAndCancel: a group submitted with --detach while no worker
// runs waits in the queue and completes once a worker starts; a group whose every worker stops
// (SIGTERM, its episodes torn down) completes, one result per slot, once a worker starts again;
// Ctrl-C on a following submitter cancels its group, tears down its episodes and leaves nothing.
func TestTemporalQueueLateWorkerRestartAndCancel(t *testing.T) {
	r := newRig(t)
	slow := r.slowTask(3)

	// Submitted with no worker: queued; a worker started later runs it.
	res := r.run(t.Context(), "run", "hello", "--k", "4", "--runner", "temporal", "--detach")
	m := regexp.MustCompile(`group (group-[0-9a-f]+)`).FindStringSubmatch(res.stdout)
	if res.code != 0 || m == nil {
		t.Fatalf("run --detach: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	queued := m[1]
	time.Sleep(2 * time.Second)
	if g := r.group(queued); g.Status != "running" || len(g.Episodes) != 4 || g.Episodes[0].Run != "" {
		t.Errorf("group %s with no worker: %+v, want running with no episode started", queued, g)
	}
	w := r.startWorker("late", 2)
	if g := r.waitGroup(queued, 3*time.Minute); g.Status != "completed" || g.Totals.Passed != 4 {
		t.Errorf("group %s after a worker started: status %s, %+v", queued, g.Status, g.Totals)
	}

	// Every worker stops in the middle; one started again finishes the group.
	evalFile := r.writeEval("restart", 2, map[string]int{slow: 6})
	res = r.run(t.Context(), "run", evalFile, "--runner", "temporal", "--detach")
	m = regexp.MustCompile(`group (group-[0-9a-f]+)`).FindStringSubmatch(res.stdout)
	if res.code != 0 || m == nil {
		t.Fatalf("run --detach: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	restarted := m[1]
	deadline := time.Now().Add(2 * time.Minute)
	for r.group(restarted).Totals.Passed < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("group %s: fewer than 2 episodes passed in 2 minutes", restarted)
		}
		time.Sleep(500 * time.Millisecond)
	}
	w.stop(t)
	if g := r.group(restarted); g.Status != "running" {
		t.Fatalf("group %s after its only worker stopped: %s, want still running", restarted, g.Status)
	}
	r.checkNothingLive() // the stopped worker tore its episodes down
	r.startWorker("again", 2)
	if g := r.waitGroup(restarted, 3*time.Minute); g.Status != "completed" || g.Totals.Passed != 6 {
		t.Errorf("group %s after a worker started again: status %s, %+v", restarted, g.Status, g.Totals)
	}
	r.checkOneResultPerSlot(restarted, 6)

	// Ctrl-C on the submitter: the group is cancelled, its episodes torn down.
	evalFile = r.writeEval("cancelled", 2, map[string]int{slow: 6})
	sub := r.cmd(t.Context(), "", "run", evalFile, "--runner", "temporal")
	var out testproc.Buffer
	sub.Stdout, sub.Stderr = &out, &out
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	var cancelled string
	deadline = time.Now().Add(2 * time.Minute)
	for cancelled == "" {
		if m := regexp.MustCompile(`(group-[0-9a-f]+)\s+\d+/\d+ done\s+[1-9]\d* running`).FindStringSubmatch(out.String()); m != nil {
			cancelled = m[1]
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no episode ran within 2 minutes:\n%s", out.String())
		}
		time.Sleep(200 * time.Millisecond)
	}
	_ = sub.Process.Signal(os.Interrupt)
	err := sub.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 130 {
		t.Errorf("submitter after Ctrl-C: %v, want exit 130\n%s", err, out.String())
	}
	g := r.group(cancelled)
	if g.Status != "cancelled" || g.Totals.Passed == 6 {
		t.Errorf("group %s after Ctrl-C: status %s, %+v; want cancelled before its end", cancelled, g.Status, g.Totals)
	}
	r.checkNothingLive()
}

// TestTemporalRunByReference: a task pushed to a registry is submitted by reference, and the
// submitter's bundle cache removed before a worker (with a cache of its own) starts. The worker
// pulls the bundle by the digest the group records and runs the same bytes; the group names
// the reference and its digest.
func TestTemporalRunByReference(t *testing.T) {
	r := newRig(t)
	reg := registryserver.Start(t, registryserver.Options{})
	t.Setenv(config.EnvName("registry.plain_http"), reg.Addr) // for the worker and the submitter
	hello, _ := filepath.Abs("../examples/hello/task.yaml")
	ref := reg.Addr + "/tasks/hello:v1"
	submitter := filepath.Join(r.dir, "submitter") // a state folder, and a cache, of its own
	run := func(args ...string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
		defer cancel()
		out, err := r.cmd(ctx, submitter, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("agentenv %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	pushed := run("push", hello, ref)
	out := run("run", ref, "--k", "3", "--runner", "temporal", "--detach")
	m := regexp.MustCompile(`group-[0-9a-f]+`).FindString(out)
	if m == "" {
		t.Fatalf("run by reference names no group:\n%s", out)
	}
	// The submitter's copy is gone before any worker starts: the worker can only read the
	// bundle it pulls itself.
	if err := os.RemoveAll(filepath.Join(submitter, ".cache")); err != nil {
		t.Fatal(err)
	}
	r.startWorker("w", 2)
	if g := r.waitGroup(m, 3*time.Minute); g.Status != "completed" || g.Totals.Passed != 3 {
		t.Errorf("group %s: status %s, %+v; want completed, 3 passed", m, g.Status, g.Totals)
	}
	var doc struct {
		Bundle       string `json:"bundle"`
		BundleDigest string `json:"bundle_digest"`
	}
	if err := json.Unmarshal([]byte(r.run(t.Context(), "runs", "get", m, "--json").stdout), &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Bundle != ref || doc.BundleDigest == "" || !strings.Contains(pushed, doc.BundleDigest) {
		t.Errorf("group records bundle %q at %q; want %s at the pushed digest (push said %q)", doc.Bundle, doc.BundleDigest, ref, pushed)
	}
	trees, _ := filepath.Glob(filepath.Join(r.dir, "machine", ".cache", "agentenv", "bundles", "trees", "sha256-*"))
	if len(trees) != 1 {
		t.Errorf("the worker's cache holds %v, want the one bundle it pulled", trees)
	}
	r.checkNothingLive()
}

// TestTemporalBadInput: --runner temporal with no server, with a file ledger and with an
// unknown namespace is refused with an error naming the address, the setting or the namespace,
// and nothing is run.
func TestTemporalBadInput(t *testing.T) {
	r := newRig(t)
	for _, c := range []struct {
		args []string
		env  []string
		code int
		want []string
	}{
		{[]string{"run", "hello", "--runner", "temporal", "--temporal", "127.0.0.1:1"}, nil, 1, []string{"127.0.0.1:1", "runner.temporal"}},
		{[]string{"run", "hello", "--runner", "temporal", "--ledger", filepath.Join(r.dir, "l.bolt")}, nil, 2, []string{"PostgreSQL ledger", "ledger.dsn"}},
		{[]string{"run", "hello", "--runner", "temporal", "--namespace", "no-such-namespace"}, nil, 2, []string{`no namespace "no-such-namespace"`, "runner.namespace"}},
		{[]string{"run", "hello", "--runner", "elsewhere"}, nil, 2, []string{"runner.backend", "local or temporal"}},
		{[]string{"run", "hello", "--detach"}, nil, 2, []string{"--detach is for --runner temporal"}},
		{[]string{"run", "hello", "--runner", "temporal", "--keep"}, nil, 2, []string{"--keep with --runner temporal"}},
		{[]string{"worker", "--namespace", "no-such-namespace"}, nil, 2, []string{`no namespace "no-such-namespace"`}},
		{[]string{"worker", "--slots", "-1"}, nil, 2, []string{"--slots -1"}},
	} {
		res := r.run(t.Context(), c.args...)
		ok := res.code == c.code
		for _, w := range c.want {
			ok = ok && strings.Contains(res.stderr, w)
		}
		if !ok {
			t.Errorf("agentenv %v: exit %d, want %d saying %q\n%s%s", c.args, res.code, c.code, c.want, res.stdout, res.stderr)
		}
	}
	if groups, err := (eval.Store{Ledger: r.led}).List(t.Context(), 0); err != nil || len(groups) != 0 {
		t.Errorf("refused runs wrote groups: %v %v", groups, err)
	}
}

// ui is one `agentenv ui` process of a rig, with runner.backend temporal.
type ui struct {
	url    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// startUI starts `agentenv ui` on a free loopback port with runner.backend temporal; it is
// killed when the test ends if still running.
func (r *rig) startUI() *ui {
	r.t.Helper()
	u := &ui{cmd: r.cmd(context.Background(), "", "ui", "--listen", "127.0.0.1:0"), exited: make(chan struct{})}
	u.cmd.Env = append(u.cmd.Env, "AGENTENV_RUNNER_BACKEND=temporal")
	out, err := u.cmd.StdoutPipe()
	if err != nil {
		r.t.Fatal(err)
	}
	var log testproc.Buffer
	u.cmd.Stderr = &log
	if err := u.cmd.Start(); err != nil {
		r.t.Fatal(err)
	}
	base := make(chan string, 1)
	go func() {
		defer close(u.exited)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "explorer: "); ok {
				select {
				case base <- strings.TrimSuffix(l, "/"):
				default:
				}
			}
		}
		_ = u.cmd.Wait()
	}()
	r.t.Cleanup(func() {
		_ = u.cmd.Process.Kill()
		<-u.exited
		if r.t.Failed() {
			r.t.Logf("ui log:\n%s", log.String())
		}
	})
	select {
	case u.url = <-base:
	case <-time.After(30 * time.Second):
		r.t.Fatal("agentenv ui printed no URL within 30 s")
	}
	return u
}

// post sends body to the explorer's API at path as its pages do (same origin, with the
// session's CSRF token) and returns the status and the answer.
func (u *ui) post(t testing.TB, path, body string) (int, []byte) {
	t.Helper()
	var session struct {
		CSRF       string `json:"csrf"`
		CSRFHeader string `json:"csrf_header"`
	}
	resp, err := http.Get(u.url + "/api/v1/session")
	if err != nil {
		t.Fatal(err)
	}
	err = json.NewDecoder(resp.Body).Decode(&session)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("GET /api/v1/session: %v", err)
	}
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodPost, u.url+path, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Sec-Fetch-Site", "same-origin")
	req.Header.Set(session.CSRFHeader, session.CSRF)
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// start starts task (k episodes) from the explorer and returns the group it answers.
func (u *ui) start(t testing.TB, task string, k int) string {
	t.Helper()
	code, body := u.post(t, "/api/v1/runs", fmt.Sprintf(`{"task": %q, "k": %d}`, task, k))
	var started struct{ Group, URL string }
	if code != http.StatusOK || json.Unmarshal(body, &started) != nil || !strings.HasPrefix(started.Group, "group-") {
		t.Fatalf("POST /api/v1/runs = %d %s, want the group it handed to the workers", code, body)
	}
	return started.Group
}

// page returns the explorer's page of group id.
func (u *ui) page(t testing.TB, id string) string {
	t.Helper()
	resp, err := http.Get(u.url + "/groups/" + id)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /groups/%s = %s", id, resp.Status)
	}
	return string(b)
}

// TestTemporalUIStartOutlivesTheUI: with runner.backend temporal, the explorer's start button
// (its POST /api/v1/runs, as the page sends it) hands the group to the workers. The `ui`
// process is then killed (SIGKILL) before any worker runs: a worker started afterwards runs the
// group to its end, which `runs ls --group` shows, with nothing left live.
func TestTemporalUIStartOutlivesTheUI(t *testing.T) {
	r := newRig(t)
	u := r.startUI()
	group := u.start(t, "hello", 3)
	if page := u.page(t, group); !strings.Contains(page, "Runs on temporal workers") || !strings.Contains(page, "/api/v1/groups/"+group+"/cancel") {
		t.Errorf("the page of group %s says no workers run it, or offers no cancel:\n%s", group, page)
	}

	// No worker has run anything yet; the explorer goes away as a lost machine would.
	if err := u.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-u.exited
	if g := r.group(group); g.Status != "running" || g.Totals.Passed != 0 {
		t.Fatalf("group %s before any worker: status %s, %+v; want running, none passed", group, g.Status, g.Totals)
	}
	r.startWorker("after-ui", 2)
	if g := r.waitGroup(group, 3*time.Minute); g.Status != "completed" || g.Totals.Passed != 3 {
		t.Errorf("group %s after the ui was killed and a worker started: status %s, %+v; want completed, 3 passed", group, g.Status, g.Totals)
	}
	ls := r.run(t.Context(), "runs", "ls", "--group")
	if ls.code != 0 || !strings.Contains(ls.stdout, group) {
		t.Errorf("runs ls --group: exit %d, want %s listed\n%s%s", ls.code, group, ls.stdout, ls.stderr)
	}
	r.checkOneResultPerSlot(group, 3)
	r.checkNothingLive()
}

// TestTemporalCancel: a group on the workers is cancelled from the explorer's cancel button
// (a group it started), and with `runs cancel` (a group submitted with --detach): each returns
// once the workers have torn its episodes down and written it cancelled, with nothing live. A
// second cancel finds the group ended and leaves it; an unknown group is bad input.
func TestTemporalCancel(t *testing.T) {
	r := newRig(t)
	slow := r.slowTask(60)
	r.startWorker("w", 2)
	// waitEpisode waits until an episode of group id holds a sandbox.
	waitEpisode := func(id string) {
		t.Helper()
		for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(200 * time.Millisecond) {
			recs, err := r.led.List(t.Context(), agentenv.Filter{States: agentenv.NotGone()})
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range r.group(id).Episodes {
				if e.Run != "" && slices.ContainsFunc(recs, func(rec agentenv.Record) bool { return rec.Run == e.Run }) {
					return
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("no episode of group %s holds a sandbox after 2 minutes", id)
			}
		}
	}

	u := r.startUI()
	fromUI := u.start(t, slow, 4)
	waitEpisode(fromUI)
	if code, body := u.post(t, "/api/v1/groups/"+fromUI+"/cancel", ""); code != http.StatusOK {
		t.Errorf("cancel from the explorer = %d %s", code, body)
	}
	if g := r.group(fromUI); g.Status != "cancelled" {
		t.Errorf("group %s after the explorer's cancel returned: %s, %+v; want cancelled", fromUI, g.Status, g.Totals)
	}
	r.checkNothingLive()

	res := r.run(t.Context(), "run", slow, "--k", "4", "--runner", "temporal", "--detach")
	detached := regexp.MustCompile(`group-[0-9a-f]+`).FindString(res.stdout)
	if res.code != 0 || detached == "" {
		t.Fatalf("run --detach: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	waitEpisode(detached)
	if res := r.run(t.Context(), "runs", "cancel", detached, "--runner", "temporal"); res.code != 0 || !strings.Contains(res.stdout, detached+" cancelled") {
		t.Errorf("runs cancel %s: exit %d\n%s%s", detached, res.code, res.stdout, res.stderr)
	}
	if g := r.group(detached); g.Status != "cancelled" {
		t.Errorf("group %s after runs cancel returned: %s, %+v; want cancelled", detached, g.Status, g.Totals)
	}
	r.checkNothingLive()

	if res := r.run(t.Context(), "runs", "cancel", detached, "--runner", "temporal"); res.code != 0 || !strings.Contains(res.stdout, "had ended (cancelled)") {
		t.Errorf("runs cancel of a cancelled group: exit %d\n%s%s", res.code, res.stdout, res.stderr)
	}
	if res := r.run(t.Context(), "runs", "cancel", "group-000000000000", "--runner", "temporal"); res.code != 2 || !strings.Contains(res.stderr, "no group group-000000000000") {
		t.Errorf("runs cancel of an unknown group: exit %d, want 2\n%s%s", res.code, res.stdout, res.stderr)
	}
}
