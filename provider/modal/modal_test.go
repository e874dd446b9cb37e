package modal_test

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
	"github.com/agentenv/agentenv/provider/modal"
	"github.com/agentenv/agentenv/provider/modal/modalemu"
	"github.com/agentenv/agentenv/provider/providertest"
)

const image = "registry.example/agentenv-test:1"

// emulator starts the Modal emulator and points the SDK at it (MODAL_SERVER_URL, as the SDK
// reads it), failing the test if it still holds a running sandbox when the test ends.
func emulator(t *testing.T) *modalemu.Server {
	t.Helper()
	emu, err := modalemu.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv("MODAL_SERVER_URL", emu.URL())
	t.Setenv("HOME", t.TempDir()) // no ~/.modal.toml of the machine's
	t.Setenv("MODAL_SANDBOX_V2", "0")
	t.Cleanup(func() {
		if left := emu.Running(); len(left) != 0 {
			t.Errorf("the emulator still runs %v", left)
		}
		emu.Close()
	})
	return emu
}

func newProvider(t *testing.T, cfg modal.Config) *modal.Provider {
	t.Helper()
	if cfg.TokenID == "" && cfg.TokenSecret == "" {
		cfg.TokenID, cfg.TokenSecret = "ak-test", "as-test"
	}
	p, err := modal.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

func TestConformance(t *testing.T) {
	emulator(t)
	providertest.Run(t, func(t *testing.T) agentenv.Provider { return newProvider(t, modal.Config{Region: "us-east-1"}) }, providertest.Options{
		Image: image, Command: []string{"serve"}, Port: 8080,
		ExitCommand: []string{"exit", "3"}, ExitCode: 3,
		FinishedUnlisted: true, Wait: 10 * time.Second,
	})
}

func spec(id string) agentenv.SandboxSpec {
	return agentenv.SandboxSpec{Image: image, Command: []string{"serve"}, Ports: []int{8080}, Name: id,
		Labels: map[string]string{agentenv.LabelRecord: id}}
}

// bare is a spec for lifecycle, which sets the name and labels itself.
func bare() agentenv.SandboxSpec {
	return agentenv.SandboxSpec{Image: image, Command: []string{"serve"}, Ports: []int{8080}}
}

func TestBadInputCreatesNothing(t *testing.T) {
	emu := emulator(t)
	_, err := modal.New(modal.Config{TokenID: "a", TokenSecret: "b", Regions: []string{"mars-1"}}, nil)
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "mars-1") {
		t.Errorf("New with an unknown region = %v, want ErrInvalid naming it", err)
	}
	p, err := modal.New(modal.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = p.Create(t.Context(), spec("sb-nocreds"))
	if !errors.Is(err, agentenv.ErrUnavailable) || !strings.Contains(err.Error(), "provider.modal.token_id") {
		t.Errorf("Create without credentials = %v, want ErrUnavailable naming what to set", err)
	}
	if err := p.Terminate(t.Context(), "sb-x"); !errors.Is(err, agentenv.ErrUnavailable) {
		t.Errorf("Terminate without credentials = %v, want ErrUnavailable", err)
	}
	bad := spec("sb-badimage")
	bad.Image = "registry.example/invalid:1"
	if _, err := newProvider(t, modal.Config{}).Create(t.Context(), bad); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Create of an image Modal cannot build = %v, want ErrInvalid", err)
	}
	if n := emu.Calls("SandboxCreate"); n != 0 {
		t.Errorf("SandboxCreate called %d times, want 0", n)
	}
}

