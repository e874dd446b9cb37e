//go:build integration

package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/envproto/envtest"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
)

// deployedEnv is what `env deploy --json` prints of a deployment.
type deployedEnv struct {
	ID         string `json:"id"`
	GatewayURL string `json:"gateway_url"`
	Token      string `json:"token"`
}

// deployJSON runs `env deploy ENV --json` and returns the deployment.
func (c *cli) deployJSON(t *testing.T, envFile string) deployedEnv {
	t.Helper()
	r := c.run(t.Context(), nil, "env", "deploy", envFile, "--json")
	var d deployedEnv
	if r.code != 0 || json.Unmarshal([]byte(r.stdout), &d) != nil || d.ID == "" || d.Token == "" {
		t.Fatalf("env deploy %s: exit %d\n%s%s", envFile, r.code, r.stdout, r.stderr)
	}
	return d
}

// teardown runs `env teardown ID` and fails t unless it exits 0.
func (c *cli) teardown(t *testing.T, id string) {
	t.Helper()
	if r := c.run(context.Background(), nil, "env", "teardown", id); r.code != 0 {
		t.Errorf("env teardown %s: exit %d\n%s%s", id, r.code, r.stdout, r.stderr)
	}
}

// TestEnvSnapshotImageWithoutAStore runs what a user without a state store types: env deploy
// of notes, two notes added through the gateway, env snapshot (an image), state ls, two env
// deploys of an env file with service_db.from_snapshot whose data/get exports are the same and
// hold the notes, and state rm-snapshot, after which the engine has no image of it.
func TestEnvSnapshotImageWithoutAStore(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	src := c.deployJSON(t, c.notesEnvFile())
	cs := envtest.Connect(t, src.GatewayURL, src.Token)
	envtest.Call(t, cs, "add_note", map[string]any{"title": "seeded", "body": "paid once"})
	envtest.Call(t, cs, "add_note", map[string]any{"title": "second", "body": "also seeded"})
	cs.Close()
	name := "img-" + c.tag
	rec := "snap-" + name
	dockertest.CheckNoLeftovers(t, c.dc, map[string]string{agentenv.LabelRecord: rec})
	r := c.run(t.Context(), nil, "env", "snapshot", src.ID, "--name", name)
	if r.code != 0 || !strings.Contains(r.stdout, "image agentenv-image:"+rec+" on docker") {
		t.Fatalf("env snapshot: exit %d, want it to name the image\n%s%s", r.code, r.stdout, r.stderr)
	}
	if ls := c.run(t.Context(), nil, "state", "ls"); !strings.Contains(ls.stdout, name+"  image  notes  docker") {
		t.Errorf("state ls does not list the image snapshot:\n%s%s", ls.stdout, ls.stderr)
	}
	c.teardown(t, src.ID)

	from := c.notesEnvFile("from_snapshot: " + name)
	var exports []string
	for range 2 {
		d := c.deployJSON(t, from)
		exports = append(exports, string(envtest.DataVia(t, strings.TrimSuffix(d.GatewayURL, envproto.MCPPath), d.Token, "data/get", nil)))
		c.teardown(t, d.ID)
	}
	if exports[0] != exports[1] || !strings.Contains(exports[0], "paid once") || !strings.Contains(exports[0], "also seeded") {
		t.Errorf("data/get of two deployments of the snapshot, want the same two notes:\n%s\n%s", exports[0], exports[1])
	}
	rm := c.run(t.Context(), nil, "state", "rm-snapshot", name)
	if rm.code != 0 || !strings.Contains(rm.stdout, "1 terminated") {
		t.Errorf("state rm-snapshot: exit %d\n%s%s", rm.code, rm.stdout, rm.stderr)
	}
	if left, err := dockertest.Leftovers(context.Background(), c.dc, map[string]string{agentenv.LabelRecord: rec}); err != nil || len(left) != 0 {
		t.Errorf("after rm-snapshot the engine has %v (%v)", left, err)
	}
	if ls := c.run(t.Context(), nil, "state", "ls"); strings.Contains(ls.stdout, name) {
		t.Errorf("state ls lists a removed snapshot:\n%s", ls.stdout)
	}
	if left := c.deployLeftovers(); len(left) != 0 {
		t.Errorf("the deployments left %v", left)
	}
}

