package lifecycle_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/buildctx"
	"github.com/agentenv/agentenv/internal/fault"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
)

// buildContext writes a small build context and returns its Build.
func buildContext(t *testing.T) agentenv.Build {
	t.Helper()
	dir := t.TempDir()
	for p, c := range map[string]string{"Dockerfile": "FROM debian:bookworm-slim\nCOPY run.sh /\n", "run.sh": "echo hi\n"} {
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return agentenv.Build{Context: dir, BaseMap: map[string]string{"debian:bookworm-slim": "agentenv-debian:bookworm"}}
}

func buildImage(t *testing.T, m *lifecycle.Manager, b agentenv.Build) (agentenv.Record, string, bool) {
	t.Helper()
	rec, image, built, err := m.BuildImage(t.Context(), lifecycle.BuildRequest{Provider: "fake", Build: b})
	if err != nil {
		t.Fatalf("BuildImage: %v", err)
	}
	return rec, image, built
}

// A build makes an image record (intent first, live with its reference, the digest label,
// released to its TTL); a second call of the same context reuses it, from this process or
// another; a changed context, or a record that is gone or about to expire, builds again.
func TestBuildImageBuildsOnceAndReuses(t *testing.T) {
	r := newRig(t)
	b := buildContext(t)
	digest, err := buildctx.Digest(b)
	if err != nil {
		t.Fatal(err)
	}
	rec, image, built := buildImage(t, r.mgr, b)
	if !built || rec.Kind != agentenv.KindImage || rec.Role != agentenv.RoleBuild || !strings.HasPrefix(rec.ID, "img-") ||
		rec.Labels[agentenv.LabelBuildDigest] != digest || rec.Attrs[agentenv.AttrImageRef] != image || image == "" {
		t.Fatalf("first build: built %v, record %+v, image %q", built, rec, image)
	}
	if got, ok := r.fake.Built(image); !ok || got != digest {
		t.Errorf("fake built %q (%v), want digest %s", got, ok, digest)
	}
	stored, err := r.led.Get(t.Context(), rec.ID)
	if err != nil || stored.State != agentenv.StateLive || !stored.Owner.IsZero() || time.Until(stored.Expires) < lifecycle.BuildTTL-time.Minute {
		t.Errorf("stored record %+v, %v: want live, released, expiring in %s", stored, err, lifecycle.BuildTTL)
	}

	again, image2, built := buildImage(t, r.mgr, b)
	if built || again.ID != rec.ID || image2 != image {
		t.Errorf("second build: built %v, record %s, image %q; want %s reused", built, again.ID, image2, rec.ID)
	}
	other := r.manager(t, agentenv.Owner{Host: "other-host", PID: 2, Start: 2}, time.Now)
	if again, _, built := buildImage(t, other, b); built || again.ID != rec.ID {
		t.Errorf("build from another process: built %v, record %s; want %s reused", built, again.ID, rec.ID)
	}
	if n := r.fake.Calls("create_image"); n != 1 {
		t.Errorf("create_image called %d times, want 1", n)
	}

	b2 := b
	b2.Args = map[string]string{"V": "1"}
	if changed, _, built := buildImage(t, r.mgr, b2); !built || changed.ID == rec.ID {
		t.Errorf("build with an argument: built %v, record %s; want a new build", built, changed.ID)
	} else if _, err := r.mgr.Teardown(t.Context(), []agentenv.Record{changed}); err != nil {
		t.Fatal(err)
	}

	late := r.manager(t, alive, func() time.Time { return time.Now().Add(lifecycle.BuildTTL - 30*time.Minute) })
	if soon, _, built := buildImage(t, late, b); !built || soon.ID == rec.ID {
		t.Errorf("build when the record expires within the hour: built %v, record %s; want a new build", built, soon.ID)
	} else if _, err := r.mgr.Teardown(t.Context(), []agentenv.Record{soon}); err != nil {
		t.Fatal(err)
	}

	if _, err := r.mgr.Teardown(t.Context(), []agentenv.Record{rec}); err != nil {
		t.Fatal(err)
	}
	rebuilt, _, built := buildImage(t, r.mgr, b)
	if !built || rebuilt.ID == rec.ID {
		t.Errorf("build after teardown: built %v, record %s; want a new build", built, rebuilt.ID)
	}
	// The record live but its image gone from the provider: built again.
	if err := r.fake.Terminate(t.Context(), rebuilt.ID); err != nil {
		t.Fatal(err)
	}
	if last, _, built := buildImage(t, r.mgr, b); !built || last.ID == rebuilt.ID {
		t.Errorf("build after the image vanished: built %v, record %s; want a new build", built, last.ID)
	} else if _, err := r.mgr.Teardown(t.Context(), []agentenv.Record{last, rebuilt}); err != nil {
		t.Fatal(err)
	}
	r.assertClean(t, "after the builds' teardown")
}

// Concurrent builds of one context in one process build once and all get its record.
func TestBuildImageConcurrentBuildsOnce(t *testing.T) {
	r := newRig(t)
	b := buildContext(t)
	var wg sync.WaitGroup
	ids := make([]string, 8)
	builds := make([]bool, 8)
	for i := range ids {
		wg.Go(func() {
			rec, _, built, err := r.mgr.BuildImage(t.Context(), lifecycle.BuildRequest{Provider: "fake", Build: b})
			if err != nil {
				t.Errorf("BuildImage %d: %v", i, err)
			}
			ids[i], builds[i] = rec.ID, built
		})
	}
	wg.Wait()
	nBuilt := 0
	for i := range ids {
		if ids[i] != ids[0] {
			t.Errorf("call %d got record %s, call 0 %s", i, ids[i], ids[0])
		}
		if builds[i] {
			nBuilt++
		}
	}
	if n := r.fake.Calls("create_image"); n != 1 || nBuilt != 1 {
		t.Errorf("create_image called %d times, %d calls say they built; want 1 and 1", n, nBuilt)
	}
}

// A build cancelled while the provider builds is undone: what it made is terminated and the
// record ends gone. A build that would hang is stopped with its caller at once, rather than
// waited out (a sandbox's create is waited for ReclaimWait): it ends gone, nothing left.
func TestBuildImageCancelled(t *testing.T) {
	t.Run("finished after the cancel", func(t *testing.T) {
		r := newRig(t)
		ctx, cancel := context.WithCancel(t.Context())
		defer cancel()
		r.fp.Plan = fault.NewPlan(fault.Rule{Op: agentenv.OpCreateImage, Call: 1, Action: fault.Cancel, Cancel: cancel})
		rec, _, _, err := r.mgr.BuildImage(ctx, lifecycle.BuildRequest{Provider: "fake", Build: buildContext(t)})
		if !errors.Is(err, context.Canceled) || rec.ID == "" {
			t.Fatalf("BuildImage = %s, %v; want its record and context.Canceled", rec.ID, err)
		}
		if r.fake.Calls("terminate") == 0 {
			t.Error("the build's image was never terminated")
		}
		r.assertClean(t, "after a cancelled build")
	})
	t.Run("hanging, stopped with its caller", func(t *testing.T) {
		r := newRig(t)
		ctx, cancel := context.WithCancel(t.Context())
		r.fp.Plan = fault.NewPlan(fault.Rule{Op: agentenv.OpCreateImage, Call: 1, Action: fault.Hang})
		time.AfterFunc(50*time.Millisecond, cancel)
		start := time.Now()
		rec, _, _, err := r.mgr.BuildImage(ctx, lifecycle.BuildRequest{Provider: "fake", Build: buildContext(t), Timeout: time.Minute})
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("BuildImage = %v, want context.Canceled", err)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("a cancelled build returned after %s: it was waited out, not stopped", took)
		}
		if got, err := r.led.Get(t.Context(), rec.ID); err != nil || got.State != agentenv.StateGone {
			t.Fatalf("record %+v, %v; want gone", got, err)
		}
		waitPending(t, r.mgr)
		r.assertClean(t, "after a stopped build")
	})
}

