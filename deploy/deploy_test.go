package deploy

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/fault"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
	"github.com/agentenv/agentenv/spec"
)

// These tests deploy on the in-memory provider, with no Docker: every sandbox, network, VM and
// ledger record is real to the lifecycle, and readiness is instant (nothing answers MCP in the
// fake), so they check what a deploy creates, in what order, and what it undoes.

type rig struct {
	fake   *fake.Provider
	broken *fault.Provider // a second member whose creates fail, for chains
	plain  *fake.Provider  // a member that builds no images
	led    agentenv.Ledger
	mgr    *lifecycle.Manager
	d      *Deployer
	env    *spec.Env
}

func newRig(t *testing.T) *rig {
	t.Helper()
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	r := &rig{fake: fake.New("fake"), plain: fake.New("plain", agentenv.AbilityImageBuild), led: led}
	r.broken = fault.WrapProvider(fake.New("broken"), fault.NewPlan(
		fault.Rule{Op: agentenv.OpCreate, Action: fault.Error},
		fault.Rule{Op: agentenv.OpRunInVM, Action: fault.Error},
	))
	r.mgr, err = lifecycle.New(lifecycle.Config{
		Ledger: led, Providers: map[string]agentenv.Provider{"fake": r.fake, "broken": r.broken, "plain": r.plain},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.mgr.Close)
	r.d = New(r.mgr, nil)
	r.d.ready = func(*stack, context.Context, spec.Component, string) error { return nil }
	if r.env, err = spec.Load(filepath.Join("..", "examples", "notes", "env.yaml")); err != nil {
		t.Fatal(err)
	}
	return r
}

// up returns the records of the ledger that are not gone.
func (r *rig) up(t *testing.T) []agentenv.Record {
	t.Helper()
	recs, err := r.led.List(context.Background(), agentenv.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var up []agentenv.Record
	for _, rec := range recs {
		if rec.State != agentenv.StateGone {
			up = append(up, rec)
		}
	}
	return up
}

// assertNothingLeft fails unless the fake holds nothing (but keep) and every record but keep's
// is gone.
func (r *rig) assertNothingLeft(t *testing.T, keep ...string) {
	t.Helper()
	var live []string
	for _, id := range r.fake.Live() {
		if !contains(keep, id) {
			live = append(live, id)
		}
	}
	if len(live) > 0 {
		t.Errorf("the provider still holds %v", live)
	}
	for _, rec := range r.up(t) {
		if !contains(keep, rec.SandboxID) {
			t.Errorf("record %s (%s) is %s, want gone", rec.ID, rec.Role, rec.State)
		}
	}
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}

func TestDeployAndTeardownOnTheFake(t *testing.T) {
	for _, mode := range []string{ModeContainer, ModeVM} {
		t.Run(mode, func(t *testing.T) {
			r := newRig(t)
			res, err := r.d.Deploy(t.Context(), r.env, Options{Provider: "fake", Mode: mode})
			if err != nil {
				t.Fatalf("Deploy = %v", err)
			}
			if res.Doc.State != agentenv.DeploymentLive || res.Doc.Mode != mode || res.Doc.Winner != "fake" || res.Token == "" || !strings.HasSuffix(res.GatewayURL, "/mcp") {
				t.Errorf("Deploy = %+v, want a live %s deployment won by fake with a token and a gateway URL", res.Doc, mode)
			}
			want := map[string]int{ModeContainer: 6, ModeVM: 1}[mode] // network + 5 components, or the VM
			if n := len(r.up(t)); n != want {
				t.Errorf("%d records up, want %d", n, want)
			}
			rc, err := r.d.Teardown(t.Context(), res.Doc.ID)
			if err != nil || !rc.Clean() {
				t.Errorf("Teardown = %+v, %v; want a clean receipt", rc, err)
			}
			r.assertNothingLeft(t)
		})
	}
}

// A deploy cancelled at each of its progress events, in both modes, tears down everything it
// made before it returns (seeds 000 and 001): of the notes env, and of the shop env, whose
// website is readied through the gateway after it.
func TestDeployCancelledAtEachEvent(t *testing.T) {
	for _, c := range []struct{ env, mode string }{
		{"notes", ModeContainer}, {"notes", ModeVM}, {"shop", ModeContainer}, {"shop", ModeVM},
	} {
		mode := c.mode
		t.Run(c.env+"/"+mode, func(t *testing.T) {
			load := func(r *rig) {
				env, err := spec.Load(filepath.Join("..", "examples", c.env, "env.yaml"))
				if err != nil {
					t.Fatal(err)
				}
				r.env = env
			}
			var events int
			{
				r := newRig(t)
				load(r)
				res, err := r.d.Deploy(t.Context(), r.env, Options{Provider: "fake", Mode: mode, Progress: func(Event) { events++ }})
				if err != nil {
					t.Fatal(err)
				}
				r.d.Teardown(t.Context(), res.Doc.ID)
			}
			if events < 5 {
				t.Fatalf("a %s deploy reported %d events, want at least 5", mode, events)
			}
			for i := 1; i <= events; i++ {
				r := newRig(t)
				load(r)
				ctx, cancel := context.WithCancel(t.Context())
				var mu sync.Mutex
				n, at := 0, ""
				_, err := r.d.Deploy(ctx, r.env, Options{Provider: "fake", Mode: mode, Progress: func(e Event) {
					mu.Lock()
					defer mu.Unlock()
					if n++; n == i {
						at = e.Component + " " + e.Phase
						cancel()
					}
				}})
				cancel()
				if !errors.Is(err, context.Canceled) {
					t.Errorf("cancelled at event %d (%s): Deploy = %v, want context.Canceled", i, at, err)
				}
				r.assertNothingLeft(t)
			}
		})
	}
}

// A chain whose first member fails leaves nothing of it and deploys on the next.
func TestChainFallsToTheNextMember(t *testing.T) {
	for _, mode := range []string{ModeContainer, ModeVM} {
		t.Run(mode, func(t *testing.T) {
			r := newRig(t)
			res, err := r.d.Deploy(t.Context(), r.env, Options{Provider: "broken,fake", Mode: mode})
			if err != nil {
				t.Fatalf("Deploy = %v", err)
			}
			if res.Doc.Winner != "fake" {
				t.Errorf("winner = %q, want fake", res.Doc.Winner)
			}
			for _, rec := range r.up(t) {
				if rec.Provider != "fake" {
					t.Errorf("record %s of %s is %s, want gone", rec.ID, rec.Provider, rec.State)
				}
			}
			if _, err := r.d.Teardown(t.Context(), res.Doc.ID); err != nil {
				t.Error(err)
			}
			r.assertNothingLeft(t)
		})
	}
}

// A deploy into a caller's VM that fails removes only what it started there, and never the VM.
func TestDeployIntoACallersVMUndoesOnlyItsPart(t *testing.T) {
	r := newRig(t)
	vm, vsb, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Kind: agentenv.KindVM})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	_, err = r.d.Deploy(ctx, r.env, Options{Provider: "fake", Mode: ModeVM, Into: vm.ID, Progress: func(e Event) {
		if e.Component == "notes" && e.Phase == "ready" {
			cancel()
		}
	}})
	cancel()
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Deploy = %v, want context.Canceled", err)
	}
	if left := r.fake.InVM(vsb.ID); len(left) != 0 {
		t.Errorf("the caller's VM still runs %v of the failed deploy", left)
	}
	if _, err := r.mgr.Get(t.Context(), vm.ID); err != nil {
		t.Errorf("the caller's VM: %v, want it running", err)
	}
	r.assertNothingLeft(t, vsb.ID)
}

