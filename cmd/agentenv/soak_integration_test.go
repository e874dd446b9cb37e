//go:build integration

package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/soak"
)

// soakJSON runs `agentenv soak ARGS --json` on this checkout's runtime image and returns its
// report and exit code.
func (c *cli) soakJSON(extraEnv []string, args ...string) (soak.Report, int) {
	c.t.Helper()
	image, _ := dockertest.RuntimeImage(c.t)
	ctx, cancel := context.WithTimeout(c.t.Context(), 10*time.Minute)
	defer cancel()
	args = append([]string{"soak", "--image", image, "--dir", c.t.TempDir(), "--round-timeout", "5m", "--seed", "1", "--json"}, args...)
	cmd := c.cmd(ctx, extraEnv, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	_ = cmd.Run()
	var rep soak.Report
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		c.t.Fatalf("agentenv %v: %v\n%s%s", args, err, out.String(), errb.String())
	}
	return rep, cmd.ProcessState.ExitCode()
}

// TestSoakWithStateStore soaks with a state store: a steady and a crash round hold with every
// service DB a database of the store and nothing left on it; then a store whose every drop
// fails leaves the episode's database, which the soak counts as a leftover (its warning true),
// judges as not holding, and drops itself.
func TestSoakWithStateStore(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	dsn := c.stateUp()

	rep, code := c.soakJSON(nil, "--episodes", "2", "--rounds", "2", "--round-kinds", "steady,crash", "--state-store", dsn)
	if code != 0 || !rep.Holds {
		t.Errorf("soak with a store: exit %d, holds %v (%s)", code, rep.Holds, rep.First)
	}
	if len(rep.Rounds) != 2 || rep.Rounds[0].Passed != 2 {
		t.Errorf("soak with a store ran %+v, want 2 rounds, the steady one 2 passed", rep.Rounds)
	}
	if dbs := storeDatabases(t, dsn); len(dbs) != 0 {
		t.Errorf("store databases after the soak %v, want none", dbs)
	}

	rep, code = c.soakJSON([]string{"AGENTENV_FAULTS=state/terminate:*:error"}, "--episodes", "1", "--rounds", "1", "--round-kinds", "steady", "--state-store", dsn)
	if code != 1 || rep.Holds || len(rep.Rounds) != 1 {
		t.Fatalf("soak with a leaking store: exit %d, holds %v over %d rounds; want exit 1, not holding, 1 round", code, rep.Holds, len(rep.Rounds))
	}
	r := rep.Rounds[0]
	if r.Count()["database"] != 1 {
		t.Errorf("leftovers %v, want the episode's database", r.Leftovers)
	}
	for _, w := range r.Warnings {
		if !w.True {
			t.Errorf("false warning %q", w.Line)
		}
	}
	if !strings.Contains(strings.Join(r.Removed, " "), "database ") {
		t.Errorf("soak removed %v, want the database too", r.Removed)
	}
	if dbs := storeDatabases(t, dsn); len(dbs) != 0 {
		t.Errorf("store databases after the leaky soak %v, want none: soak drops what it counted", dbs)
	}
}