// TestContainerModeBadInputCreatesNothing: container mode without a region, with an unknown
// region, without credentials, or with a network this provider did not make fails with a clear
// error before anything is created.
func TestContainerModeBadInputCreatesNothing(t *testing.T) {
	emu := emulator(t)
	ctx := t.Context()
	net := agentenv.NetworkSpec{Name: "net-1", Labels: map[string]string{agentenv.LabelRecord: "net-1"}}

	noRegion := newProvider(t, modal.Config{})
	if a := agentenv.AbilitiesOf(noRegion); a.Networker == nil || a.VMHost != nil {
		t.Errorf("abilities = %v, want private networks and no VMs", a.List())
	}
	_, err := noRegion.CreateNetwork(ctx, net)
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "provider.modal.region") {
		t.Errorf("CreateNetwork without a region = %v, want ErrInvalid naming provider.modal.region", err)
	}
	sp := spec("sb-noregion")
	sp.Network = "net-1"
	if _, err := noRegion.Create(ctx, sp); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "provider.modal.region") {
		t.Errorf("Create on a network without a region = %v, want ErrInvalid naming provider.modal.region", err)
	}

	if _, err := modal.New(modal.Config{TokenID: "a", TokenSecret: "b", Region: "mars-1"}, nil); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "mars-1") {
		t.Errorf("New with an unknown region = %v, want ErrInvalid naming it", err)
	}
	noCreds, err := modal.New(modal.Config{Region: "us-east-1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := noCreds.CreateNetwork(ctx, net); !errors.Is(err, agentenv.ErrUnavailable) || !strings.Contains(err.Error(), "provider.modal.token_id") {
		t.Errorf("CreateNetwork without credentials = %v, want ErrUnavailable naming what to set", err)
	}

	p := newProvider(t, modal.Config{Region: "us-east-1"})
	sp = spec("sb-notanetwork")
	sp.Network = "sb-emu0000000000000000001"
	if _, err := p.Create(ctx, sp); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("Create on a sandbox id as network = %v, want ErrInvalid", err)
	}
	mismatched := agentenv.NetworkSpec{Name: "net-2", Labels: map[string]string{agentenv.LabelRecord: "other"}}
	if _, err := p.CreateNetwork(ctx, mismatched); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("CreateNetwork with a mismatched record label = %v, want ErrInvalid", err)
	}
	if n := emu.Calls("SandboxCreate"); n != 0 {
		t.Errorf("SandboxCreate called %d times, want 0", n)
	}
}

// TestContainerModeSandboxReportsItsPrivateHost: a sandbox on the logical network has i6pn,
// is pinned to the region, and reports the address its lookup of i6pn.modal.local gave; the
// network itself is a no-op to terminate and is listed only until then.
func TestContainerModeSandboxReportsItsPrivateHost(t *testing.T) {
	emu := emulator(t)
	ctx := t.Context()
	p := newProvider(t, modal.Config{Region: "us-east-1"})
	n, err := p.CreateNetwork(ctx, agentenv.NetworkSpec{Name: "net-a", Labels: map[string]string{agentenv.LabelRecord: "net-a", agentenv.LabelDeployment: "dep-a"}})
	if err != nil {
		t.Fatal(err)
	}
	sp := spec("sb-private")
	sp.Network, sp.Aliases = n.ID, []string{"svc"}
	sp.Labels[agentenv.LabelDeployment] = "dep-a"
	sb, err := p.Create(ctx, sp)
	if err != nil {
		t.Fatal(err)
	}
	if sb.PrivateHost == "" || !strings.Contains(sb.PrivateHost, ":") {
		t.Errorf("PrivateHost = %q, want the emulator's i6pn (IPv6) address", sb.PrivateHost)
	}
	if emu.Calls("TaskExecStart") != 1 {
		t.Errorf("TaskExecStart called %d times, want 1 (the lookup)", emu.Calls("TaskExecStart"))
	}
	if got, err := p.List(ctx, map[string]string{agentenv.LabelDeployment: "dep-a"}); err != nil || len(got) != 2 {
		t.Errorf("List(deployment) = %v, %v; want the network and the sandbox", got, err)
	}
	for _, id := range []string{sb.ID, n.ID} {
		if err := p.Terminate(ctx, id); err != nil {
			t.Errorf("Terminate(%s) = %v", id, err)
		}
	}
	if got, err := p.List(ctx, map[string]string{agentenv.LabelDeployment: "dep-a"}); err != nil || len(got) != 0 {
		t.Errorf("List(deployment) after Terminate = %v, %v; want none", got, err)
	}
}

