package ledgertest

import (
	"errors"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/google/go-cmp/cmp"
)

func testDeployments(t *testing.T, l agentenv.Ledger) {
	at := func(i int) time.Time { return base().Add(time.Duration(i) * time.Minute) }
	full := agentenv.Deployment{
		ID: "dep-3", Env: "notes", EnvFile: "examples/notes/env.yaml", EnvDigest: "sha256:abc",
		Provider: "docker,modal", Winner: "docker", Mode: "container", State: "live", Run: "run-1",
		GatewayURL: "http://127.0.0.1:49200", TokenHash: "sha256:def", Servers: []string{"notes", "db-mcp"},
		Tools: 7, URLs: map[string]string{"db_web": "http://127.0.0.1:49201"}, Error: "",
		Receipt: &agentenv.Receipt{
			Items: []agentenv.ReceiptItem{{Record: "rec-1", SandboxID: "c1", Provider: "docker", Kind: agentenv.KindSandbox,
				Role: "gateway", Outcome: agentenv.OutcomeFailed, Reason: "engine: 500"}},
			Started: at(3), Finished: at(4),
		},
		Created: at(2), Expires: at(60), Updated: at(3),
	}
	docs := []agentenv.Deployment{
		{ID: "dep-2", State: "failed", Created: at(1)},
		full,
		{ID: "dep-1", State: "live", Created: at(0)},
	}
	testDocStore(t, l.Deployments(), docs, "dep-3", "live", []string{"dep-3", "dep-2", "dep-1"}, []string{"dep-3", "dep-1"},
		func(d agentenv.Deployment) agentenv.Deployment { d.State = "torn_down"; return d })
}

func testRuns(t *testing.T, l agentenv.Ledger) {
	at := func(i int) time.Time { return base().Add(time.Duration(i) * time.Minute) }
	score, half := 1.0, 0.5
	full := agentenv.Run{
		ID: "run-b", Task: "notes-task", TaskDigest: "sha256:123", Status: "completed",
		Steps: []agentenv.StepRecord{
			{ID: "deploy", Type: "deploy_env", Status: "passed", Started: at(0), Ended: at(1), Outputs: map[string]string{"url": "x"}},
			{ID: "verify", Type: "verify_file", Status: "failed", Score: &half, Error: "missing"},
		},
		Score: &score, Attrs: map[string]string{"k": "8"}, Created: at(5), Ended: at(9),
		Receipt: &agentenv.Receipt{Started: at(8), Finished: at(9)},
	}
	docs := []agentenv.Run{
		{ID: "run-c", Status: "completed", Created: at(3)},
		full,
		{ID: "run-a", Status: "failed", Created: at(1)},
	}
	testDocStore(t, l.Runs(), docs, "run-b", "completed", []string{"run-b", "run-c", "run-a"}, []string{"run-b", "run-c"},
		func(r agentenv.Run) agentenv.Run { r.Status = "cancelled"; return r })
}

// testDocStore puts docs, gets the one with id full, and lists them. newest is the order of
// all of them, newest first; inState the order of those in state; change moves a document
// out of state.
func testDocStore[T agentenv.Doc](t *testing.T, s agentenv.DocStore[T], docs []T, full, state string, newest, inState []string, change func(T) T) {
	t.Helper()
	ctx := t.Context()
	byID := map[string]T{}
	for _, d := range docs {
		if err := s.Put(ctx, d); err != nil {
			t.Fatalf("Put(%s) = %v", d.DocID(), err)
		}
		byID[d.DocID()] = d
	}
	got, err := s.Get(ctx, full)
	if err != nil {
		t.Fatalf("Get(%s) = %v", full, err)
	}
	if diff := cmp.Diff(byID[full], got, microseconds()); diff != "" {
		t.Errorf("Get(%s) after Put differs (-put +got):\n%s", full, diff)
	}
	if _, err := s.Get(ctx, "absent"); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Get(absent) = %v, want ErrNotFound", err)
	}

	list := func(states []string, limit int, want []string) {
		t.Helper()
		ds, err := s.List(ctx, states, limit)
		if err != nil {
			t.Errorf("List(%q, %d) = %v", states, limit, err)
			return
		}
		got := []string{}
		for _, d := range ds {
			got = append(got, d.DocID())
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("List(%q, %d) ids (-want +got):\n%s", states, limit, diff)
		}
	}
	list(nil, 0, newest)
	list(nil, -1, newest)
	list(nil, 2, newest[:2])
	list(nil, 10, newest)
	list([]string{state}, 0, inState)
	list([]string{state}, 1, inState[:1])
	list([]string{"no-such-state"}, 0, []string{})
	list([]string{"no-such-state", state}, 0, inState)

	// Replacing a document changes its state and keeps its place.
	moved := change(byID[inState[0]])
	if err := s.Put(ctx, moved); err != nil {
		t.Fatalf("Put(%s) again = %v", moved.DocID(), err)
	}
	list([]string{state}, 0, inState[1:])
	list(nil, 0, newest)
	if got, err := s.Get(ctx, moved.DocID()); err != nil || got.DocState() != moved.DocState() {
		t.Errorf("Get(%s) after replace = state %q, %v; want state %q", moved.DocID(), got.DocState(), err, moved.DocState())
	}
}

func testDocsInvalid(t *testing.T, l agentenv.Ledger) {
	if err := l.Deployments().Put(t.Context(), agentenv.Deployment{State: "live"}); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Deployments().Put(empty id) = %v, want ErrInvalid", err)
	}
	if err := l.Runs().Put(t.Context(), agentenv.Run{Status: "running"}); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Runs().Put(empty id) = %v, want ErrInvalid", err)
	}
	// Deployments and runs are separate stores: the same id in both is two documents.
	if err := l.Deployments().Put(t.Context(), agentenv.Deployment{ID: "same", State: "live"}); err != nil {
		t.Fatalf("Deployments().Put(same) = %v", err)
	}
	if _, err := l.Runs().Get(t.Context(), "same"); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Runs().Get(same) after Deployments().Put(same) = %v, want ErrNotFound", err)
	}
}

func testClose(t *testing.T, l agentenv.Ledger) {
	mustPut(t, l, agentenv.Record{ID: "rec-close", State: agentenv.StateLive})
	if err := l.Close(); err != nil {
		t.Fatalf("Close() = %v", err)
	}
	if _, err := l.Get(t.Context(), "rec-close"); err == nil {
		t.Errorf("Get after Close = nil error, want an error")
	}
	if err := l.Put(t.Context(), agentenv.Record{ID: "rec-late", State: agentenv.StateLive}); err == nil {
		t.Errorf("Put after Close = nil error, want an error")
	}
	if err := l.Deployments().Put(t.Context(), agentenv.Deployment{ID: "dep-late"}); err == nil {
		t.Errorf("Deployments().Put after Close = nil error, want an error")
	}
}