// Two deploys of one env into one caller's VM both succeed, each under names of its own; the
// first's teardown removes exactly its components, by their records, and leaves the second's
// and the VM.
func TestTwoDeploysShareACallersVM(t *testing.T) {
	r := newRig(t)
	vm, vsb, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Kind: agentenv.KindVM})
	if err != nil {
		t.Fatal(err)
	}
	first, err := r.d.Deploy(t.Context(), r.env, Options{Provider: "fake", Mode: ModeVM, Into: vm.ID})
	if err != nil {
		t.Fatal(err)
	}
	held := r.fake.InVM(vsb.ID)
	if len(held) == 0 || !slices.Equal(slices.Sorted(slices.Values(first.Doc.InVM)), held) {
		t.Fatalf("first deploy: vm runs %v, document says %v", held, first.Doc.InVM)
	}
	for _, name := range first.Doc.InVM {
		rec, err := r.led.Get(t.Context(), agentenv.InVMRecordID(vm.ID, name))
		if err != nil || rec.Kind != agentenv.KindInVM || rec.State != agentenv.StateLive || rec.Deployment != first.Doc.ID {
			t.Errorf("record of %s = %+v, %v; want a live in_vm record of %s", name, rec, err, first.Doc.ID)
		}
	}
	second, err := r.d.Deploy(t.Context(), r.env, Options{Provider: "fake", Mode: ModeVM, Into: vm.ID})
	if err != nil {
		t.Fatalf("second deploy into the same vm: %v", err)
	}
	if back, warnings, err := r.d.Reattach(t.Context(), first.Doc.ID); err != nil || len(warnings) != 0 || len(back.Records) != len(held) {
		t.Errorf("reattach the first = %+v, %v, %v; want its %d records", back, warnings, err, len(held))
	}
	if got := r.fake.InVM(vsb.ID); len(got) != 2*len(held) {
		t.Fatalf("the vm runs %v, want both deployments' %d components", got, 2*len(held))
	}
	rc, err := r.d.Teardown(t.Context(), first.Doc.ID)
	if err != nil || len(rc.Items) != len(held) {
		t.Fatalf("teardown of the first = %+v, %v; want %d items", rc, err, len(held))
	}
	if got, want := r.fake.InVM(vsb.ID), slices.Sorted(slices.Values(second.Doc.InVM)); !slices.Equal(got, want) {
		t.Errorf("after the first's teardown the vm runs %v, want the second's %v", got, want)
	}
	if _, err := r.d.Teardown(t.Context(), second.Doc.ID); err != nil {
		t.Fatal(err)
	}
	if left := r.fake.InVM(vsb.ID); len(left) != 0 {
		t.Errorf("after both teardowns the caller's VM still runs %v", left)
	}
	if _, err := r.mgr.Get(t.Context(), vm.ID); err != nil {
		t.Errorf("the caller's VM: %v, want it running", err)
	}
	r.assertNothingLeft(t, vsb.ID)
}