func TestTimeoutIsAlwaysSet(t *testing.T) {
	emulator(t)
	p := newProvider(t, modal.Config{})
	sb, err := p.Create(t.Context(), spec("sb-timeout"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Terminate(context.Background(), sb.ID)
	// The emulator finishes a sandbox past its timeout; with none set it would run forever.
	// A timeout is checked by Get still answering now (default 3h10m is in force).
	if _, err := p.Get(t.Context(), sb.ID); err != nil {
		t.Errorf("Get = %v", err)
	}
}

// rig is a lifecycle manager over a bbolt ledger with the modal provider (and a fake as the
// second chain member).
type rig struct {
	emu   *modalemu.Server
	p     *modal.Provider
	spare *fake.Provider
	mgr   *lifecycle.Manager
}

func newRig(t *testing.T, reclaim time.Duration) *rig {
	t.Helper()
	emu := emulator(t)
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	p := newProvider(t, modal.Config{})
	spare := fake.New("spare")
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, ReclaimWait: reclaim,
		Providers: map[string]agentenv.Provider{"modal": p, "spare": spare}})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{emu: emu, p: p, spare: spare, mgr: mgr}
}

func (r *rig) state(t *testing.T, id string) agentenv.State {
	t.Helper()
	rec, err := r.mgr.Ledger().Get(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return rec.State
}

// eventually waits, bounded, until the emulator runs nothing.
func (r *rig) eventuallyNothingRuns(t *testing.T, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for len(r.emu.Running()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if left := r.emu.Running(); len(left) != 0 {
		t.Errorf("still running after %s: %v", within, left)
	}
}

func cancelAfter(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	time.AfterFunc(d, cancel)
	t.Cleanup(cancel)
	return ctx
}

func TestCreateCompletingAfterCancelIsTerminated(t *testing.T) {
	r := newRig(t, 5*time.Second)
	r.emu.SetCreateFault(&modalemu.CreateFault{Delay: 500 * time.Millisecond, Times: 1})
	rec, _, err := r.mgr.Create(cancelAfter(t, 100*time.Millisecond), lifecycle.CreateRequest{Provider: "modal", ID: "sb-late", Spec: bare()})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Create = %v, want context.Canceled", err)
	}
	if got := r.state(t, rec.ID); got != agentenv.StateGone {
		t.Errorf("record %s, want gone", got)
	}
	r.eventuallyNothingRuns(t, time.Second)
}

// TestCreateWhoseAnswerWasLostIsAdopted: the first answer to a create is lost after the sandbox
// was made, the SDK retries and is told the name is taken; Create adopts that sandbox, so the
// record is running with exactly one sandbox and nothing is left once it is torn down.
func TestCreateWhoseAnswerWasLostIsAdopted(t *testing.T) {
	r := newRig(t, 5*time.Second)
	r.emu.SetCreateFault(&modalemu.CreateFault{LoseAnswer: true, Times: 1})
	rec, sb, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "modal", ID: "sb-lost", Spec: bare()})
	if err != nil {
		t.Fatalf("Create = %v, want the sandbox the first try made", err)
	}
	if got := r.emu.Calls("SandboxCreate"); got < 2 {
		t.Errorf("SandboxCreate called %d times, want a retry", got)
	}
	if running := r.emu.Running(); len(running) != 1 || !strings.HasPrefix(running[0], sb.ID+" ") {
		t.Errorf("running %v, want only %s", running, sb.ID)
	}
	if rcpt, err := r.mgr.TeardownIDs(t.Context(), rec.ID); err != nil {
		t.Fatalf("TeardownIDs = %+v, %v", rcpt, err)
	}
	r.eventuallyNothingRuns(t, time.Second)
}

func TestTerminateFailingAfterCancelLeavesTerminateFailedForGC(t *testing.T) {
	r := newRig(t, 5*time.Second)
	r.emu.SetCreateFault(&modalemu.CreateFault{Delay: 300 * time.Millisecond, Times: 1})
	r.emu.SetTerminateFault(status.Error(codes.Internal, "terminate broke"), 0)
	rec, _, err := r.mgr.Create(cancelAfter(t, 50*time.Millisecond), lifecycle.CreateRequest{Provider: "modal", ID: "sb-tf", Spec: bare()})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Create = %v, want context.Canceled still raised", err)
	}
	if got := r.state(t, rec.ID); got != agentenv.StateTerminateFailed {
		t.Errorf("record %s, want terminate_failed", got)
	}
	if len(r.emu.Running()) != 1 {
		t.Fatalf("running %v, want the one sandbox whose terminate failed", r.emu.Running())
	}
	r.emu.SetTerminateFault(nil, 0)
	rep, err := r.mgr.GC(t.Context(), lifecycle.GCOptions{})
	if err != nil || !rep.Clean() {
		t.Errorf("GC = %+v, %v; want clean", rep, err)
	}
	r.eventuallyNothingRuns(t, time.Second)
}

