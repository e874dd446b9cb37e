//go:build integration || e2e

package kubernetes_test

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/fault"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/kubernetes"
	"github.com/agentenv/agentenv/provider/providertest"
)

// cluster reads the test cluster from the environment and fails (never skips) without one:
// AGENTENV_TEST_KUBECONFIG names the kubeconfig (scripts/kube/up.sh prints it), and
// AGENTENV_TEST_KUBE_NODE the node Pods are bound to (default kwok-node-0 under the integration
// tag, none, so the scheduler places them, under e2e).
func cluster(t testing.TB) kubernetes.Config {
	t.Helper()
	kc := os.Getenv("AGENTENV_TEST_KUBECONFIG")
	if kc == "" {
		t.Fatalf("these tests need a Kubernetes API server: set AGENTENV_TEST_KUBECONFIG (eval \"$(scripts/kube/up.sh)\" starts a local one)")
	}
	node, ok := os.LookupEnv("AGENTENV_TEST_KUBE_NODE")
	if !ok {
		node = defaultNode
	}
	return kubernetes.Config{Kubeconfig: kc, NodeName: node, Namespace: "agentenv-test"}
}

// newProvider returns a provider on the test cluster, closed when t ends.
func newProvider(t testing.TB, logger *slog.Logger) *kubernetes.Provider {
	t.Helper()
	p, err := kubernetes.New(cluster(t), logger)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// clientset returns p's client, connecting first; it fails t if the cluster does not answer.
func clientset(t testing.TB, p *kubernetes.Provider) kubernetes.API {
	t.Helper()
	cs, err := p.API(t.Context())
	if err != nil {
		t.Fatalf("cluster: %v", err)
	}
	return cs
}

// leftovers returns the Pods, Services, Secrets and NetworkPolicies carrying every one of labels, as
// "kind ns/name", ignoring those being deleted.
func leftovers(ctx context.Context, cs kubernetes.API, labels map[string]string) ([]string, error) {
	var sel []string
	for k, v := range labels {
		sel = append(sel, k+"="+v)
	}
	opts := metav1.ListOptions{LabelSelector: strings.Join(sel, ",")}
	var out []string
	pods, err := cs.Pods("").List(ctx, opts)
	if err != nil {
		return nil, err
	}
	for _, o := range pods.Items {
		if o.DeletionTimestamp == nil {
			out = append(out, "pod "+o.Namespace+"/"+o.Name)
		}
	}
	svcs, err := cs.Services("").List(ctx, opts)
	if err != nil {
		return nil, err
	}
	for _, o := range svcs.Items {
		out = append(out, "service "+o.Namespace+"/"+o.Name)
	}
	nps, err := cs.NetworkPolicies("").List(ctx, opts)
	if err != nil {
		return nil, err
	}
	for _, o := range nps.Items {
		out = append(out, "networkpolicy "+o.Namespace+"/"+o.Name)
	}
	secrets, err := cs.Secrets("").List(ctx, opts)
	if err != nil {
		return nil, err
	}
	for _, o := range secrets.Items {
		out = append(out, "secret "+o.Namespace+"/"+o.Name)
	}
	return out, nil
}

// checkNoLeftovers fails t, when it ends, if anything carrying labels is left.
func checkNoLeftovers(t *testing.T, cs kubernetes.API, labels map[string]string) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		left, err := leftovers(ctx, cs, labels)
		if err != nil {
			t.Errorf("list leftovers: %v", err)
		}
		if len(left) > 0 {
			t.Errorf("left behind with %v: %v", labels, left)
		}
	})
}

func testRun() string { return fmt.Sprintf("kt%x", rand.Uint32()) }

func TestConformance(t *testing.T) {
	run := testRun()
	p := newProvider(t, nil)
	checkNoLeftovers(t, clientset(t, p), map[string]string{"agentenv.test": run})
	opts := workload
	opts.Labels = map[string]string{"agentenv.test": run}
	providertest.Run(t, func(t *testing.T) agentenv.Provider { return p }, opts)
}

// rig is the provider under a lifecycle manager with a bbolt ledger, optionally wrapped.
type rig struct {
	p   *kubernetes.Provider
	cs  kubernetes.API
	mgr *lifecycle.Manager
}

func newRig(t *testing.T, logger *slog.Logger, wrap func(agentenv.Provider) agentenv.Provider) *rig {
	t.Helper()
	p := newProvider(t, logger)
	cs := clientset(t, p)
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	var prov agentenv.Provider = p
	if wrap != nil {
		prov = wrap(p)
	}
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"kubernetes": prov}, Logger: logger})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{p: p, cs: cs, mgr: mgr}
}