// A deploy --into whose name in the VM another holds (a claim won by a concurrent deploy) is
// refused naming the holder, and removes nothing of it.
func TestDeployIntoACallersVMRefusesANameInUse(t *testing.T) {
	r := newRig(t)
	vm, vsb, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "fake", Kind: agentenv.KindVM})
	if err != nil {
		t.Fatal(err)
	}
	const id = "dep-0123456789ab"
	holder, _, err := r.mgr.AddToVM(t.Context(), vm.ID, lifecycle.CreateRequest{Deployment: "dep-other",
		Spec: agentenv.SandboxSpec{Name: "0123456789ab-notes", Image: "img"}})
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.d.Deploy(t.Context(), r.env, Options{Provider: "fake", Mode: ModeVM, Into: vm.ID, Name: id})
	if !errors.Is(err, agentenv.ErrConflict) || !strings.Contains(err.Error(), "dep-other") {
		t.Fatalf("deploy = %v, want ErrConflict naming dep-other", err)
	}
	if got := r.fake.InVM(vsb.ID); !slices.Equal(got, []string{"0123456789ab-notes"}) {
		t.Errorf("after the refused deploy the vm runs %v, want only the holder's", got)
	}
	if got, _ := r.led.Get(t.Context(), holder.ID); got.State != agentenv.StateLive || got.Deployment != "dep-other" {
		t.Errorf("the holder's record = %+v, want live for dep-other", got)
	}
}