func TestHangingCreateCancelledPastTheWait(t *testing.T) {
	r := newRig(t, 200*time.Millisecond)
	hang := make(chan struct{})
	r.emu.SetCreateFault(&modalemu.CreateFault{Hang: hang, Times: 1})
	start := time.Now()
	rec, _, err := r.mgr.Create(cancelAfter(t, 50*time.Millisecond), lifecycle.CreateRequest{Provider: "modal", ID: "sb-hang", Spec: bare()})
	if !errors.Is(err, context.Canceled) || time.Since(start) > 2*time.Second {
		t.Fatalf("Create = %v after %s, want context.Canceled soon after the wait", err, time.Since(start))
	}
	if got := r.state(t, rec.ID); got != agentenv.StateAbandoned {
		t.Errorf("record %s, want abandoned", got)
	}
	close(hang) // the request ends and Modal makes the sandbox: this process terminates it
	for deadline := time.Now().Add(5 * time.Second); r.emu.Calls("SandboxTerminate") == 0 && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	r.eventuallyNothingRuns(t, 5*time.Second)
}

func TestRateLimitedCreateFallsThroughTheChain(t *testing.T) {
	r := newRig(t, time.Second)
	r.emu.SetCreateFault(&modalemu.CreateFault{Err: status.Error(codes.ResourceExhausted, "rate limit exceeded")})
	rec, _, err := r.mgr.CreateChain(t.Context(), []string{"modal", "spare"}, lifecycle.CreateRequest{ID: "sb-429", Spec: bare()})
	if err != nil || rec.Provider != "spare" {
		t.Fatalf("CreateChain = %+v, %v; want the spare member", rec, err)
	}
	if live := r.spare.Live(); len(live) != 1 {
		t.Errorf("spare lives %v, want exactly one", live)
	}
	r.mgr.TeardownIDs(t.Context(), rec.ID)
	_, err = r.p.Create(t.Context(), spec("sb-429b"))
	if !errors.Is(err, agentenv.ErrUnavailable) {
		t.Errorf("Create refused for capacity = %v, want ErrUnavailable", err)
	}
}

func TestFinishedSandboxCountsAsTerminatedAndCannotBeReattached(t *testing.T) {
	r := newRig(t, time.Second)
	rec, sb, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "modal", ID: "sb-dead", Spec: bare()})
	if err != nil {
		t.Fatal(err)
	}
	r.emu.Kill(sb.ID, 137)
	tunnels := r.emu.Calls("SandboxGetTunnels")
	rc, err := r.mgr.TeardownIDs(t.Context(), rec.ID)
	if err != nil || !rc.Clean() {
		t.Errorf("teardown = %+v, %v; want clean", rc, err)
	}
	if n := r.emu.Calls("SandboxGetTunnels") - tunnels; n != 0 {
		t.Errorf("teardown read tunnels %d times, want none", n)
	}
	if _, err := r.p.Get(t.Context(), sb.ID); !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("Get of a finished sandbox = %v, want ErrGone", err)
	}
}

func TestKilledProcessMidCreateIsReclaimedByGC(t *testing.T) {
	r := newRig(t, time.Second)
	dead := agentenv.Owner{Host: "elsewhere", PID: 1, Start: 1}
	now := time.Now().UTC()
	rec := agentenv.Record{ID: "sb-orphan", Kind: agentenv.KindSandbox, Provider: "modal", State: agentenv.StateCreating,
		Owner: dead, LeaseUntil: now.Add(-time.Minute), Expires: now.Add(time.Hour), Created: now.Add(-time.Minute),
		Labels: map[string]string{agentenv.LabelRecord: "sb-orphan"}}
	if err := r.mgr.Ledger().Put(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	// The process made the sandbox and died before recording it.
	if _, err := r.p.Create(t.Context(), spec("sb-orphan")); err != nil {
		t.Fatal(err)
	}
	rep, err := r.mgr.GC(t.Context(), lifecycle.GCOptions{})
	if err != nil || !rep.Clean() || len(rep.Actions) == 0 {
		t.Errorf("GC = %+v, %v; want the orphan collected", rep, err)
	}
	r.eventuallyNothingRuns(t, time.Second)
}
