package lifecycle_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
)

// imageRequest asks for an image of base "pg" with one file, as a snapshot of a service DB is.
func imageRequest() lifecycle.CreateRequest {
	return lifecycle.CreateRequest{Provider: "fake", Kind: agentenv.KindImage, Role: "state_snapshot",
		Spec: agentenv.SandboxSpec{Image: "pg", Files: map[string][]byte{"/agentenv/snapshot.sql": []byte("SELECT 1;")}}}
}

// An image is built under a creating record written before the provider is called, becomes
// live with the reference that runs it, runs with its files, and goes in the teardown after the
// sandboxes that run it.
func TestImageRecordsIntentBeforeBuild(t *testing.T) {
	r := newRig(t)
	var atBuild []agentenv.Record
	spy := agentenv.Intercept(r.fake, func(ctx context.Context, op string, call func(context.Context) error) error {
		if op == agentenv.OpCreateImage {
			atBuild, _ = r.led.List(ctx, agentenv.Filter{})
		}
		return call(ctx)
	})
	m, err := lifecycle.New(lifecycle.Config{Ledger: r.led, Owner: alive, Providers: map[string]agentenv.Provider{"fake": spy}})
	if err != nil {
		t.Fatal(err)
	}
	r.mgr = m
	rec, sb, err := r.mgr.Create(t.Context(), imageRequest())
	if err != nil {
		t.Fatal(err)
	}
	if len(atBuild) != 1 || atBuild[0].ID != rec.ID || atBuild[0].State != agentenv.StateCreating || atBuild[0].Kind != agentenv.KindImage {
		t.Fatalf("records when the build began = %+v, want the image's, creating", atBuild)
	}
	if rec.State != agentenv.StateLive || sb.Image == "" || rec.Attrs[agentenv.AttrImageRef] != sb.Image || rec.Image != "pg" {
		t.Errorf("record = %s, attrs %v, image %q; want live with %s=%q and the base as its image", rec.State, rec.Attrs, rec.Image, agentenv.AttrImageRef, sb.Image)
	}
	box, _, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: sb.Image}})
	if err != nil {
		t.Fatalf("create a sandbox of the image: %v", err)
	}
	if got, err := r.mgr.ReadFile(t.Context(), box.ID, "/agentenv/snapshot.sql"); err != nil || string(got) != "SELECT 1;" {
		t.Errorf("the image's file in its sandbox = %q, %v", got, err)
	}
	rc, err := r.mgr.Teardown(t.Context(), []agentenv.Record{rec, box})
	if err != nil || len(rc.Items) != 2 || rc.Items[0].Record != box.ID || rc.Items[1].Kind != agentenv.KindImage {
		t.Errorf("teardown = %+v, %v; want the sandbox, then the image, both down", rc.Items, err)
	}
	if imgs := r.fake.Images(); len(imgs) != 0 {
		t.Errorf("images after the teardown: %v", imgs)
	}
	r.assertClean(t, "after teardown")
}

// A provider without the ability refuses the image before it makes anything, and the record
// ends gone.
func TestImageOnAProviderThatBuildsNone(t *testing.T) {
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	m, err := lifecycle.New(lifecycle.Config{Ledger: led, Owner: alive,
		Providers: map[string]agentenv.Provider{"fake": fake.New("fake", agentenv.AbilityImageBuild)}})
	if err != nil {
		t.Fatal(err)
	}
	if ok, _ := m.Supports("fake", agentenv.AbilityImageBuild); ok {
		t.Error("Supports(image_build) = true for a provider built without it")
	}
	rec, _, err := m.Create(t.Context(), imageRequest())
	if !errors.Is(err, agentenv.ErrInvalid) {
		t.Fatalf("Create(image) = %v, want ErrInvalid", err)
	}
	if got, _ := led.Get(t.Context(), rec.ID); got.State != agentenv.StateGone {
		t.Errorf("record = %s, want gone", got.State)
	}
}

// gc removes the image of a creator that died, and an expired image no record of this ledger
// names.
func TestGCCollectsImages(t *testing.T) {
	r := newRig(t)
	dead := r.manager(t, agentenv.Owner{Host: hostname(t), PID: 1 << 30, Start: 7}, time.Now)
	if _, _, err := dead.Create(t.Context(), imageRequest()); err != nil {
		t.Fatal(err)
	}
	past := time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)
	if _, err := r.fake.CreateImage(t.Context(), agentenv.ImageSpec{Name: "img-unrecorded", Base: "pg",
		Labels: map[string]string{agentenv.LabelRecord: "img-unrecorded", agentenv.LabelExpires: past}}); err != nil {
		t.Fatal(err)
	}
	if imgs := r.fake.Images(); len(imgs) != 2 {
		t.Fatalf("images before gc = %v, want two", imgs)
	}
	mine := r.manager(t, agentenv.Owner{Host: hostname(t), PID: 3, Start: 3}, time.Now)
	rep, err := mine.GC(t.Context(), lifecycle.GCOptions{})
	if err != nil || !rep.Clean() || len(rep.Actions) != 2 {
		t.Fatalf("GC = %+v, %v; want two images collected", rep, err)
	}
	if imgs := r.fake.Images(); len(imgs) != 0 {
		t.Errorf("images after gc: %v", imgs)
	}
	r.assertClean(t, "after gc")
}

