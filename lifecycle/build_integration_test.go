//go:build integration

package lifecycle_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/docker"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/provider/providertest"
)

// dockerBuildRig is a manager on the real engine whose owner is this test's own, so that
// everything it makes is found by its owner label.
func dockerBuildRig(t *testing.T) (*lifecycle.Manager, agentenv.Ledger) {
	t.Helper()
	cli := dockertest.Require(t)
	owner := agentenv.Owner{Host: providertest.NewID(), PID: os.Getpid(), Start: 1}
	dockertest.CheckNoLeftovers(t, cli, map[string]string{agentenv.LabelOwner: owner.String()})
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	dp, err := docker.New(docker.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dp.Close() })
	m, err := lifecycle.New(lifecycle.Config{Ledger: led, Owner: owner, Providers: map[string]agentenv.Provider{"docker": dp}, ReclaimWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, led
}

func dockerBuild(t *testing.T, dockerfile string) agentenv.Build {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "Dockerfile"), []byte(dockerfile), 0o644); err != nil {
		t.Fatal(err)
	}
	return agentenv.Build{Context: dir, BaseMap: map[string]string{"debian:bookworm-slim": "agentenv-debian:bookworm"}}
}

// On docker: the first BuildImage builds, the second reuses; a sandbox runs the image; the
// teardown of the image record removes it.
func TestBuildImageOnDocker(t *testing.T) {
	m, _ := dockerBuildRig(t)
	b := dockerBuild(t, "FROM debian:bookworm-slim\nARG WORD=x\nRUN echo $WORD > /word\n")
	b.Args = map[string]string{"WORD": "built"}
	req := lifecycle.BuildRequest{Provider: "docker", Build: b, Timeout: 2 * time.Minute}
	rec, image, built, err := m.BuildImage(t.Context(), req)
	if err != nil || !built {
		t.Fatalf("BuildImage = %v, built %v", err, built)
	}
	again, image2, built, err := m.BuildImage(t.Context(), req)
	if err != nil || built || again.ID != rec.ID || image2 != image {
		t.Errorf("second BuildImage = %s %s built %v, %v; want %s reused", again.ID, image2, built, err, rec.ID)
	}
	box, _, err := m.Create(t.Context(), lifecycle.CreateRequest{Provider: "docker", Spec: agentenv.SandboxSpec{Image: image, Command: []string{"sleep", "60"}}})
	if err != nil {
		t.Fatalf("Create from %s: %v", image, err)
	}
	if got, err := m.ReadFile(t.Context(), box.ID, "/word"); err != nil || string(got) != "built\n" {
		t.Errorf("/word = %q, %v", got, err)
	}
	rc, err := m.Teardown(t.Context(), []agentenv.Record{box, rec})
	if err != nil || !rc.Clean() {
		t.Errorf("teardown = %+v, %v", rc, err)
	}
}

// A BuildImage cancelled mid-RUN ends with its record gone and nothing on the engine (the
// create-or-reclaim rule: the build finishes within the reclaim wait and is undone).
func TestBuildImageOnDockerCancelled(t *testing.T) {
	m, led := dockerBuildRig(t)
	ctx, cancel := context.WithTimeout(t.Context(), time.Second)
	defer cancel()
	rec, _, _, err := m.BuildImage(ctx, lifecycle.BuildRequest{Provider: "docker", Build: dockerBuild(t, "FROM debian:bookworm-slim\nRUN sleep 5\n")})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("BuildImage = %v, want the deadline", err)
	}
	got, err := led.Get(t.Context(), rec.ID)
	if err != nil || got.State != agentenv.StateGone {
		t.Errorf("record %s is %s (%v), want gone", rec.ID, got.State, err)
	}
	if !strings.HasPrefix(rec.ID, "img-") {
		t.Errorf("record id %q", rec.ID)
	}
}
