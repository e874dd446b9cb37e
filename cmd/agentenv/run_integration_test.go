//go:build integration

package main_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv/internal/testproc"
)

// buildRuntimeImage runs `agentenv images build` with the binary under test, as a user would
// before deploying the examples (which name agentenv:dev).
func (c *cli) buildRuntimeImage() {
	c.t.Helper()
	if r := c.run(c.t.Context(), nil, "images", "build"); r.code != 0 {
		c.t.Fatalf("images build: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

func TestRunHelloWithNoDockerLeavesNothing(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	env := []string{"DOCKER_HOST=unix:///nonexistent/docker.sock", "AGENTENV_PROVIDER_DOCKER_HOST=unix:///nonexistent/docker.sock"}
	for i := range 2 { // the second run reuses the ledger the first made
		r := c.run(t.Context(), env, "run", "hello")
		if r.code != 0 || !strings.Contains(r.stdout, "passed: 1 passed") {
			t.Fatalf("run hello #%d: exit %d\n%s%s", i+1, r.code, r.stdout, r.stderr)
		}
	}
	entries, err := os.ReadDir(filepath.Join(c.state, "agentenv", "sandboxes"))
	if err != nil || len(entries) != 0 {
		t.Errorf("work folders left: %v (%v)", entries, err)
	}
	ls := c.run(t.Context(), nil, "runs", "ls", "--json")
	if strings.Count(ls.stdout, `"status": "completed"`) != 2 {
		t.Errorf("runs ls: want two completed runs:\n%s", ls.stdout)
	}
}

func TestRunNotesTaskK4(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.buildRuntimeImage()
	r := c.run(t.Context(), nil, "run", "../../examples/notes-task", "--k", "4", "--concurrency", "4")
	if r.code != 0 || !strings.Contains(r.stdout, "passed: 4 passed") || !strings.Contains(r.stdout, "mean score 1") {
		t.Fatalf("run notes-task: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	noFalseWarnings(t, r.stdout)
	if left := c.deployLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
	id := runLine(r.stdout)
	get := c.run(t.Context(), nil, "runs", "get", id)
	if !strings.Contains(get.stdout, "notes-task  passed  score 1") || !strings.Contains(get.stdout, "terminated") {
		t.Errorf("runs get %s:\n%s", id, get.stdout)
	}
}

// TestRunInjectTaskChangesNothing runs a task whose scripted agent answers with SQL meant to
// drop the notes table: its sql verifiers bind the answer as a parameter, so the answer check
// scores 0, the table is intact (its check scores 1) and the run scores 0.5.
func TestRunInjectTaskChangesNothing(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.buildRuntimeImage()
	r := c.run(t.Context(), nil, "run", "../../examples/notes-task/inject-task.yaml")
	for _, want := range []string{"answer_is_a_title (sql) passed score=0 ", "table_intact (sql) passed score=1 ", "1 scored below 1", "mean score 0.5"} {
		if !strings.Contains(r.stdout+r.stderr, want) {
			t.Errorf("run inject-task: no %q in exit %d\n%s%s", want, r.code, r.stdout, r.stderr)
		}
	}
	if left := c.deployLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}

// runLine returns the first run id in a summary table.
func runLine(out string) string {
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "run-") {
			return strings.Fields(l)[0]
		}
	}
	return ""
}

func TestRunInterruptedLeavesNothing(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.buildRuntimeImage()
	for _, after := range []time.Duration{300 * time.Millisecond, 1500 * time.Millisecond, 3 * time.Second} {
		cmd := c.cmd(t.Context(), nil, "run", "../../examples/notes-task", "--k", "2", "--concurrency", "2")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(after)
		_ = cmd.Process.Signal(syscall.SIGINT)
		_ = cmd.Wait()
		if code := cmd.ProcessState.ExitCode(); code != 130 && code != 0 && !diedOf(cmd.ProcessState, syscall.SIGINT) {
			t.Errorf("SIGINT after %s: %s, want exit 130", after, cmd.ProcessState)
		}
		if left := c.deployLeftovers(); len(left) != 0 {
			t.Errorf("SIGINT after %s left %v", after, left)
		}
	}
}

// diedOf reports whether the process was killed by sig rather than exiting. The command installs
// its signal handler first thing in main, before it makes anything, so a SIGINT that kills it
// arrived while the runtime was still starting (on a loaded machine that passes 300 ms): a shell
// reports that as 130 too, and the leftover check after it still holds the command to account.
func diedOf(ps *os.ProcessState, sig syscall.Signal) bool {
	ws, ok := ps.Sys().(syscall.WaitStatus)
	return ok && ws.Signaled() && ws.Signal() == sig
}

// TestTwoInterruptsLeaveEveryRunFinal: Ctrl-C while two episodes run, and again while their
// teardowns hang (an injected fault): the second stops the waiting, exit 130, and every run
// record and the group end in a final state, none "running"; gc then removes what the hung
// teardowns left.
func TestTwoInterruptsLeaveEveryRunFinal(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	tk := writeTask(t, `
name: two-interrupts
steps:
- {id: sandbox, type: deploy_sandbox, provider: process, ttl: 10m}
- {id: wait, type: command_succeeds, sandbox: sandbox, command: [sleep, "120"]}
`)
	cmd := c.cmd(t.Context(), []string{"AGENTENV_FAULTS=process/terminate:*:hang"}, "run", tk, "--k", "2", "--concurrency", "2")
	var out, errb testproc.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waitFor := func(what string, n int) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for strings.Count(errb.String(), what) < n {
			if time.Now().After(deadline) {
				_ = cmd.Process.Kill()
				_ = cmd.Wait()
				t.Fatalf("never saw %q %d times:\n%s", what, n, errb.String())
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitFor("wait (command_succeeds) running", 2)
	_ = cmd.Process.Signal(syscall.SIGINT)
	waitFor("tearing down what was made", 1)
	time.Sleep(time.Second) // the teardowns hang now
	_ = cmd.Process.Signal(syscall.SIGINT)
	_ = cmd.Wait()
	if code := cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit %d after two SIGINTs, want 130\n%s%s", code, out.String(), errb.String())
	}
	var runs, groups []struct{ ID, Status string }
	for _, l := range []struct {
		args []string
		into *[]struct{ ID, Status string }
	}{{[]string{"runs", "ls", "--json"}, &runs}, {[]string{"runs", "ls", "--group", "--json"}, &groups}} {
		r := c.run(t.Context(), nil, l.args...)
		if err := json.Unmarshal([]byte(r.stdout), l.into); err != nil {
			t.Fatalf("%v: %v\n%s", l.args, err, r.stdout)
		}
	}
	if len(runs) != 2 || len(groups) != 1 {
		t.Errorf("%d runs and %d groups after two interrupts, want 2 and 1: %+v %+v", len(runs), len(groups), runs, groups)
	}
	for _, r := range append(runs, groups...) {
		if r.Status == "running" || r.Status == "" {
			t.Errorf("%s is %q after two interrupts, want a final status", r.ID, r.Status)
		}
	}
	if r := c.run(t.Context(), nil, "gc"); r.code != 0 {
		t.Errorf("gc after two interrupts: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := c.run(t.Context(), nil, "ledger", "ls", "--json"); strings.TrimSpace(r.stdout) != "[]" {
		t.Errorf("gc left live records:\n%s", r.stdout)
	}
}

// TestRunWhoseEnvIsRemovedMidEpisode: the episode fails with a clear reason, the rest is torn
// down, and nothing is reported as "may still be up".
func TestRunWhoseEnvIsRemovedMidEpisode(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	env := c.kvEnvFile()
	taskFile := filepath.Join(t.TempDir(), "task.yaml")
	task := `name: removed
steps:
  - id: env
    type: deploy_env
    file: ` + env + `
  - id: box
    type: deploy_sandbox
    provider: process
  - id: wait
    type: exec
    sandbox: box
    command: [sleep, "4"]
  - id: set
    type: call_tool
    env: env
    tool: set
    arguments: {key: a, value: b}
`
	if err := os.WriteFile(taskFile, []byte(task), 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		// Remove the kv server as soon as this test's ledger has it live.
		defer close(done)
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			time.Sleep(100 * time.Millisecond)
			// Once the deployment is live, that is mid-episode.
			deps := c.run(context.Background(), nil, "env", "ls", "--json")
			if !strings.Contains(deps.stdout, `"state": "live"`) {
				continue
			}
			out := c.run(context.Background(), nil, "ledger", "ls", "--json")
			var recs []struct{ ID, Role, State string }
			if json.Unmarshal([]byte(out.stdout), &recs) != nil {
				continue
			}
			for _, rec := range recs {
				if rec.Role == "mcp_server" && rec.State == "live" {
					if _, err := c.dc.ContainerRemove(context.Background(), rec.ID, client.ContainerRemoveOptions{Force: true}); err == nil {
						return
					}
				}
			}
		}
	}()
	r := c.run(t.Context(), nil, "run", taskFile)
	<-done
	if r.code != 1 || !strings.Contains(r.stdout, "failed") {
		t.Fatalf("run: exit %d, want 1 and a failed episode\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !strings.Contains(r.stdout, "already gone") {
		t.Errorf("receipt does not count the removed server as already gone:\n%s", r.stdout)
	}
	for _, bad := range []string{"may still be up", "not terminated"} {
		if strings.Contains(r.stdout+r.stderr, bad) {
			t.Errorf("output says %q:\n%s%s", bad, r.stdout, r.stderr)
		}
	}
	if left := c.deployLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}