// Reattach: a dead service DB is a warning, a dead server an error (the seeds' rules).
func TestReattach(t *testing.T) {
	r := newRig(t)
	res, err := r.d.Deploy(t.Context(), r.env, Options{Provider: "fake", Mode: ModeContainer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.d.Teardown(context.Background(), res.Doc.ID) })
	back, warnings, err := r.d.Reattach(t.Context(), res.Doc.ID)
	if err != nil || len(warnings) != 0 {
		t.Fatalf("Reattach of a healthy deployment = %v, %v", warnings, err)
	}
	for name, addr := range res.Endpoints {
		if back.Endpoints[name] != addr {
			t.Errorf("reattached endpoint of %s = %q, want %q as deployed", name, back.Endpoints[name], addr)
		}
	}
	byRole := map[agentenv.Role]agentenv.Record{}
	for _, rec := range r.up(t) {
		byRole[rec.Role] = rec
	}
	r.fake.Kill(byRole[agentenv.RoleServiceDB].SandboxID, 137)
	if _, warnings, err := r.d.Reattach(t.Context(), res.Doc.ID); err != nil || len(warnings) != 1 {
		t.Errorf("Reattach with the service DB down = %v, %v; want one warning", warnings, err)
	}
	r.fake.Remove(byRole[agentenv.RoleMCPServer].SandboxID)
	if _, _, err := r.d.Reattach(t.Context(), res.Doc.ID); err == nil || !strings.Contains(err.Error(), "is down") {
		t.Errorf("Reattach with the server gone = %v, want an error saying it is down", err)
	}
}

