//go:build integration

package main_test

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/agentenv/agentenv/ledger/postgres/pgtest"
	"github.com/agentenv/agentenv/task"
)

// shardedJSON is what `agentenv run EVAL --json` and `runs merge --json` print, with the
// summaries whole.
type shardedJSON struct {
	Group    string         `json:"group"`
	Status   string         `json:"status"`
	Shard    string         `json:"shard"`
	Merged   []string       `json:"merged_from"`
	Totals   task.Summary   `json:"totals"`
	Tasks    []task.Summary `json:"tasks"`
	NotRun   int            `json:"not_run"`
	Episodes []struct {
		Task     string       `json:"task"`
		Run      string       `json:"run"`
		Instance int          `json:"instance"`
		Attempt  int          `json:"attempt"`
		Outcome  task.Outcome `json:"outcome"`
	} `json:"episodes"`
}

func decodeSharded(t *testing.T, what string, r result) shardedJSON {
	t.Helper()
	var g shardedJSON
	if err := json.Unmarshal([]byte(r.stdout), &g); err != nil {
		t.Fatalf("%s: %v (exit %d)\n%s%s", what, err, r.code, r.stdout, r.stderr)
	}
	g.Totals.Elapsed = 0
	for i := range g.Tasks {
		g.Tasks[i].Elapsed = 0
	}
	return g
}

// shardedEval writes an eval of a task that scores 0 on one seed row and hello, k=2: 8
// episodes on the process provider, 6 passed and 2 scored below 1.
func shardedEval(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	hello, _ := filepath.Abs("../../examples/hello/task.yaml")
	files := map[string]string{
		"greet.yaml": "name: greet\nsteps:\n  - id: sandbox\n    type: deploy_sandbox\n    provider: process\n" +
			"  - id: greeting\n    type: write_file\n    sandbox: sandbox\n    path: greeting.txt\n    content: \"hello <who>\\n\"\n" +
			"  - id: check\n    type: file_contains\n    sandbox: sandbox\n    path: greeting.txt\n    contains: hello ada\n",
		"who.csv":   "who\nada\nbob\nada\n",
		"eval.yaml": "name: sharded\nconcurrency: 4\ntasks:\n  - task: greet.yaml\n    k: 2\n    seeds: who.csv\n  - task: " + hello + "\n    k: 2\n",
	}
	for name, src := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return filepath.Join(dir, "eval.yaml")
}

// TestShardsThenMergeEqualUnsharded runs shardedEval unsharded, then as --shard 1/3 and 2/3
// in this state folder and 3/3 in another one with a ledger of its own, merges the three
// groups (--from the other's ledger): the merged group has the unsharded run's slots and
// outcomes and its summary, per task and overall, in `runs merge`, `runs get`, `runs ls
// --group` and `runs export`; a second merge is the same group; bad shards and bad merges are
// exit 2 naming what is wrong, and write nothing.
func TestShardsThenMergeEqualUnsharded(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	other := t.TempDir() // a second machine's state folder, with a ledger of its own
	whole, shards, merged := c.shardsThenMerge(t, []string{"XDG_STATE_HOME=" + other, "HOME=" + other},
		"--from", filepath.Join(other, "agentenv", "ledger.bolt"))
	evalFile := shardedEval(t)
	ctx := t.Context()
	for _, bad := range []struct {
		args []string
		want string
	}{
		{[]string{"run", evalFile, "--shard", "4/3"}, "--shard 4/3: want I/N with 1 ≤ I ≤ N"},
		{[]string{"run", evalFile, "--shard", "x"}, "--shard x"},
		{[]string{"run", "--resume", shards[0], "--shard", "1/3"}, "--shard with --resume"},
		{[]string{"runs", "merge", shards[0], shards[1]}, "was merged into group " + merged},
		{[]string{"runs", "merge", "group-nosuch"}, "no group group-nosuch in the ledger"},
		{[]string{"runs", "merge", whole}, "group " + whole + " is not a shard"},
		{[]string{"run", "--resume", shards[1]}, "merged into group " + merged},
	} {
		r := c.run(ctx, nil, bad.args...)
		if r.code != 2 || !strings.Contains(r.stderr, bad.want) {
			t.Errorf("agentenv %v: exit %d, want 2 saying %q\n%s", bad.args, r.code, bad.want, r.stderr)
		}
	}
	// A merge missing a shard lists it, and writes nothing.
	fresh := decodeSharded(t, "shard 1/2", c.run(ctx, nil, "run", evalFile, "--shard", "1/2", "--json"))
	if r := c.run(ctx, nil, "runs", "merge", fresh.Group); r.code != 2 || !strings.Contains(r.stderr, "missing shards 2/2 of sharded") {
		t.Errorf("merge without shard 2/2: exit %d\n%s", r.code, r.stderr)
	}
	if r := c.run(ctx, nil, "runs", "get", fresh.Group, "--json"); strings.Contains(r.stdout, "merged_into") {
		t.Errorf("a refused merge wrote the shard: %s", r.stdout)
	}
	if left := c.sandboxLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}