// A provider that builds no images, and a context that is not there, are ErrInvalid with no
// record left live.
func TestBuildImageRefused(t *testing.T) {
	r := newRig(t)
	missing := agentenv.Build{Context: filepath.Join(t.TempDir(), "nope")}
	if _, _, _, err := r.mgr.BuildImage(t.Context(), lifecycle.BuildRequest{Provider: "fake", Build: missing}); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "nope") {
		t.Errorf("BuildImage of a missing context = %v, want ErrInvalid naming it", err)
	}
	// The fake refuses it too, when asked directly.
	if _, _, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Kind: agentenv.KindImage, Build: &missing}); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Create of an image of a missing context = %v, want ErrInvalid", err)
	}
	if _, _, _, err := r.mgr.BuildImage(t.Context(), lifecycle.BuildRequest{Provider: "fake", Build: buildContext(t), TTL: -time.Second}); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("BuildImage with a negative TTL = %v, want ErrInvalid", err)
	}
	r.assertClean(t, "after refused builds")

	m, err := lifecycle.New(lifecycle.Config{Ledger: r.led, Owner: alive,
		Providers: map[string]agentenv.Provider{"fake": fake.New("fake", agentenv.AbilityImageBuild)}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, _, err = m.BuildImage(t.Context(), lifecycle.BuildRequest{Provider: "fake", Build: buildContext(t)})
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "builds no images from a Dockerfile") {
		t.Errorf("BuildImage on a provider without images = %v, want ErrInvalid saying so", err)
	}
}

