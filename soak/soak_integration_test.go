//go:build integration

package soak_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/soak"
)

// config is a small soak of the runtime image and binary of this checkout, isolated from the
// user's config file.
func config(t *testing.T, episodes int, kinds ...soak.Kind) soak.Config {
	t.Helper()
	dockertest.Require(t)
	image, bin := dockertest.RuntimeImage(t)
	eng, err := soak.NewDocker("")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	return soak.Config{
		Binary: bin, Dir: t.TempDir(), Engine: eng, Image: image, Episodes: episodes, Kinds: kinds,
		Env: append(os.Environ(), "AGENTENV_CONFIG="), RoundTimeout: 5 * time.Minute, Seed: 1,
	}
}

// checkGone fails if anything of the soak's rounds is still on the engine.
func checkGone(t *testing.T, cfg soak.Config, rep soak.Report) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, r := range rep.Rounds {
		if r.Owner == "" {
			t.Errorf("round %d: no owner", r.Number)
			continue
		}
		left, err := cfg.Engine.List(ctx, map[string]string{agentenv.LabelOwner: r.Owner})
		if err != nil {
			t.Fatal(err)
		}
		if len(left) > 0 {
			t.Errorf("round %d left %v after the soak", r.Number, left)
			_ = cfg.Engine.RemoveAll(ctx, map[string]string{agentenv.LabelOwner: r.Owner})
		}
	}
}

// TestSoakEveryKind runs one small round of each kind; each must hold.
func TestSoakEveryKind(t *testing.T) {
	cfg := config(t, 4, soak.Kinds...)
	rep, err := soak.Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkGone(t, cfg, rep)
	if len(rep.Rounds) != 4 {
		t.Fatalf("ran %d rounds, want 4", len(rep.Rounds))
	}
	for _, r := range rep.Rounds {
		if !r.Holds() {
			t.Errorf("round %d (%s) does not hold: %s", r.Number, r.Kind, r.Failure())
		}
		if r.Kind != soak.Steady && len(r.Injected) == 0 {
			t.Errorf("round %d (%s) injected nothing", r.Number, r.Kind)
		}
	}
	if rep.Rounds[0].Passed != 4 {
		t.Errorf("steady round: %d passed, want 4", rep.Rounds[0].Passed)
	}
	if len(rep.Rounds[1].Hit) != 1 {
		t.Errorf("kill round hit %v, want one episode", rep.Rounds[1].Hit)
	}
	if rep.Rounds[3].GCExit == nil {
		t.Error("crash round ran no gc")
	}
	if !rep.Holds {
		t.Errorf("soak does not hold: %s", rep.First)
	}
}

// TestSoakReportsALeakyProvider: a provider whose every terminate fails leaves the episode's
// sandboxes behind; the soak must count them, judge the warnings true, not hold, and still
// remove what was left.
func TestSoakReportsALeakyProvider(t *testing.T) {
	cfg := config(t, 1, soak.Steady)
	cfg.Env = append(cfg.Env, "AGENTENV_FAULTS=docker/terminate:*:error")
	rep, err := soak.Run(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	checkGone(t, cfg, rep)
	if rep.Holds || len(rep.Rounds) != 1 {
		t.Fatalf("a leaky provider: Holds %v over %d rounds, want false over 1", rep.Holds, len(rep.Rounds))
	}
	r := rep.Rounds[0]
	if left := r.Count(); left["container"] == 0 || left["network"] == 0 {
		t.Errorf("leftovers %v: want the episode's containers and network", r.Leftovers)
	}
	truthful, wrong := 0, 0
	for _, w := range r.Warnings {
		if w.True {
			truthful++
		} else {
			wrong++
		}
	}
	if truthful == 0 || wrong != 0 {
		t.Errorf("warnings: %d true, %d false; want some true and no false: %+v", truthful, wrong, r.Warnings)
	}
	if len(r.Removed) != len(r.Leftovers) {
		t.Errorf("soak removed %v, want %v", r.Removed, r.Leftovers)
	}
}
