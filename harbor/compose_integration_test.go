//go:build integration

package harbor

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/docker"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/task"
)

// TestComposeRuns runs the corpus's compose task through the task runner on the engine: the
// network, the db service (waiting for its healthcheck) and main built from environment/ on
// it; the oracle scores 1, nop 0, and no container, network or volume of either run is left
// (the built image stays cached by design).
func TestComposeRuns(t *testing.T) {
	cli := dockertest.Require(t)
	dir := t.TempDir()
	led, err := bolt.Open(t.Context(), filepath.Join(dir, "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	dp, err := docker.New(docker.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	m, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"docker": dp}, ReclaimWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := &task.Runner{Manager: m, Ledger: led, Workdir: filepath.Join(dir, "work"), DrainTimeout: 30 * time.Second, ImageMap: localImages}
	for agent, want := range map[string]float64{AgentOracle: 1, AgentNop: 0} {
		t.Run(agent, func(t *testing.T) {
			tk, err := LoadNative("testdata/corpus/compose-postgres", Options{Agent: agent})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
			defer cancel()
			sum, err := r.Run(ctx, tk, task.RunOptions{Provider: "docker"})
			if err != nil {
				t.Fatalf("Run = %v", err)
			}
			ep := sum.Episodes[0]
			if ep.Score == nil || *ep.Score != want {
				t.Errorf("score %v, want %g (outcome %s, error %q)", ep.Score, want, ep.Outcome, ep.Error)
			}
			for _, s := range ep.Steps {
				if s.Error != "" {
					t.Logf("step %s: %s", s.ID, s.Error)
				}
			}
			lctx, lcancel := context.WithTimeout(context.Background(), time.Minute)
			defer lcancel()
			left, err := dockertest.Leftovers(lctx, cli, map[string]string{agentenv.LabelRun: ep.Run})
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range left {
				if !strings.HasPrefix(l, "image ") {
					t.Errorf("run %s left %s", ep.Run, l)
				}
			}
		})
	}
}