// seedNotes writes seed.sql beside envFile: the notes table with n notes of about 200 bytes.
func seedNotes(t *testing.T, envFile string, n int) {
	t.Helper()
	sql := fmt.Sprintf(`CREATE TABLE notes.notes (
  id bigserial PRIMARY KEY, title text NOT NULL, body text NOT NULL DEFAULT '',
  tags text[] NOT NULL DEFAULT '{}', created_at timestamptz NOT NULL DEFAULT now());
INSERT INTO notes.notes (title, body) SELECT 'note ' || g, repeat(md5(g::text), 6) FROM generate_series(1, %d) g;
`, n)
	if err := os.WriteFile(filepath.Join(filepath.Dir(envFile), "seed.sql"), []byte(sql), 0o600); err != nil {
		t.Fatal(err)
	}
}

// TestEnvSnapshotSIGKILLMidBuildThenGC kills `env snapshot` of a seeded deployment with SIGKILL
// once its image build has made something on the engine, then runs gc: nothing of the snapshot
// is left on the engine, and its record is gone. A snapshot that finished before anything of
// its build was seen, or before the kill landed, is removed and tried again under another name,
// at most three times.
func TestEnvSnapshotSIGKILLMidBuildThenGC(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.env = append(c.env, "AGENTENV_LIFECYCLE_CREATE_TIMEOUT=20s")
	envFile := c.notesEnvFile("seed: [seed.sql]", "ready_timeout: 3m")
	seedNotes(t, envFile, 50000)
	src := c.deployJSON(t, envFile)
	defer c.teardown(t, src.ID)
	for attempt := 1; ; attempt++ {
		name := fmt.Sprintf("kill-%s-%d", c.tag, attempt)
		labels := map[string]string{agentenv.LabelRecord: "snap-" + name}
		dockertest.CheckNoLeftovers(t, c.dc, labels)
		seen := c.killOnceBuilding(t, labels, "env", "snapshot", src.ID, "--name", name)
		if len(seen) == 0 {
			t.Logf("attempt %d: the snapshot finished before its build was seen", attempt)
			c.run(t.Context(), nil, "state", "rm-snapshot", name)
			if attempt == 3 {
				t.Fatal("three snapshots finished before their build was seen on the engine")
			}
			continue
		}
		if c.recordState(t, "snap-"+name) == string(agentenv.StateLive) {
			// The kill landed after the build's last step had tagged the image and the create
			// had finished: a snapshot made, not one cut short.
			t.Logf("attempt %d: the snapshot finished before the kill landed", attempt)
			c.run(t.Context(), nil, "state", "rm-snapshot", name)
			if attempt == 3 {
				t.Fatal("three snapshots finished before the kill landed")
			}
			continue
		}
		t.Logf("killed with %v on the engine", seen)
		c.gcUntilSettled(t)
		if left, err := dockertest.Leftovers(context.Background(), c.dc, labels); err != nil || len(left) != 0 {
			t.Errorf("after SIGKILL and gc the engine has %v (%v)", left, err)
		}
		var recs []struct{ ID, State string }
		ls := c.run(t.Context(), nil, "ledger", "ls", "--all", "--json")
		if err := json.Unmarshal([]byte(ls.stdout), &recs); err != nil {
			t.Fatalf("ledger ls --json: %v\n%s", err, ls.stdout)
		}
		for _, r := range recs {
			if r.ID == "snap-"+name && r.State != string(agentenv.StateGone) {
				t.Errorf("snapshot record %s is %s after gc, want gone", r.ID, r.State)
			}
		}
		return
	}
}

// recordState is the state of record id in the test's ledger, "" if it has none.
func (c *cli) recordState(t *testing.T, id string) string {
	t.Helper()
	var recs []struct{ ID, State string }
	ls := c.run(t.Context(), nil, "ledger", "ls", "--all", "--json")
	if err := json.Unmarshal([]byte(ls.stdout), &recs); err != nil {
		t.Fatalf("ledger ls --json: %v\n%s", err, ls.stdout)
	}
	for _, r := range recs {
		if r.ID == id {
			return r.State
		}
	}
	return ""
}

// killOnceBuilding runs agentenv args and kills it with SIGKILL as soon as the engine lists
// anything with labels; it returns what was listed then, or nothing if the command ended first.
func (c *cli) killOnceBuilding(t *testing.T, labels map[string]string, args ...string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := c.cmd(ctx, nil, args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return nil
		case <-ctx.Done():
			t.Fatalf("agentenv %v neither ended nor built within 2 minutes", args)
		case <-tick.C:
		}
		if left, err := dockertest.Leftovers(ctx, c.dc, labels); err == nil && len(left) > 0 {
			cmd.Process.Signal(syscall.SIGKILL)
			<-done
			return left
		}
	}
}
