package lifecycle_test

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
)

// A volume is made under a creating record written before the provider is called, labelled
// with it; two sandboxes that mount it share its files; the teardown terminates it after them,
// whatever the order of the records it is given.
func TestVolumeRecordsIntentBeforeCreateAndGoesLast(t *testing.T) {
	r := newRig(t)
	var (
		mu         sync.Mutex
		atCreate   []agentenv.Record
		terminated []string
	)
	spy := agentenv.Intercept(r.fake, func(ctx context.Context, op string, call func(context.Context) error) error {
		switch op {
		case agentenv.OpCreateVolume:
			atCreate, _ = r.led.List(ctx, agentenv.Filter{})
		case agentenv.OpTerminate:
			// Which record this terminate is of is read from the listing after it.
			before := r.fake.Live()
			err := call(ctx)
			mu.Lock()
			for _, id := range before {
				if !slices.Contains(r.fake.Live(), id) {
					terminated = append(terminated, id)
				}
			}
			mu.Unlock()
			return err
		}
		return call(ctx)
	})
	m, err := lifecycle.New(lifecycle.Config{Ledger: r.led, Owner: alive, Providers: map[string]agentenv.Provider{"fake": spy}})
	if err != nil {
		t.Fatal(err)
	}
	vol, vsb, err := m.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Kind: agentenv.KindVolume, Run: "run-v"})
	if err != nil {
		t.Fatal(err)
	}
	if len(atCreate) != 1 || atCreate[0].ID != vol.ID || atCreate[0].State != agentenv.StateCreating || atCreate[0].Kind != agentenv.KindVolume {
		t.Fatalf("records when the volume's create began = %+v, want the volume's, creating", atCreate)
	}
	if vol.State != agentenv.StateLive || vsb.ID != vol.ID || vsb.Labels[agentenv.LabelRecord] != vol.ID || vsb.Labels[agentenv.LabelRun] != "run-v" {
		t.Errorf("volume = %s, sandbox %+v; want live, its id the record's, labelled with the record and the run", vol.State, vsb)
	}
	mount := func(path string, ro bool) agentenv.Record {
		t.Helper()
		rec, _, err := m.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Run: "run-v",
			Spec: agentenv.SandboxSpec{Image: "img", Mounts: []agentenv.Mount{{Volume: vol.ID, Path: path, ReadOnly: ro}}}})
		if err != nil {
			t.Fatalf("create a sandbox mounting the volume at %s: %v", path, err)
		}
		return rec
	}
	writer, reader := mount("/data", false), mount("/shared", true)
	if err := m.WriteFile(t.Context(), writer.ID, "/data/x.txt", []byte("hello")); err != nil {
		t.Fatal(err)
	}
	if got, err := m.ReadFile(t.Context(), reader.ID, "/shared/x.txt"); err != nil || string(got) != "hello" {
		t.Errorf("the other sandbox reads %q, %v; want hello", got, err)
	}
	rc, err := m.Teardown(t.Context(), []agentenv.Record{vol, writer, reader})
	if err != nil || len(rc.Items) != 3 || rc.Items[2].Record != vol.ID || rc.Items[2].Kind != agentenv.KindVolume {
		t.Errorf("teardown = %+v, %v; want the sandboxes, then the volume, all down", rc.Items, err)
	}
	if len(terminated) != 3 || terminated[2] != vol.ID {
		t.Errorf("terminated in the order %v, want the volume %s last", terminated, vol.ID)
	}
	r.assertClean(t, "after teardown")
}

// A sandbox that mounts a volume on a provider without volumes is refused before any record;
// a volume there is refused by the provider call and its record ends gone.
func TestVolumeOnAProviderWithout(t *testing.T) {
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	fp := fake.New("fake", agentenv.AbilityVolumes)
	m, err := lifecycle.New(lifecycle.Config{Ledger: led, Owner: alive, Providers: map[string]agentenv.Provider{"fake": fp}})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = m.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake",
		Spec: agentenv.SandboxSpec{Image: "img", Mounts: []agentenv.Mount{{Volume: "vol-x", Path: "/data"}}}})
	if !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Create mounting a volume = %v, want ErrInvalid", err)
	}
	if recs, _ := led.List(t.Context(), agentenv.Filter{}); len(recs) != 0 {
		t.Errorf("records after the refusal: %+v, want none", recs)
	}
	rec, _, err := m.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Kind: agentenv.KindVolume})
	if !errors.Is(err, agentenv.ErrInvalid) {
		t.Fatalf("Create(volume) = %v, want ErrInvalid", err)
	}
	if got, _ := led.Get(t.Context(), rec.ID); got.State != agentenv.StateGone {
		t.Errorf("record = %s, want gone", got.State)
	}
	if live := fp.Live(); len(live) != 0 {
		t.Errorf("provider holds %v", live)
	}
	// A spec no backend could mount is refused the same way, naming the field.
	_, _, err = m.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake",
		Spec: agentenv.SandboxSpec{Image: "img", Mounts: []agentenv.Mount{{Volume: "v", Path: "data"}}}})
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "mounts[0].path") {
		t.Errorf("Create with a relative mount path = %v, want ErrInvalid naming mounts[0].path", err)
	}
}

// gc removes the volume (and the sandbox mounting it) of a creator that died, the volume after
// the sandbox.
func TestGCCollectsAVolumeOfADeadOwner(t *testing.T) {
	r := newRig(t)
	dead := r.manager(t, agentenv.Owner{Host: hostname(t), PID: 1 << 30, Start: 7}, time.Now)
	vol, _, err := dead.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Kind: agentenv.KindVolume, Run: "run-dead"})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := dead.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Run: "run-dead",
		Spec: agentenv.SandboxSpec{Image: "img", Mounts: []agentenv.Mount{{Volume: vol.ID, Path: "/data"}}}}); err != nil {
		t.Fatal(err)
	}
	if vols := r.fake.Volumes(); len(vols) != 1 {
		t.Fatalf("volumes before gc = %v, want one", vols)
	}
	mine := r.manager(t, agentenv.Owner{Host: hostname(t), PID: 3, Start: 3}, time.Now)
	rep, err := mine.GC(t.Context(), lifecycle.GCOptions{})
	if err != nil || !rep.Clean() || len(rep.Actions) != 2 {
		t.Fatalf("GC = %+v, %v; want the sandbox and the volume collected", rep, err)
	}
	for _, a := range rep.Actions {
		if a.Reason != "owner process is dead" {
			t.Errorf("gc action %+v, want collected because its owner is dead", a)
		}
	}
	if got, _ := r.led.Get(t.Context(), vol.ID); got.State != agentenv.StateGone {
		t.Errorf("volume record after gc is %s, want gone", got.State)
	}
	r.assertClean(t, "after gc")
}
