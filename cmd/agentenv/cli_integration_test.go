//go:build integration

package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/testbin"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
)

// bin is the agentenv binary under test, had once by TestMain.
var bin string

func TestMain(m *testing.M) {
	bin = testbin.Main()
	os.Exit(m.Run())
}

// cli runs agentenv commands against one private state folder (ledger, work folders), so that
// tests running at once never see each other's records. Every sandbox it creates carries the
// label agentenv-test=<tag>, by which the test checks for leftovers.
type cli struct {
	t     *testing.T
	state string
	tag   string
	image string
	env   []string
	dc    *client.Client
}

func newCLI(t *testing.T) *cli {
	t.Helper()
	dc := dockertest.Require(t)
	c := &cli{t: t, state: t.TempDir(), tag: fmt.Sprintf("t%x", rand.Uint64()), image: dockertest.TestImage(t), dc: dc}
	dockertest.CheckNoLeftovers(t, dc, map[string]string{"agentenv-test": c.tag})
	t.Cleanup(func() {
		// Whatever a failing test left in its own ledger, gc collects before the check above.
		c.run(context.Background(), nil, "gc")
		// What gc had to leave (a dead creator's create in flight, kept until its timeout)
		// would outlive this test's ledger: the test fails, and it is removed by label here so
		// that no run leaks into the next.
		for _, id := range c.deployments() {
			labels := map[string]string{agentenv.LabelDeployment: id}
			if left, err := dockertest.Leftovers(context.Background(), dc, labels); err == nil && len(left) > 0 {
				t.Errorf("deployment %s left %v on the engine; removing them", id, left)
				if err := dockertest.Remove(context.Background(), dc, labels); err != nil {
					t.Errorf("remove what deployment %s left: %v", id, err)
				}
			}
		}
	})
	return c
}

type result struct {
	code           int
	stdout, stderr string
}

func (c *cli) cmd(ctx context.Context, extraEnv []string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, bin, args...)
	// When ctx ends the command is interrupted as a user would, so that it tears down what it
	// made; it is killed only if it has not exited a minute and a half later.
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 90 * time.Second
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+c.state, "AGENTENV_CONFIG=", "HOME="+c.state)
	cmd.Env = append(cmd.Env, c.env...)
	cmd.Env = append(cmd.Env, extraEnv...)
	return cmd
}

// run runs the agentenv binary with args and env added to the test's, until it exits or ctx's
// deadline (2 minutes if ctx has none) passes, when it is interrupted (see cmd).
func (c *cli) run(ctx context.Context, env []string, args ...string) result {
	c.t.Helper()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
	}
	cmd := c.cmd(ctx, env, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("agentenv %v: %v", args, err)
	}
	return result{code, out.String(), errb.String()}
}

// create runs `sandbox create` of the test image serving HTTP, and returns the record id.
func (c *cli) createArgs(extra ...string) []string {
	args := []string{"sandbox", "create", "--image", c.image, "--label", "agentenv-test=" + c.tag, "--port", "8080"}
	args = append(args, extra...)
	return append(args, "--", "serve", ":8080")
}

var recordLine = regexp.MustCompile(`(?m)^record (\S+)$`)

