package explorer_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/explorer"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
)

// rig is an explorer over a bbolt ledger in a temporary folder, served by httptest.
type rig struct {
	ledger  agentenv.Ledger
	runsDir string
	x       *explorer.Explorer
	srv     *httptest.Server
	host    string
}

func newRig(t testing.TB, cfg explorer.Config) *rig {
	t.Helper()
	dir := t.TempDir()
	l, err := bolt.Open(context.Background(), filepath.Join(dir, "ledger.bolt"), nil)
	if err != nil {
		t.Fatalf("open ledger: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	r := &rig{ledger: l, runsDir: filepath.Join(dir, "runs")}
	srv := httptest.NewUnstartedServer(nil)
	r.host = srv.Listener.Addr().String()
	cfg.Ledger, cfg.RunsDir = l, r.runsDir
	if cfg.Hosts == nil {
		if cfg.Hosts, err = explorer.Hosts(r.host); err != nil {
			t.Fatal(err)
		}
	}
	if r.x, err = explorer.New(cfg); err != nil {
		t.Fatalf("explorer.New = %v", err)
	}
	srv.Config.Handler = r.x.Handler()
	srv.Start()
	r.srv = srv
	t.Cleanup(func() {
		srv.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := r.x.Close(ctx); err != nil {
			t.Errorf("Close = %v", err)
		}
	})
	return r
}

// get fetches path and returns the status and body.
func (r *rig) get(t testing.TB, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(r.srv.URL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	return resp.StatusCode, string(b)
}

// getJSON fetches an API path into v and fails t unless it answers 200.
func (r *rig) getJSON(t testing.TB, path string, v any) {
	t.Helper()
	resp, err := http.Get(r.srv.URL + path)
	if err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s = %s", path, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", path, err)
	}
}

// putGroup writes the run documents of one invocation of task name with k episodes, the
// first created at start; outcome(i) picks episode i's score (nil: still running). Each run's
// prompt_agent step has a trajectory file with lines.
func (r *rig) putGroup(t testing.TB, name string, k int, start time.Time, score func(i int) *float64, lines ...string) []string {
	t.Helper()
	var ids []string
	for i := 1; i <= k; i++ {
		id := fmt.Sprintf("run-%s-%d-%d", name, start.UnixNano(), i)
		ids = append(ids, id)
		created := start.Add(time.Duration(i-1) * 10 * time.Millisecond)
		s := score(i)
		run := agentenv.Run{ID: id, Task: name, TaskDigest: "sha256:" + name, Status: "completed", Score: s,
			Attrs: map[string]string{"episode": fmt.Sprint(i), "file": "examples/" + name + "/task.yaml"}, Created: created,
			Ended: created.Add(time.Duration(i) * time.Second)}
		half := 0.5
		run.Steps = []agentenv.StepRecord{
			{ID: "env", Type: "deploy_env", Status: "passed", Started: created, Ended: created.Add(time.Second), Outputs: map[string]string{"deployment_id": "dep-" + id}},
			{ID: "agent", Type: "prompt_agent", Status: "passed", Started: created, Ended: created.Add(time.Second)},
			{ID: "rows", Type: "sql", Status: "passed", Score: &half, Outputs: map[string]string{"score": "0.5",
				"rows": `[{"check":"rows","expected":"[[\"groceries\"]]","got":"[[\"<b>x</b>\"]]","pass":false},{"check":"count","expected":"1","got":"1","pass":true}]`}},
		}
		switch {
		case s == nil:
			run.Status, run.Ended = "running", time.Time{}
			run.Steps[2].Status, run.Steps[2].Score = "running", nil
		case *s == 0:
			run.Status, run.Error = "failed", "step env: deploy: engine said <no>"
			run.Steps[0].Status = "failed"
		}
		run.Receipt = &agentenv.Receipt{Items: []agentenv.ReceiptItem{{Record: "rec-" + id, SandboxID: "c0ffee", Provider: "docker", Kind: agentenv.KindSandbox, Role: "gateway", Outcome: agentenv.OutcomeTerminated}},
			Started: run.Ended, Finished: run.Ended.Add(300 * time.Millisecond)}
		if len(lines) > 0 {
			dir := filepath.Join(r.runsDir, id)
			if err := os.MkdirAll(dir, 0o700); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "agent.trajectory.ndjson")
			if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			run.Steps[1].Outputs = map[string]string{"trajectory": p, "tool_calls": "1"}
		}
		if err := r.ledger.Runs().Put(context.Background(), run); err != nil {
			t.Fatalf("put run: %v", err)
		}
	}
	return ids
}

func ptr(f float64) *float64 { return &f }

// fakeCollector and fakeDeployer record their calls.
type fakeCollector struct{ calls []lifecycle.GCOptions }

func (f *fakeCollector) GC(_ context.Context, o lifecycle.GCOptions) (lifecycle.GCReport, error) {
	f.calls = append(f.calls, o)
	return lifecycle.GCReport{Actions: []lifecycle.GCAction{{Record: "rec-<leak>", Provider: "docker", Reason: "owner dead"}}, Kept: 2}, nil
}

type fakeDeployer struct{ torn []string }

func (f *fakeDeployer) Teardown(_ context.Context, id string) (agentenv.Receipt, error) {
	f.torn = append(f.torn, id)
	return agentenv.Receipt{Items: []agentenv.ReceiptItem{{Record: "r", Outcome: agentenv.OutcomeTerminated}}}, nil
}

func jsonDecode(resp *http.Response, v any) error { return json.NewDecoder(resp.Body).Decode(v) }
