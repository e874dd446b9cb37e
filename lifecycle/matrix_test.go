package lifecycle_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/fault"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
)

// rig is one fake provider and one bbolt ledger, each wrapped with a swappable fault plan.
type rig struct {
	fake *fake.Provider
	fp   *fault.Provider
	fl   *fault.Ledger
	led  agentenv.Ledger
	mgr  *lifecycle.Manager
}

var (
	alive = agentenv.Owner{Host: "test-host", PID: 1, Start: 1}
)

func newRig(t *testing.T) *rig {
	t.Helper()
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	r := &rig{fake: fake.New("fake"), led: led}
	r.fp = fault.WrapProvider(r.fake, nil)
	r.fl = fault.WrapLedger(led, nil)
	r.mgr = r.manager(t, alive, time.Now)
	return r
}

// manager returns a lifecycle manager over the rig's faulty provider and ledger.
func (r *rig) manager(t *testing.T, owner agentenv.Owner, now func() time.Time) *lifecycle.Manager {
	t.Helper()
	m, err := lifecycle.New(lifecycle.Config{
		Ledger: r.fl, Providers: map[string]agentenv.Provider{"fake": r.fp}, Owner: owner,
		ReclaimWait: 100 * time.Millisecond, CreateTimeout: 300 * time.Millisecond,
		TerminateTimeout: 2 * time.Second, CallTimeout: 2 * time.Second, Lease: time.Minute, Now: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// gcElsewhere runs gc as another host would, two minutes later: every lease this test took has
// expired by then, as after a crash.
func (r *rig) gcElsewhere(t *testing.T) lifecycle.GCReport {
	t.Helper()
	later := func() time.Time { return time.Now().Add(2 * time.Minute) }
	m := r.manager(t, agentenv.Owner{Host: "other-host", PID: 2, Start: 2}, later)
	rep, err := m.GC(context.Background(), lifecycle.GCOptions{})
	if err != nil {
		t.Fatalf("GC: %v", err)
	}
	return rep
}

// assertClean fails unless the fake holds no sandbox and no image and every record is gone,
// and says whether it failed.
func (r *rig) assertClean(t *testing.T, when string) bool {
	t.Helper()
	if live := r.fake.Live(); len(live) > 0 {
		t.Errorf("%s: fake provider still holds %v", when, live)
	}
	if imgs := r.fake.Images(); len(imgs) > 0 {
		t.Errorf("%s: fake provider still holds images %v", when, imgs)
	}
	if vols := r.fake.Volumes(); len(vols) > 0 {
		t.Errorf("%s: fake provider still holds volumes %v", when, vols)
	}
	recs, err := r.led.List(context.Background(), agentenv.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	for _, rec := range recs {
		if rec.State != agentenv.StateGone {
			t.Errorf("%s: record %s is %s (%s), want gone", when, rec.ID, rec.State, rec.Error)
		}
	}
	return t.Failed()
}

// waitPending waits (bounded) for creates abandoned by their callers to finish in the background,
// and for their undoing.
func waitPending(t *testing.T, m *lifecycle.Manager) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := m.Drain(ctx); err != nil {
		t.Fatalf("creates still under way: %v", err)
	}
}

type step struct {
	target string // "provider" or "ledger"
	op     string
	call   int
}

var actions = []fault.Action{fault.Error, fault.Hang, fault.Cancel, fault.Panic, fault.Lost}

// TestFaultMatrix injects every fault at every step of create (of a sandbox, an image, a VM),
// teardown and gc, and checks that
// nothing is left alive and, after one gc, no record is short of gone.
func TestFaultMatrix(t *testing.T) {
	t.Parallel()
	type opCase struct {
		name  string
		steps []step
		setup func(t *testing.T, r *rig) []string // returns record ids the op works on
		run   func(ctx context.Context, r *rig, ids []string) error
	}
	createSpec := lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "img", Ports: []int{80}}}
	ops := []opCase{
		{
			name: "create",
			steps: []step{
				{"ledger", "put", 1}, {"provider", "create", 1}, {"ledger", "update", 1},
				{"provider", "list", 1}, {"provider", "terminate", 1}, {"ledger", "update", 2},
			},
			run: func(ctx context.Context, r *rig, _ []string) error {
				_, _, err := r.mgr.Create(ctx, createSpec)
				if err == nil {
					// A create that survived its fault is torn down like any other.
					_, err = r.mgr.TeardownIDs(context.Background(), mustIDs(r)...)
				}
				return err
			},
		},
		{
			name: "image",
			steps: []step{
				{"ledger", "put", 1}, {"provider", "create_image", 1}, {"ledger", "update", 1},
				{"provider", "list", 1}, {"provider", "terminate", 1}, {"ledger", "update", 2},
			},
			run: func(ctx context.Context, r *rig, _ []string) error {
				// As env snapshot does: an image built under its record, torn down later.
				_, _, err := r.mgr.Create(ctx, imageRequest())
				if err == nil {
					_, err = r.mgr.TeardownIDs(context.Background(), mustIDs(r)...)
				}
				return err
			},
		},
		{
			name: "volume",
			steps: []step{
				{"ledger", "put", 1}, {"provider", "create_volume", 1}, {"ledger", "update", 1},
				{"provider", "list", 1}, {"provider", "terminate", 1}, {"ledger", "update", 2},
			},
			run: func(ctx context.Context, r *rig, _ []string) error {
				// As deploy_volume does: a volume a sandbox mounts, torn down after it.
				vol, _, err := r.mgr.Create(ctx, lifecycle.CreateRequest{Provider: "fake", Kind: agentenv.KindVolume})
				if err == nil {
					_, _, err = r.mgr.Create(ctx, lifecycle.CreateRequest{Provider: "fake", Spec: agentenv.SandboxSpec{Image: "img", Mounts: []agentenv.Mount{{Volume: vol.ID, Path: "/data"}}}})
				}
				_, terr := r.mgr.TeardownIDs(context.Background(), mustIDs(r)...)
				return errors.Join(err, terr)
			},
		},
		{
			name: "vm",
			steps: []step{
				{"ledger", "put", 1}, {"provider", "create_vm", 1}, {"ledger", "get", 1},
				{"provider", "run_in_vm", 1}, {"provider", "remove_from_vm", 1}, {"provider", "terminate", 1},
			},
			run: func(ctx context.Context, r *rig, _ []string) error {
				// As a VM-mode deploy does: a VM, a container in its stack (one of them removed
				// again, as a deploy into a caller's VM undoes its part), then teardown.
				rec, _, err := r.mgr.Create(ctx, lifecycle.CreateRequest{Provider: "fake", Kind: agentenv.KindVM})
				if err == nil {
					_, err = r.mgr.RunInVM(ctx, rec.ID, agentenv.SandboxSpec{Name: "svc", Image: "img", Ports: []int{80}})
				}
				if err == nil {
					err = r.mgr.RemoveFromVM(ctx, rec.ID, "svc")
				}
				_, terr := r.mgr.TeardownIDs(context.Background(), mustIDs(r)...)
				return errors.Join(err, terr)
			},
		},
		{
			name: "into",
			steps: []step{
				{"ledger", "get", 1}, {"ledger", "insert", 1}, {"provider", "run_in_vm", 1}, {"ledger", "update", 1},
				{"ledger", "get", 2}, {"ledger", "get", 3}, {"ledger", "update", 2}, {"provider", "remove_from_vm", 1}, {"ledger", "update", 3},
			},
			setup: func(t *testing.T, r *rig) []string {
				// The caller's VM, made before the deploy --into it.
				rec, _, err := r.mgr.Create(context.Background(), lifecycle.CreateRequest{Provider: "fake", Kind: agentenv.KindVM})
				if err != nil {
					t.Fatal(err)
				}
				return []string{rec.ID}
			},
			run: func(ctx context.Context, r *rig, ids []string) error {
				rec, _, err := r.mgr.AddToVM(ctx, ids[0], lifecycle.CreateRequest{Deployment: "dep-into", Spec: agentenv.SandboxSpec{Name: "svc", Image: "img", Ports: []int{80}}})
				if err == nil {
					_, err = r.mgr.TeardownIDs(ctx, rec.ID)
				}
				return err
			},
		},
		{
			name: "exec",
			steps: []step{
				{"ledger", "get", 1}, {"provider", "exec", 1}, {"provider", "attach", 1}, {"provider", "write_file", 1},
				{"provider", "read_file", 1}, {"provider", "logs", 1},
			},
			setup: func(t *testing.T, r *rig) []string {
				rec, _, err := r.mgr.Create(context.Background(), createSpec)
				if err != nil {
					t.Fatal(err)
				}
				return []string{rec.ID}
			},
			run: func(ctx context.Context, r *rig, ids []string) error {
				_, err := r.mgr.Exec(ctx, ids[0], []string{"true"})
				if st, aerr := r.mgr.Attach(ctx, ids[0], []string{"cat"}); aerr == nil {
					err = errors.Join(err, st.Close())
				} else {
					err = errors.Join(err, aerr)
				}
				err = errors.Join(err, r.mgr.WriteFile(ctx, ids[0], "/f", []byte("x")))
				_, rerr := r.mgr.ReadFile(ctx, ids[0], "/f")
				_, lerr := r.mgr.Logs(ctx, ids[0], 5)
				_, terr := r.mgr.TeardownIDs(context.Background(), ids...)
				return errors.Join(err, rerr, lerr, terr)
			},
		},
		{
			name: "teardown",
			steps: []step{
				{"ledger", "get", 1}, {"ledger", "update", 1}, {"provider", "list", 1},
				{"provider", "terminate", 1}, {"provider", "list", 2}, {"ledger", "update", 2},
			},
			setup: func(t *testing.T, r *rig) []string {
				rec, _, err := r.mgr.Create(context.Background(), createSpec)
				if err != nil {
					t.Fatal(err)
				}
				return []string{rec.ID}
			},
			run: func(ctx context.Context, r *rig, ids []string) error {
				_, err := r.mgr.TeardownIDs(ctx, ids...)
				return err
			},
		},
		{
			name: "gc",
			steps: []step{
				{"ledger", "list", 1}, {"provider", "list", 1}, {"provider", "list", 2},
				{"provider", "terminate", 1}, {"provider", "list", 3}, {"ledger", "update", 1}, {"ledger", "update", 2},
			},
			setup: func(t *testing.T, r *rig) []string {
				// A sandbox whose owner (on this host) has died.
				dead := r.manager(t, agentenv.Owner{Host: hostname(t), PID: 1 << 30, Start: 7}, time.Now)
				rec, _, err := dead.Create(context.Background(), createSpec)
				if err != nil {
					t.Fatal(err)
				}
				return []string{rec.ID}
			},
			run: func(ctx context.Context, r *rig, _ []string) error {
				mine := r.manager(&testing.T{}, agentenv.Owner{Host: hostnameOrEmpty(), PID: 3, Start: 3}, time.Now)
				_, err := mine.GC(ctx, lifecycle.GCOptions{})
				return err
			},
		},
	}
	for _, op := range ops {
		for _, st := range op.steps {
			for _, act := range actions {
				name := fmt.Sprintf("%s/%s.%s#%d/%s", op.name, st.target, st.op, st.call, act)
				t.Run(name, func(t *testing.T) {
					t.Parallel()
					r := newRig(t)
					var ids []string
					if op.setup != nil {
						ids = op.setup(t, r)
					}
					ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
					defer cancel()
					plan := fault.NewPlan(fault.Rule{Op: st.op, Call: st.call, Action: act, Cancel: cancel})
					if st.target == "provider" {
						r.fp.Plan = plan
					} else {
						r.fl.Plan = plan
					}
					if act == fault.Hang {
						// A hang is ended by the caller giving up.
						go func() { time.Sleep(50 * time.Millisecond); cancel() }()
					}
					func() {
						defer func() {
							// A panic in the ledger reaches the caller, as a crash would.
							if p := recover(); p != nil && st.target != "ledger" {
								t.Errorf("panic escaped: %v", p)
							}
						}()
						_ = op.run(ctx, r, ids)
					}()
					waitPending(t, r.mgr)
					r.fp.Plan, r.fl.Plan = nil, nil
					rep := r.gcElsewhere(t)
					if r.assertClean(t, "after one gc") {
						t.Logf("the gc: %+v", rep)
					}
				})
			}
		}
	}
}

func mustIDs(r *rig) []string {
	recs, _ := r.led.List(context.Background(), agentenv.Filter{States: []agentenv.State{agentenv.StateLive}})
	ids := make([]string, 0, len(recs))
	for _, rec := range recs {
		ids = append(ids, rec.ID)
	}
	return ids
}