// An image build whose creator died goes on in the engine after it: gc removes what it has made
// so far and keeps the record abandoned, in flight, until the create timeout; then it closes it.
func TestGCWatchesAnImageBuildInFlight(t *testing.T) {
	r := newRig(t)
	dead := r.manager(t, agentenv.Owner{Host: hostname(t), PID: 1 << 30, Start: 7}, time.Now)
	req := imageRequest()
	req.ID = "snap-inflight"
	if _, _, err := dead.Create(t.Context(), req); err != nil {
		t.Fatal(err)
	}
	// The creator died before it recorded the image live.
	if _, err := r.led.Update(t.Context(), req.ID, func(x *agentenv.Record) error { x.State = agentenv.StateCreating; return nil }); err != nil {
		t.Fatal(err)
	}
	gc := func(now time.Time) lifecycle.GCReport {
		t.Helper()
		m, err := lifecycle.New(lifecycle.Config{Ledger: r.fl, Providers: map[string]agentenv.Provider{"fake": r.fp},
			Owner: agentenv.Owner{Host: hostname(t), PID: 3, Start: 3}, CreateTimeout: time.Minute, Now: func() time.Time { return now }})
		if err != nil {
			t.Fatal(err)
		}
		rep, err := m.GC(t.Context(), lifecycle.GCOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return rep
	}
	rep := gc(time.Now())
	if len(rep.InFlight) != 1 || len(rep.Actions) != 0 {
		t.Errorf("first gc = %+v, want the image build in flight", rep)
	}
	if imgs := r.fake.Images(); len(imgs) != 0 {
		t.Errorf("images after the first gc: %v, want what the build made removed", imgs)
	}
	if got, _ := r.led.Get(t.Context(), req.ID); got.State != agentenv.StateAbandoned {
		t.Errorf("record after the first gc is %s, want abandoned", got.State)
	}
	// What the engine made after the first gc looked (the step it was in) is removed by the next.
	if _, err := r.fake.CreateImage(t.Context(), agentenv.ImageSpec{Name: req.ID, Base: "pg", Labels: map[string]string{agentenv.LabelRecord: req.ID}}); err != nil {
		t.Fatal(err)
	}
	if rep := gc(time.Now()); len(rep.InFlight) != 1 || len(r.fake.Images()) != 0 {
		t.Errorf("second gc = %+v, images %v; want the late image removed and the build still watched", rep, r.fake.Images())
	}
	if rep := gc(time.Now().Add(2 * time.Minute)); len(rep.InFlight) != 0 || !rep.Clean() {
		t.Errorf("gc past the create timeout = %+v, want the record closed", rep)
	}
	r.assertClean(t, "after gc past the create timeout")
}

// quiet is a provider that says nothing of how a sandbox's image came (a cloud that runs images
// of its own store, pulling nothing by digest).
type quiet struct{ agentenv.Provider }

func (p quiet) Create(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	sb, err := p.Provider.Create(ctx, spec)
	sb.ImageNote = ""
	return sb, err
}

// A sandbox of a pinned image on a provider that says nothing of it is said to run the image as
// named; one that says how it came keeps its own word.
func TestPinnedImageIsAlwaysAccountedFor(t *testing.T) {
	pin := "registry.example/app@sha256:" + "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"
	for _, c := range []struct {
		p    agentenv.Provider
		want string
	}{
		{quiet{fake.New("fake")}, "fake pulls no image by digest: ran app:1 as named, not " + pin},
		{fake.New("fake"), "pinned " + pin},
	} {
		led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
		if err != nil {
			t.Fatal(err)
		}
		m, err := lifecycle.New(lifecycle.Config{Ledger: led, Owner: alive, Providers: map[string]agentenv.Provider{"fake": c.p}})
		if err != nil {
			t.Fatal(err)
		}
		rec, sb, err := m.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "app:1", Pinned: pin}})
		if err != nil || sb.ImageNote != c.want {
			t.Errorf("Create of a pinned image: note %q, %v; want %q", sb.ImageNote, err, c.want)
		}
		if _, err := m.Teardown(t.Context(), []agentenv.Record{rec}); err != nil {
			t.Error(err)
		}
		led.Close()
	}
}