// Built images are listed, and pruned by record: without All only those expiring within a day
// (a dry run selects and removes nothing), with All the rest; other records are never touched.
func TestPruneBuilds(t *testing.T) {
	r := newRig(t)
	soon, long := buildContext(t), buildContext(t)
	long.Args = map[string]string{"V": "long"}
	soonRec, _, _, err := r.mgr.BuildImage(t.Context(), lifecycle.BuildRequest{Provider: "fake", Build: soon, TTL: 12 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	longRec, _, _ := buildImage(t, r.mgr, long)
	box, _, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "x"}})
	if err != nil {
		t.Fatal(err)
	}
	ids := func(recs []agentenv.Record) []string {
		var out []string
		for _, rec := range recs {
			out = append(out, rec.ID)
		}
		return out
	}
	listed, err := r.mgr.BuiltImages(t.Context())
	if err != nil || !slices.Equal(ids(listed), []string{longRec.ID, soonRec.ID}) {
		t.Fatalf("BuiltImages = %v, %v; want %s then %s, newest first", ids(listed), err, longRec.ID, soonRec.ID)
	}

	sel, rc, err := r.mgr.PruneBuilds(t.Context(), lifecycle.PruneOptions{DryRun: true})
	if err != nil || !slices.Equal(ids(sel), []string{soonRec.ID}) || len(rc.Items) != 0 || r.fake.Calls("terminate") != 0 {
		t.Fatalf("dry run: selected %v, receipt %v, %v, %d terminates; want %s and nothing done", ids(sel), rc.Items, err, r.fake.Calls("terminate"), soonRec.ID)
	}
	sel, rc, err = r.mgr.PruneBuilds(t.Context(), lifecycle.PruneOptions{})
	if err != nil || !slices.Equal(ids(sel), []string{soonRec.ID}) || len(rc.Items) != 1 || rc.Items[0].Outcome != agentenv.OutcomeTerminated {
		t.Fatalf("prune: selected %v, receipt %+v, %v; want %s terminated", ids(sel), rc.Items, err, soonRec.ID)
	}
	sel, rc, err = r.mgr.PruneBuilds(t.Context(), lifecycle.PruneOptions{All: true})
	if err != nil || !slices.Equal(ids(sel), []string{longRec.ID}) || !rc.Clean() || len(rc.Items) != 1 {
		t.Fatalf("prune --all: selected %v, receipt %+v, %v; want %s terminated", ids(sel), rc.Items, err, longRec.ID)
	}
	if listed, _ := r.mgr.BuiltImages(t.Context()); len(listed) != 0 {
		t.Errorf("after prune --all BuiltImages = %v", ids(listed))
	}
	if got, err := r.led.Get(t.Context(), box.ID); err != nil || got.State != agentenv.StateLive {
		t.Errorf("the sandbox %s is %v (%v) after the prunes; want it live", box.ID, got.State, err)
	}
	if _, err := r.mgr.Teardown(t.Context(), []agentenv.Record{box}); err != nil {
		t.Fatal(err)
	}
}
