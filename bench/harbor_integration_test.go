//go:build integration

package bench

import (
	"context"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/testbin"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/soak"
)

// TestHarborMeasures takes the Harbor measures once on the engine: every sample is there, the
// cold check builds images and the warm one none, and nothing is left: no record in the
// bench's ledger that is not gone, no build image on the engine.
func TestHarborMeasures(t *testing.T) {
	dockertest.Require(t)
	bin := testbin.Agentenv(t)
	// The corpus's allowlist task runs agentenv's egress proxy: this checkout's runtime image,
	// not whatever agentenv:dev the engine holds (a fresh one holds none).
	runtime, _ := dockertest.RuntimeImage(t)
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	eng, err := soak.NewDocker("")
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{Binary: bin, Dir: dir, EnvFile: "env.yaml", Image: runtime, RepoDir: repo, Engine: eng, Reps: 1, Only: []string{"harbor"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range res.Problems {
		t.Errorf("problem: %s", p)
	}
	for _, name := range []string{HarborEpisodeAgentenv, HarborEpisodeByHand, HarborCorpusCold, HarborCorpusWarm} {
		if m := res.Measure(name); len(m.Samples) != 1 {
			t.Errorf("%s: %d samples, want 1 (skipped: %q)", name, len(m.Samples), m.Skipped)
		}
	}
	if len(res.Harbor) != 2 {
		t.Fatalf("corpus figures = %+v, want cold and warm", res.Harbor)
	}
	if cold, warm := res.Harbor[0], res.Harbor[1]; cold.Builds == 0 || warm.Builds != 0 || cold.Tasks != warm.Tasks {
		t.Errorf("cold %+v, warm %+v: want builds when cold, none when warm", cold, warm)
	}

	out, err := exec.CommandContext(ctx, bin, "--ledger", filepath.Join(dir, "ledger.bolt"), "ledger", "ls", "--all", "--json").Output()
	if err != nil {
		t.Fatal(err)
	}
	var recs []agentenv.Record
	if err := json.Unmarshal(out, &recs); err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.State != agentenv.StateGone {
			t.Errorf("record %s (%s, %s) is %s after the bench", r.ID, r.Kind, r.Role, r.State)
		}
		if ref := r.Attrs["image.ref"]; r.Kind == agentenv.KindImage && ref != "" {
			if exec.CommandContext(ctx, "docker", "image", "inspect", ref).Run() == nil {
				t.Errorf("build image %s of record %s is still on the engine", ref, r.ID)
			}
		}
	}
}
