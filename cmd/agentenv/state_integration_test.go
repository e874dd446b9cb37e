//go:build integration

package main_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv/provider/docker/dockertest"
)

// stateUp starts a local state store under a name of the test's own (the engine is shared),
// sets it as the CLI's state.store, and takes it down when the test ends.
func (c *cli) stateUp() string {
	c.t.Helper()
	name := "state-" + c.tag
	r := c.run(c.t.Context(), nil, "state", "up", "--json", "--name", name)
	if r.code != 0 {
		c.t.Fatalf("state up: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var out struct{ DSN string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || !strings.HasPrefix(out.DSN, "postgres://") {
		c.t.Fatalf("state up --json = %s (%v), want {\"dsn\": ...}", r.stdout, err)
	}
	c.env = append(c.env, "AGENTENV_STATE_STORE="+out.DSN)
	c.t.Cleanup(func() {
		r := c.run(context.Background(), nil, "state", "down", "--force", "--name", name)
		if r.code != 0 {
			c.t.Errorf("state down: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		if left, _ := dockertest.Leftovers(context.Background(), c.dc, map[string]string{"agentenv.record": name}); len(left) != 0 {
			c.t.Errorf("state down left %v", left)
		}
	})
	return out.DSN
}

// notesEnvFile writes the notes example on this checkout's runtime image, with serviceDB's
// lines (such as "from_snapshot: NAME") added to its service_db, in a folder of its own.
func (c *cli) notesEnvFile(serviceDB ...string) string {
	c.t.Helper()
	runtime, _ := dockertest.RuntimeImage(c.t)
	p := filepath.Join(c.t.TempDir(), "env.yaml")
	var extra strings.Builder
	for _, l := range serviceDB {
		extra.WriteString("  " + l + "\n")
	}
	y := fmt.Sprintf(`name: notes
servers:
  - name: notes
    image: %[1]s
    command: [/agentenv, serve, notes, --listen, ":8080"]
    port: 8080
    database: true
service_db:
%[2]s  db_mcp:
    enabled: true
    image: %[1]s
gateway:
  image: %[1]s
`, runtime, extra.String())
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		c.t.Fatal(err)
	}
	return p
}

// storeDatabases lists the databases agentenv made for deployments on the store at dsn.
func storeDatabases(t *testing.T, dsn string) []string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, _ := conn.Query(t.Context(), "SELECT datname FROM pg_database WHERE starts_with(datname, 'agentenv-servicedb-')")
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

var storeDBCreated = regexp.MustCompile(`^servicedb\s+service_db\s+created`)

// TestStateStoreDeployTeardownAndKillThenGC runs what a user types: state up, env deploy with
// the store (its service DB a database, no container), teardown (the database gone from
// pg_database); then env deploy killed with SIGKILL once its database exists, and gc: no
// database, container, network or record short of gone is left; state down removes the store.
func TestStateStoreDeployTeardownAndKillThenGC(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.env = append(c.env, "AGENTENV_LIFECYCLE_CREATE_TIMEOUT=20s")
	dsn := c.stateUp()
	env := c.notesEnvFile()

	r := c.run(t.Context(), nil, "env", "deploy", env)
	if r.code != 0 {
		t.Fatalf("env deploy: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if !storeDBCreated.MatchString(lastMatch(r.stderr, "servicedb")) {
		t.Errorf("env deploy's progress names no store database:\n%s", r.stderr)
	}
	id := deploymentLine.FindStringSubmatch(r.stdout)[1]
	if dbs := storeDatabases(t, dsn); len(dbs) != 1 {
		t.Errorf("store databases %v, want the deployment's", dbs)
	}
	td := c.run(t.Context(), nil, "env", "teardown", id)
	if td.code != 0 {
		t.Errorf("env teardown: exit %d\n%s%s", td.code, td.stdout, td.stderr)
	}
	noFalseWarnings(t, td.stdout+td.stderr)
	if dbs := storeDatabases(t, dsn); len(dbs) != 0 {
		t.Errorf("store databases after teardown %v, want none", dbs)
	}

	// Killed once its database exists.
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := c.cmd(ctx, nil, "env", "deploy", env)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stderr)
	killed := false
	for sc.Scan() {
		if storeDBCreated.MatchString(sc.Text()) {
			cmd.Process.Signal(syscall.SIGKILL)
			killed = true
			break
		}
	}
	cmd.Wait()
	if !killed {
		t.Fatal("env deploy ended before its store database was made")
	}
	if dbs := storeDatabases(t, dsn); len(dbs) != 1 {
		t.Errorf("store databases after SIGKILL %v, want the killed deploy's", dbs)
	}
	c.gcUntilSettled(t)
	if dbs := storeDatabases(t, dsn); len(dbs) != 0 {
		t.Errorf("store databases after gc %v, want none", dbs)
	}
	if left := c.deployLeftovers(); len(left) != 0 {
		t.Errorf("after SIGKILL and gc the engine still has %v", left)
	}
	var recs []struct{ ID, State, Role string }
	ls := c.run(t.Context(), nil, "ledger", "ls", "--json")
	if err := json.Unmarshal([]byte(ls.stdout), &recs); err != nil {
		t.Fatalf("ledger ls --json: %v\n%s", err, ls.stdout)
	}
	for _, rec := range recs {
		if rec.Role != "state_store" && rec.Role != "state_template" {
			t.Errorf("record %s (%s) is %s after gc", rec.ID, rec.Role, rec.State)
		}
	}
}

// lastMatch returns the last line of s that contains sub.
func lastMatch(s, sub string) string {
	lines := strings.Split(s, "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], sub) && strings.Contains(lines[i], "created") {
			return lines[i]
		}
	}
	return ""
}

// TestStateUpReplacesAStoreRemovedByHand: a store whose container someone removed (docker rm
// -f) leaves a live record under the store's name; state up closes it with a verified
// teardown and starts a new store under the same name, with a DSN that works.
func TestStateUpReplacesAStoreRemovedByHand(t *testing.T) {
	c := newCLI(t)
	first := c.stateUp()
	name := "state-" + c.tag
	if _, err := c.dc.ContainerRemove(t.Context(), name, client.ContainerRemoveOptions{Force: true}); err != nil {
		t.Fatalf("remove the store's container by hand: %v", err)
	}
	r := c.run(t.Context(), nil, "state", "up", "--json", "--name", name)
	if r.code != 0 {
		t.Fatalf("state up after the container was removed: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var out struct{ DSN string }
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.DSN == first {
		t.Fatalf("state up --json = %s (%v), want a new DSN", r.stdout, err)
	}
	conn, err := pgx.Connect(t.Context(), out.DSN)
	if err != nil {
		t.Fatalf("connect to the new store: %v", err)
	}
	conn.Close(context.Background())
}