// A provider wrapped for chaos testing keeps every ability: a VM-mode deploy through it works
// (it failed with "cannot host a VM stack" when the wrapper forwarded only private networks).
func TestDeployThroughAFaultWrapper(t *testing.T) {
	inner := fake.New("chaos")
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer led.Close()
	plan := fault.NewPlan(fault.Rule{Op: agentenv.OpTerminate, Call: 99, Action: fault.Error})
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"chaos": fault.WrapProvider(inner, plan)}})
	if err != nil {
		t.Fatal(err)
	}
	defer mgr.Close()
	d := New(mgr, nil)
	d.ready = func(*stack, context.Context, spec.Component, string) error { return nil }
	env, err := spec.Load(filepath.Join("..", "examples", "kv", "env.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	res, err := d.Deploy(t.Context(), env, Options{Provider: "chaos", Mode: ModeVM})
	if err != nil {
		t.Fatalf("VM-mode deploy through the fault wrapper = %v", err)
	}
	if rc, err := d.Teardown(t.Context(), res.Doc.ID); err != nil || !rc.Clean() {
		t.Errorf("Teardown = %+v, %v", rc, err)
	}
	if live := inner.Live(); len(live) != 0 {
		t.Errorf("left %v", live)
	}
	if plan.Calls(agentenv.OpRunInVM) == 0 {
		t.Errorf("the stack's containers did not go through the plan")
	}
}

// An env file's env:NAME references read only what the deploy was told to pass: env:HOME
// without --pass-env HOME is refused, naming the field, before anything is created.
func TestEnvReferencesNeedTheAllowList(t *testing.T) {
	r := newRig(t)
	path := filepath.Join(t.TempDir(), "env.yaml")
	if err := os.WriteFile(path, []byte("name: leaky\nservers:\n  - name: kv\n    image: agentenv:dev\n    command: [/agentenv, serve, kv]\n    port: 8080\n    env:\n      STOLEN: env:HOME\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env, err := spec.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	_, err = r.d.Deploy(t.Context(), env, Options{Provider: "fake", Mode: ModeContainer})
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "servers[0].env.STOLEN: env:HOME is not passed") {
		t.Fatalf("Deploy with env:HOME not passed = %v, want ErrInvalid naming servers[0].env.STOLEN", err)
	}
	if recs, _ := r.led.List(t.Context(), agentenv.Filter{}); len(recs) != 0 || len(r.fake.Live()) != 0 {
		t.Errorf("%d records, %v live after a refused deploy; want nothing", len(recs), r.fake.Live())
	}
	res, err := r.d.Deploy(t.Context(), env, Options{Provider: "fake", Mode: ModeContainer, PassEnv: []string{"HOME"}})
	if err != nil {
		t.Fatalf("Deploy with --pass-env HOME = %v", err)
	}
	r.d.Teardown(t.Context(), res.Doc.ID)
	r.assertNothingLeft(t)
}

// An env that declares egress, deployed on a provider that does not enforce it, gets a warning
// in the progress output naming the provider and the list; never silence.
func TestEgressNotEnforcedIsAWarning(t *testing.T) {
	r := newRig(t)
	env := *r.env
	env.Egress = []string{"203.0.113.0/24:443"}
	var warnings []string
	res, err := r.d.Deploy(t.Context(), &env, Options{Provider: "fake", Mode: ModeContainer, Progress: func(e Event) {
		if e.Phase == "warning" {
			warnings = append(warnings, e.Detail)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) != 1 || !strings.Contains(warnings[0], "provider fake") || !strings.Contains(warnings[0], "203.0.113.0/24:443") {
		t.Errorf("warnings = %q, want one naming the provider and the egress list", warnings)
	}
	if _, err := r.d.Teardown(t.Context(), res.Doc.ID); err != nil {
		t.Fatal(err)
	}
	r.assertNothingLeft(t)
}

// Inspect asks each sandbox's provider once, and says the same of it as Reattach.
func TestInspectAsksEachSandboxOnce(t *testing.T) {
	r := newRig(t)
	res, err := r.d.Deploy(t.Context(), r.env, Options{Provider: "fake", Mode: ModeContainer})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.d.Teardown(context.Background(), res.Doc.ID) })
	byRole := map[agentenv.Role]agentenv.Record{}
	for _, rec := range r.up(t) {
		byRole[rec.Role] = rec
	}
	r.fake.Kill(byRole[agentenv.RoleServiceDB].SandboxID, 137)
	before := r.fake.Calls("get")
	in, err := r.d.Inspect(t.Context(), res.Doc.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got := r.fake.Calls("get") - before; got != len(in.Sandboxes) {
		t.Errorf("Inspect made %d Get calls for %d sandboxes, want one each", got, len(in.Sandboxes))
	}
	if in.Reattach == nil || !in.Reattach.OK || len(in.Reattach.Warnings) != 1 {
		t.Errorf("Inspect's reattach verdict with the service DB down = %+v, want usable with one warning", in.Reattach)
	}
	for _, s := range in.Sandboxes {
		if s.Role == agentenv.RoleServiceDB && !strings.HasPrefix(s.Health, "down: ") {
			t.Errorf("service DB health = %q, want down", s.Health)
		}
	}
}

// TestPinnedImages: a deploy with Options.Pinned hands each component of a pinned image its
// pinned reference (SandboxSpec.Pinned), and says how it ran in an event of phase image; the
// components of images not pinned have none.
func TestPinnedImages(t *testing.T) {
	for _, mode := range []string{ModeContainer, ModeVM} {
		t.Run(mode, func(t *testing.T) {
			r := newRig(t)
			pin := "127.0.0.1:5000/team/notes/images/agentenv@sha256:" + strings.Repeat("ab", 32)
			got := map[string]string{}
			res, err := r.d.Deploy(t.Context(), r.env, Options{Provider: "fake", Mode: mode, Pinned: map[string]string{spec.DefaultImage: pin},
				Progress: func(e Event) {
					if e.Phase == "image" {
						got[e.Component] = e.Detail
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer r.d.Teardown(context.Background(), res.Doc.ID)
			want := map[string]string{"notes": "pinned " + pin, "db-mcp": "pinned " + pin, "gateway": "pinned " + pin}
			if !maps.Equal(got, want) {
				t.Errorf("image events %v, want %v (agentenv:dev's components only)", got, want)
			}
		})
	}
}