// TestComponents_cancelled runs a deployment's create sequence at the provider level (network,
// then service DB, then three components at once, then the gateway) and cancels it at each create,
// as package deploy would past readiness checks the simulated cluster cannot pass; then tears the
// deployment's records down as deploy's undo does. Nothing may be left.
func TestComponents_cancelled(t *testing.T) {
	steps := []fault.Rule{{Op: "create_network", Call: 1}}
	for call := 1; call <= 5; call++ { // service DB, three components at once, gateway
		steps = append(steps, fault.Rule{Op: "create", Call: call})
	}
	for _, step := range steps {
		t.Run(fmt.Sprint(step.Op, step.Call), func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			step.Action, step.Cancel = fault.Cancel, cancel
			plan := fault.NewPlan(step)
			r := newRig(t, nil, func(p agentenv.Provider) agentenv.Provider { return fault.WrapProvider(p, plan) })
			id := "dep-" + testRun()
			checkNoLeftovers(t, r.cs, map[string]string{agentenv.LabelDeployment: id})
			if err := emulateDeploy(ctx, r.mgr, id); err == nil {
				t.Errorf("deploy cancelled at %s %d = nil, want a cancellation", step.Op, step.Call)
			}
			recs, lerr := r.mgr.Ledger().List(context.Background(), agentenv.Filter{Deployment: id})
			if lerr != nil {
				t.Fatal(lerr)
			}
			rc, terr := r.mgr.Teardown(context.Background(), recs)
			if terr != nil || !rc.Clean() {
				t.Errorf("teardown = %+v, %v; want clean", rc, terr)
			}
			if left, err := leftovers(context.Background(), r.cs, map[string]string{agentenv.LabelDeployment: id}); err != nil || len(left) > 0 {
				t.Errorf("after cancelling at %s %d: left %v, %v", step.Op, step.Call, left, err)
			}
		})
	}
}

// emulateDeploy creates what a container-mode deploy of notes creates, in its order.
func emulateDeploy(ctx context.Context, mgr *lifecycle.Manager, dep string) error {
	_, net, err := mgr.Create(ctx, lifecycle.CreateRequest{Provider: "kubernetes", Kind: agentenv.KindNetwork, ID: lifecycle.NewID("net"), Deployment: dep, Role: "network"})
	if err != nil {
		return err
	}
	create := func(ctx context.Context, name string, role agentenv.Role) error {
		_, _, err := mgr.Create(ctx, lifecycle.CreateRequest{
			Provider: "kubernetes", ID: lifecycle.NewID(name), Deployment: dep, Role: role,
			Spec: agentenv.SandboxSpec{Image: workload.Image, Command: workload.Command, Ports: []int{workload.Port}, Network: net.ID, Aliases: []string{name}},
		})
		return err
	}
	if err := create(ctx, "servicedb", "service_db"); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, 3)
	for i, c := range [][2]string{{"notes", "mcp_server"}, {"db-mcp", "db_mcp"}, {"db-web", "db_web"}} {
		wg.Go(func() { errs[i] = create(ctx, c[0], agentenv.Role(c[1])) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return create(ctx, "gateway", "gateway")
}

// TestDeletedBehindOurBack deletes a sandbox's Pod with the API, then tears the record down: the
// receipt must say already gone, with no warning logged, and nothing may be left.
func TestDeletedBehindOurBack(t *testing.T) {
	logs := &warnings{}
	r := newRig(t, slog.New(logs), nil)
	run := testRun()
	checkNoLeftovers(t, r.cs, map[string]string{agentenv.LabelRun: run})
	rec, sb, err := r.mgr.Create(t.Context(), lifecycle.CreateRequest{
		Provider: "kubernetes", Run: run, Role: "conformance",
		Spec: agentenv.SandboxSpec{Image: workload.Image, Command: workload.Command, Ports: []int{workload.Port}},
	})
	if err != nil {
		t.Fatal(err)
	}
	zero := int64(0)
	if err := r.cs.Pods("agentenv-test").Delete(t.Context(), sb.ID, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := r.cs.Pods("agentenv-test").Get(t.Context(), sb.ID, metav1.GetOptions{}); err != nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	rc, err := r.mgr.TeardownIDs(t.Context(), rec.ID)
	if err != nil {
		t.Fatalf("TeardownIDs = %v", err)
	}
	if len(rc.Items) != 1 || rc.Items[0].Outcome != agentenv.OutcomeAlreadyGone {
		t.Errorf("receipt = %+v, want one item already gone", rc.Items)
	}
	if w := logs.list(); len(w) > 0 {
		t.Errorf("warnings logged: %v, want none", w)
	}
}

// warnings is a slog handler that keeps the messages of records at Warn and above.
type warnings struct {
	mu   sync.Mutex
	msgs []string
}

func (w *warnings) Enabled(context.Context, slog.Level) bool { return true }
func (w *warnings) Handle(_ context.Context, r slog.Record) error {
	if r.Level >= slog.LevelWarn {
		w.mu.Lock()
		w.msgs = append(w.msgs, r.Message)
		w.mu.Unlock()
	}
	return nil
}
func (w *warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w *warnings) WithGroup(string) slog.Handler      { return w }
func (w *warnings) list() []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.msgs...)
}