func (c *cli) create(extra ...string) string {
	c.t.Helper()
	r := c.run(context.Background(), nil, c.createArgs(extra...)...)
	if r.code != 0 {
		c.t.Fatalf("sandbox create: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	m := recordLine.FindStringSubmatch(r.stdout)
	if m == nil {
		c.t.Fatalf("sandbox create printed no record:\n%s", r.stdout)
	}
	return m[1]
}

func (c *cli) leftovers() []string {
	c.t.Helper()
	left, err := dockertest.Leftovers(context.Background(), c.dc, map[string]string{"agentenv-test": c.tag})
	if err != nil {
		c.t.Fatal(err)
	}
	return left
}

// noFalseWarnings fails if output claims a sandbox was not terminated or may still be up.
func noFalseWarnings(t *testing.T, out string) {
	t.Helper()
	for _, bad := range []string{"not terminated", "may still be up", "still_listed"} {
		if strings.Contains(out, bad) {
			t.Errorf("output says %q:\n%s", bad, out)
		}
	}
}

func TestCreateThenRemoveLeavesNothing(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	id := c.create()
	if left := c.leftovers(); len(left) != 1 {
		t.Fatalf("after create the engine has %v, want one container", left)
	}
	ls := c.run(t.Context(), nil, "sandbox", "ls", "--json")
	var rows []map[string]any
	if err := json.Unmarshal([]byte(ls.stdout), &rows); err != nil {
		t.Fatalf("sandbox ls --json: %v\n%s", err, ls.stdout)
	}
	status := ""
	for _, row := range rows {
		if row["record"] == id {
			status, _ = row["status"].(string)
		}
	}
	if status != "live" {
		t.Errorf("sandbox ls --json says %s is %q, want live:\n%s", id, status, ls.stdout)
	}
	r := c.run(t.Context(), nil, "sandbox", "rm", id)
	if r.code != 0 || !strings.Contains(r.stdout, "terminated") {
		t.Errorf("sandbox rm: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	noFalseWarnings(t, r.stdout+r.stderr)
	if left := c.leftovers(); len(left) != 0 {
		t.Errorf("after rm the engine still has %v", left)
	}
}

func TestRemovedOrKilledBehindOurBackIsAlreadyGone(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	removed, killed := c.create(), c.create()
	ctx := t.Context()
	if _, err := c.dc.ContainerRemove(ctx, removed, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.dc.ContainerKill(ctx, killed, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		t.Fatal(err)
	}
	// Wait until the engine reports the kill (exit 137).
	deadline := time.Now().Add(10 * time.Second)
	for {
		res, err := c.dc.ContainerInspect(ctx, killed, client.ContainerInspectOptions{})
		if err == nil && !res.Container.State.Running {
			if res.Container.State.ExitCode != 137 {
				t.Fatalf("killed container exit code %d, want 137", res.Container.State.ExitCode)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("killed container still running after 10 s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	r := c.run(ctx, nil, "sandbox", "rm", "--json", removed, killed)
	if r.code != 0 {
		t.Fatalf("sandbox rm: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var rc struct {
		Items []struct{ Record, Outcome string }
	}
	if err := json.Unmarshal([]byte(r.stdout), &rc); err != nil {
		t.Fatal(err)
	}
	for _, it := range rc.Items {
		if it.Outcome != "already_gone" {
			t.Errorf("%s: outcome %s, want already_gone", it.Record, it.Outcome)
		}
	}
	noFalseWarnings(t, r.stderr)
	if left := c.leftovers(); len(left) != 0 {
		t.Errorf("engine still has %v", left)
	}
}

// signalled runs n creates, each sent sig at a random moment in [min, max), and returns the
// records of those that finished (printed a record) before the signal landed, with exit codes.
func (c *cli) signalled(n int, sig syscall.Signal, min, max time.Duration) (finished []string, codes []int) {
	c.t.Helper()
	return c.signalledCmd(n, sig, min, max, recordLine, c.createArgs()...)
}

// signalledCmd runs args n times, each sent sig at a random moment in [min, max), and returns
// what done matched in the stdout of runs that printed it, and every exit code.
func (c *cli) signalledCmd(n int, sig syscall.Signal, min, max time.Duration, done *regexp.Regexp, args ...string) (finished []string, codes []int) {
	c.t.Helper()
	for i := range n {
		cmd := c.cmd(c.t.Context(), nil, args...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			c.t.Fatal(err)
		}
		time.Sleep(min + time.Duration(rand.Int64N(int64(max-min))))
		_ = cmd.Process.Signal(sig)
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
			// Killed by the signal itself (it landed during the Go runtime's start-up, before
			// agentenv's handler): a shell reports that as 128+signal too.
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				code = 128 + int(ws.Signal())
			}
		}
		codes = append(codes, code)
		// Printed means handed to the user, even if the signal landed just after.
		if m := done.FindStringSubmatch(out.String()); m != nil {
			finished = append(finished, m[1])
		}
		if testing.Verbose() || (code != 0 && code != 128+int(sig)) {
			c.t.Logf("run %d: exit %d, stderr %q", i, code, lastLine(errb.String()))
		}
	}
	return finished, codes
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func TestSIGKILLAtRandomThenGC(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.env = append(c.env, "AGENTENV_LIFECYCLE_CREATE_TIMEOUT=20s")
	finished, _ := c.signalled(30, syscall.SIGKILL, 0, 500*time.Millisecond)
	t.Logf("%d of 30 creates finished before SIGKILL", len(finished))
	if len(finished) > 0 {
		// Those were handed to their expiry, as a user would expect: remove them first.
		if r := c.run(t.Context(), nil, append([]string{"sandbox", "rm"}, finished...)...); r.code != 0 {
			t.Fatalf("rm finished: %s%s", r.stdout, r.stderr)
		}
	}
	inFlight := c.gcUntilSettled(t)
	t.Logf("%d of 30 killed creates were in flight at the first gc", inFlight)
	// Every record is gone but one a create handed to its expiry in the instant before the
	// kill kept it from printing it: live by design, and the user's (here the test's) to remove.
	var recs []struct {
		ID, State string
		Owner     struct{ PID int }
	}
	ls := c.run(t.Context(), nil, "ledger", "ls", "--json")
	if err := json.Unmarshal([]byte(ls.stdout), &recs); err != nil {
		t.Fatalf("ledger ls --json: %v\n%s", err, ls.stdout)
	}
	handed := 0
	for _, rec := range recs {
		switch {
		case rec.State == "live" && rec.Owner.PID == 0:
			handed++
			c.run(t.Context(), nil, "sandbox", "rm", rec.ID)
		default:
			t.Errorf("record %s is %s after gc", rec.ID, rec.State)
		}
	}
	if handed > 1 {
		t.Errorf("%d sandboxes live after SIGKILLs and gc; at most the rare one killed between hand-over and print", handed)
	}
	if left := c.leftovers(); len(left) != 0 {
		t.Errorf("after SIGKILLs and gc the engine still has %v", left)
	}
}

// gcUntilSettled runs gc, and again every few seconds while it reports creates in flight (what
// a killed creator had in flight can appear in the engine after a pass looked, and gc keeps
// such a record until its create timeout), as it tells a user to. It returns how many creates
// the first pass saw in flight. The caller sets a short create timeout.
func (c *cli) gcUntilSettled(t *testing.T) int {
	t.Helper()
	first := -1
	for pass := 1; pass <= 10; pass++ {
		r := c.run(t.Context(), nil, "gc", "--json")
		if r.code != 0 {
			t.Errorf("gc: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		var rep struct {
			InFlight []string `json:"in_flight"`
		}
		if err := json.Unmarshal([]byte(r.stdout), &rep); err != nil {
			t.Fatalf("gc --json: %v\n%s", err, r.stdout)
		}
		if first < 0 {
			first = len(rep.InFlight)
		}
		if len(rep.InFlight) == 0 {
			return first
		}
		t.Logf("gc pass %d: %d creates in flight", pass, len(rep.InFlight))
		time.Sleep(5 * time.Second)
	}
	t.Errorf("gc still reports creates in flight after 10 passes")
	return first
}

func TestSIGINTAtRandomLeavesNothing(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	finished, codes := c.signalled(30, syscall.SIGINT, 30*time.Millisecond, 500*time.Millisecond)
	interrupted := 0
	for _, code := range codes {
		switch code {
		case 0:
		case 130:
			interrupted++
		default:
			t.Errorf("exit code %d after SIGINT, want 130 (or 0 if it had finished)", code)
		}
	}
	t.Logf("%d of 30 interrupted (exit 130), %d finished first", interrupted, len(finished))
	if len(finished) > 0 {
		if r := c.run(t.Context(), nil, append([]string{"sandbox", "rm"}, finished...)...); r.code != 0 {
			t.Fatalf("rm finished: %s%s", r.stdout, r.stderr)
		}
	}
	// No gc: the interrupted commands cleaned up after themselves.
	if left := c.leftovers(); len(left) != 0 {
		t.Errorf("after SIGINTs the engine still has %v", left)
	}
}

func TestFailedTerminateIsRetriedByGC(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	id := c.create()
	r := c.run(t.Context(), []string{"AGENTENV_FAULTS=docker/terminate:1:error"}, "sandbox", "rm", id)
	if r.code != 1 || !strings.Contains(r.stdout, "1 not terminated") {
		t.Fatalf("rm with a failing terminate: exit %d, want 1 and a failed item\n%s%s", r.code, r.stdout, r.stderr)
	}
	ls := c.run(t.Context(), nil, "ledger", "ls")
	if !strings.Contains(ls.stdout, "terminate_failed") {
		t.Errorf("record is not terminate_failed:\n%s", ls.stdout)
	}
	if left := c.leftovers(); len(left) != 1 {
		t.Fatalf("engine has %v, want the one sandbox the terminate failed on", left)
	}
	g := c.run(t.Context(), nil, "gc")
	if g.code != 0 || !strings.Contains(g.stdout, "retry failed terminate") {
		t.Errorf("gc: exit %d\n%s%s", g.code, g.stdout, g.stderr)
	}
	if left := c.leftovers(); len(left) != 0 {
		t.Errorf("after gc the engine still has %v", left)
	}
}

func TestConcurrentCreateAndGCNeverRemoveLiveSandboxes(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if r := c.run(context.Background(), nil, "gc"); r.code != 0 {
				t.Errorf("gc: exit %d\n%s%s", r.code, r.stdout, r.stderr)
			}
		}
	}()
	var ids []string
	for range 8 {
		ids = append(ids, c.create())
	}
	close(stop)
	wg.Wait()
	if left := c.leftovers(); len(left) != len(ids) {
		t.Errorf("gc running alongside removed live sandboxes: engine has %d of %d", len(left), len(ids))
	}
	if r := c.run(t.Context(), nil, append([]string{"sandbox", "rm"}, ids...)...); r.code != 0 {
		t.Errorf("rm: %s%s", r.stdout, r.stderr)
	}
}

func TestBadInputIsClearAndLeavesNothing(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	cases := []struct {
		name string
		env  []string
		args []string
		code int
		want string
	}{
		{"unknown provider", nil, c.createArgs("--provider", "nope"), 2, `provider "nope" is not configured`},
		{"engine not answering", []string{"AGENTENV_PROVIDER_DOCKER_HOST=unix:///nonexistent/docker.sock"}, c.createArgs(), 1, "/nonexistent/docker.sock"},
		{"missing image", nil, []string{"sandbox", "create", "--image", "agentenv-no-such-image:0", "--label", "agentenv-test=" + c.tag}, 2, "agentenv-no-such-image:0"},
		{"malformed label", nil, c.createArgs("--label", "no-equals-sign"), 2, "want key=value"},
		{"reserved label", nil, c.createArgs("--label", "agentenv.record=x"), 2, "reserved"},
		// A file that is not a ledger where the ledger belongs is bad input: refused, named.
		{"not a ledger", []string{"AGENTENV_LEDGER_DSN=" + corruptFile(t)}, c.createArgs(), 2, "corrupt.db: not a bbolt ledger"},
		{"unwritable ledger", []string{"AGENTENV_LEDGER_DSN=/proc/agentenv/ledger.db"}, c.createArgs(), 1, "/proc/agentenv"},
	}
	for _, tc := range cases {
		r := c.run(t.Context(), tc.env, tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%s: exit %d, stderr %q; want exit %d naming %q", tc.name, r.code, r.stderr, tc.code, tc.want)
		}
	}
	if left := c.leftovers(); len(left) != 0 {
		t.Errorf("bad input left %v", left)
	}
	// The missing image's record ends gone, naming the image.
	ls := c.run(t.Context(), nil, "ledger", "ls", "--all", "--json")
	if !strings.Contains(ls.stdout, `"State": "gone"`) && !strings.Contains(ls.stdout, "gone") {
		t.Errorf("ledger after a missing image:\n%s", ls.stdout)
	}
}

func corruptFile(t *testing.T) string {
	p := filepath.Join(t.TempDir(), "corrupt.db")
	if err := os.WriteFile(p, bytes.Repeat([]byte("not a database "), 100), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