// TestShardsOnASharedPostgresLedger: shards run from two state folders (two machines) sharing
// one PostgreSQL ledger merge, with no --from, into the unsharded run's group.
func TestShardsOnASharedPostgresLedger(t *testing.T) {
	t.Parallel()
	dsn := pgtest.Schema(t, "ledger_shards") // first, so that it is dropped after newCLI's cleanup (gc) ran
	c := newCLI(t)
	c.env = append(c.env, "AGENTENV_LEDGER_DSN="+dsn)
	other := t.TempDir()
	c.shardsThenMerge(t, []string{"XDG_STATE_HOME=" + other, "HOME=" + other})
	if left := c.sandboxLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}

// shardsThenMerge runs shardedEval unsharded, then shards 1/3 and 2/3 and, with thirdEnv,
// 3/3, merges them with mergeArgs added and checks the merged group against the unsharded
// one everywhere a group shows. It returns the ids of the unsharded group, the shards' and the
// merged group.
func (c *cli) shardsThenMerge(t *testing.T, thirdEnv []string, mergeArgs ...string) (whole string, shards []string, merged string) {
	t.Helper()
	evalFile := shardedEval(t)
	ctx := t.Context()

	wholeRun := decodeSharded(t, "unsharded run", c.run(ctx, nil, "run", evalFile, "--json"))
	if wholeRun.Totals.Passed != 6 || wholeRun.Totals.ScoredBelow != 2 || len(wholeRun.Episodes) != 8 {
		t.Fatalf("unsharded: %+v", wholeRun.Totals)
	}
	var shardRuns []string
	for i, env := range [][]string{nil, nil, thirdEnv} {
		s := string(rune('1'+i)) + "/3"
		g := decodeSharded(t, "shard "+s, c.run(ctx, env, "run", evalFile, "--shard", s, "--json"))
		if g.Shard != s || g.NotRun != 0 || len(g.Episodes) != []int{3, 3, 2}[i] {
			t.Fatalf("shard %s: shard %q, %d not run, %d episodes", s, g.Shard, g.NotRun, len(g.Episodes))
		}
		shards = append(shards, g.Group)
		for _, ep := range g.Episodes {
			shardRuns = append(shardRuns, ep.Run)
		}
	}
	mr := c.run(ctx, nil, append([]string{"runs", "merge", shards[2], shards[0], shards[1], "--json"}, mergeArgs...)...)
	m := decodeSharded(t, "runs merge", mr)
	if mr.code != 0 || m.Status != "completed" || len(m.Merged) != 3 || m.NotRun != 0 {
		t.Fatalf("runs merge: exit %d, %+v\n%s", mr.code, m, mr.stderr)
	}
	sameAsWhole := func(what string, g shardedJSON) {
		t.Helper()
		if !reflect.DeepEqual(g.Totals, wholeRun.Totals) {
			t.Errorf("%s: totals %+v\nunsharded %+v", what, g.Totals, wholeRun.Totals)
		}
		if !reflect.DeepEqual(g.Tasks, wholeRun.Tasks) {
			t.Errorf("%s: tasks %+v\nunsharded %+v", what, g.Tasks, wholeRun.Tasks)
		}
		if len(g.Episodes) != len(wholeRun.Episodes) {
			t.Fatalf("%s: %d episodes, unsharded %d", what, len(g.Episodes), len(wholeRun.Episodes))
		}
		var runs []string
		for i, ep := range g.Episodes {
			w := wholeRun.Episodes[i]
			if ep.Task != w.Task || ep.Instance != w.Instance || ep.Attempt != w.Attempt || ep.Outcome != w.Outcome {
				t.Errorf("%s: slot %d is %+v, unsharded %+v", what, i, ep, w)
			}
			runs = append(runs, ep.Run)
		}
		slices.Sort(runs)
		want := slices.Sorted(slices.Values(shardRuns))
		if !slices.Equal(runs, want) {
			t.Errorf("%s: runs %v, the shards ran %v", what, runs, want)
		}
	}
	sameAsWhole("runs merge", m)
	sameAsWhole("runs get", decodeSharded(t, "runs get", c.run(ctx, nil, "runs", "get", m.Group, "--json")))

	again := c.run(ctx, nil, append([]string{"runs", "merge", shards[0], shards[1], shards[2]}, mergeArgs...)...)
	if again.code != 0 || !strings.Contains(again.stderr, "merged already: group "+m.Group) || !strings.Contains(again.stdout, "merged from shards") {
		t.Errorf("second merge: exit %d\n%s%s", again.code, again.stdout, again.stderr)
	}
	ls := c.run(ctx, nil, "runs", "ls", "--group")
	if !strings.Contains(ls.stdout, m.Group) || !strings.Contains(ls.stdout, "(shard 2/3) merged into "+m.Group) {
		t.Errorf("runs ls --group:\n%s", ls.stdout)
	}
	csv := c.run(ctx, nil, "runs", "export", m.Group, "--format", "csv")
	if lines := strings.Count(strings.TrimSpace(csv.stdout), "\n"); csv.code != 0 || lines != 8 {
		t.Errorf("runs export: exit %d, %d rows\n%s%s", csv.code, lines, csv.stdout, csv.stderr)
	}
	shard := decodeSharded(t, "runs get of a merged shard", c.run(ctx, nil, "runs", "get", shards[0], "--json"))
	if len(shard.Episodes) != 3 || shard.NotRun != 0 {
		t.Errorf("merged shard 1/3: %d episodes, %d not run", len(shard.Episodes), shard.NotRun)
	}

	return wholeRun.Group, shards, m.Group
}
