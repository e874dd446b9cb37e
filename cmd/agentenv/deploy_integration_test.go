//go:build integration

package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
)

// kvEnvFile writes an env file of the kv example that runs this checkout's runtime image, with
// the test's label on nothing (deployments are found by their own label) and returns its path.
func (c *cli) kvEnvFile() string {
	c.t.Helper()
	runtime, _ := dockertest.RuntimeImage(c.t)
	p := filepath.Join(c.t.TempDir(), "env.yaml")
	y := fmt.Sprintf("name: kv\nservers:\n  - name: kv\n    image: %[1]s\n    command: [/agentenv, serve, kv, --listen, \":8080\"]\n    port: 8080\ngateway:\n  image: %[1]s\n", runtime)
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// deployLeftovers lists what any deployment of this test's ledger left: every container,
// network and volume whose agentenv.deployment label names a deployment this test drew.
func (c *cli) deployLeftovers() []string {
	c.t.Helper()
	var left []string
	for _, id := range c.deployments() {
		l, err := dockertest.Leftovers(context.Background(), c.dc, map[string]string{agentenv.LabelDeployment: id})
		if err != nil {
			c.t.Fatal(err)
		}
		left = append(left, l...)
	}
	return left
}

// deployments lists the deployment ids of every record in this test's ledger.
func (c *cli) deployments() []string {
	c.t.Helper()
	out := c.run(context.Background(), nil, "ledger", "ls", "--all", "--json")
	var recs []struct{ Deployment string }
	if err := json.Unmarshal([]byte(out.stdout), &recs); err != nil {
		c.t.Errorf("ledger ls: %v\n%s", err, out.stdout)
		return nil
	}
	var ids []string
	for _, r := range recs {
		if r.Deployment != "" && !slices.Contains(ids, r.Deployment) {
			ids = append(ids, r.Deployment)
		}
	}
	return ids
}

var deploymentLine = regexp.MustCompile(`(?m)^deployment\s+(\S+)$`)

func TestEnvDeployGetTeardown(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	env := c.kvEnvFile()
	r := c.run(t.Context(), nil, "env", "deploy", env, "--json")
	if r.code != 0 {
		t.Fatalf("env deploy: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var out struct{ ID, GatewayURL, Token string }
	var raw map[string]any
	if err := json.Unmarshal([]byte(r.stdout), &raw); err != nil {
		t.Fatalf("env deploy --json: %v\n%s", err, r.stdout)
	}
	out.ID, _ = raw["id"].(string)
	out.GatewayURL, _ = raw["gateway_url"].(string)
	out.Token, _ = raw["token"].(string)
	if out.ID == "" || !strings.HasPrefix(out.GatewayURL, "http://127.0.0.1:") || out.Token == "" {
		t.Fatalf("env deploy --json = %s, want id, gateway_url and token", r.stdout)
	}
	ls := c.run(t.Context(), nil, "env", "ls")
	if !strings.Contains(ls.stdout, out.ID) || !strings.Contains(ls.stdout, "live") {
		t.Errorf("env ls:\n%s", ls.stdout)
	}
	get := c.run(t.Context(), nil, "env", "get", out.ID)
	if strings.Count(get.stdout, "running") != 3 || !strings.Contains(get.stdout, "reattach: usable") {
		t.Errorf("env get: want network, server and gateway running, and the deployment usable:\n%s", get.stdout)
	}
	if strings.Contains(get.stdout, out.Token) {
		t.Error("env get prints the token")
	}
	td := c.run(t.Context(), nil, "env", "teardown", out.ID)
	if td.code != 0 || !strings.Contains(td.stdout, "3 terminated") {
		t.Errorf("env teardown: exit %d\n%s%s", td.code, td.stdout, td.stderr)
	}
	noFalseWarnings(t, td.stdout+td.stderr)
	if left := c.deployLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}

func TestEnvDeploySIGINTAtRandomLeavesNothing(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	env := c.kvEnvFile()
	finished, codes := c.signalledCmd(30, syscall.SIGINT, 30*time.Millisecond, 1500*time.Millisecond, deploymentLine, "env", "deploy", env)
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
	t.Logf("%d of 30 deploys interrupted (exit 130), %d finished first", interrupted, len(finished))
	for _, id := range finished {
		c.run(t.Context(), nil, "env", "teardown", id)
	}
	if left := c.deployLeftovers(); len(left) != 0 {
		t.Errorf("after SIGINTs the engine still has %v", left)
	}
}

func TestEnvDeploySIGKILLAtRandomThenGC(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.env = append(c.env, "AGENTENV_LIFECYCLE_CREATE_TIMEOUT=20s")
	env := c.kvEnvFile()
	finished, _ := c.signalledCmd(30, syscall.SIGKILL, 0, 1500*time.Millisecond, deploymentLine, "env", "deploy", env)
	t.Logf("%d of 30 deploys finished before SIGKILL", len(finished))
	for _, id := range finished {
		c.run(t.Context(), nil, "env", "teardown", id)
	}
	c.gcUntilSettled(t)
	// A deploy killed after it handed its deployment to the TTL but before it printed it is
	// live by design; it is the user's (here, the test's) to tear down.
	var docs []map[string]any
	ls := c.run(t.Context(), nil, "env", "ls", "--json")
	if err := json.Unmarshal([]byte(ls.stdout), &docs); err != nil {
		t.Fatal(err)
	}
	handed := 0
	for _, d := range docs {
		t.Logf("after kill and gc: %v (%v)", d["id"], d["state"])
		if d["state"] == "live" {
			handed++
			c.run(t.Context(), nil, "env", "teardown", d["id"].(string))
		}
	}
	if handed > 1 {
		t.Errorf("%d deployments live after SIGKILLs and gc; at most the rare one killed between hand-over and print", handed)
	}
	if left := c.deployLeftovers(); len(left) != 0 {
		ledger := c.run(context.Background(), nil, "ledger", "ls", "--json")
		t.Errorf("after SIGKILLs and gc the engine still has %v; the ledger's records short of gone:\n%s", left, ledger.stdout)
	}
}

// TestDeploymentOutlivesItsCLIUntilItsTTL: a deployment is handed to its TTL when env deploy
// exits; gc leaves it alone until then and removes it after.
func TestDeploymentOutlivesItsCLIUntilItsTTL(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	r := c.run(t.Context(), nil, "env", "deploy", c.kvEnvFile(), "--ttl", "4s", "--json")
	if r.code != 0 {
		t.Fatalf("env deploy: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if g := c.run(t.Context(), nil, "gc"); g.code != 0 || !strings.Contains(g.stdout, "0 collected") {
		t.Errorf("gc before the TTL: exit %d\n%s", g.code, g.stdout)
	}
	if left := c.deployLeftovers(); len(left) != 3 {
		t.Fatalf("before the TTL the engine has %v, want the deployment's network and two containers", left)
	}
	time.Sleep(5 * time.Second)
	if g := c.run(t.Context(), nil, "gc"); g.code != 0 || !strings.Contains(g.stdout, "expired") {
		t.Errorf("gc after the TTL: exit %d\n%s%s", g.code, g.stdout, g.stderr)
	}
	if left := c.deployLeftovers(); len(left) != 0 {
		t.Errorf("after the TTL and gc the engine still has %v", left)
	}
	ls := c.run(t.Context(), nil, "env", "ls", "--all", "--json")
	if !strings.Contains(ls.stdout, `"state": "torn_down"`) {
		t.Errorf("the expired deployment is not recorded torn down:\n%s", ls.stdout)
	}
}

var gcCollectedOneOrTwo = regexp.MustCompile(`\bgc: [12] collected`)

// TestEnvDeployIntoSIGKILLThenGC: a deploy --into a VM that another deployment made is killed
// (SIGKILL) once its server is up; gc removes exactly that deploy's container from the VM, by
// its in_vm record, and leaves the VM, its own stack and a second live deployment in it alone.
func TestEnvDeployIntoSIGKILLThenGC(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	env := c.kvEnvFile()
	deployJSON := func(args ...string) map[string]any {
		t.Helper()
		r := c.run(t.Context(), nil, append([]string{"env", "deploy", env, "--provider", "docker", "--json"}, args...)...)
		var out map[string]any
		if r.code != 0 || json.Unmarshal([]byte(r.stdout), &out) != nil {
			t.Fatalf("env deploy %v: exit %d\n%s%s", args, r.code, r.stdout, r.stderr)
		}
		return out
	}
	owner := deployJSON("--mode", "vm")
	vm := owner["records"].([]any)[0].(string)
	other := deployJSON("--into", vm)
	inVM := func() []string {
		t.Helper()
		l, err := dockertest.Leftovers(context.Background(), c.dc, map[string]string{agentenv.LabelRecord: vm})
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	before := inVM()

	cmd := c.cmd(t.Context(), nil, "env", "deploy", env, "--provider", "docker", "--into", vm)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "kv ") && strings.Contains(sc.Text(), " ready ") {
				close(ready)
				break
			}
		}
		io.Copy(io.Discard, stderr) //nolint:errcheck // drained only
	}()
	select {
	case <-ready:
	case <-time.After(2 * time.Minute):
		t.Fatal("the deploy to kill never got its kv server ready")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if got := inVM(); len(got) != len(before)+2 {
		t.Fatalf("with the killed deploy the vm holds %v, want %v and its kv and network", got, before)
	}

	gc := c.run(t.Context(), nil, "gc")
	// The kill lands once kv is ready; by then the deploy may have claimed its gateway too, so
	// gc collects one or two containers of the dead owner. What it must leave is checked next.
	if gc.code != 0 || !gcCollectedOneOrTwo.MatchString(gc.stdout+gc.stderr) || !strings.Contains(gc.stdout, "owner process is dead") {
		t.Errorf("gc: exit %d\n%s%s", gc.code, gc.stdout, gc.stderr)
	}
	if got := inVM(); !slices.Equal(got, before) {
		t.Errorf("after gc the vm holds %v, want %v as before the killed deploy", got, before)
	}
	for _, d := range []map[string]any{other, owner} {
		td := c.run(t.Context(), nil, "env", "teardown", d["id"].(string))
		if td.code != 0 {
			t.Errorf("env teardown %s: exit %d\n%s%s", d["id"], td.code, td.stdout, td.stderr)
		}
	}
	if left := inVM(); len(left) != 0 {
		t.Errorf("after both teardowns the engine still has %v", left)
	}
}
