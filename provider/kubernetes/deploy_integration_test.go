//go:build integration && !e2e

package kubernetes_test

import (
	"context"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/internal/fault"
	"github.com/agentenv/agentenv/internal/testbin"
	"github.com/agentenv/agentenv/internal/testproc"
	"github.com/agentenv/agentenv/provider/kubernetes"
	"github.com/agentenv/agentenv/spec"
)

// notesEnv is examples/notes with images that never run (the node is simulated) and a service
// DB that gives up waiting quickly, since nothing on kwok answers a Postgres query.
func notesEnv(t *testing.T) *spec.Env {
	env, err := spec.Parse("notes.yaml", []byte(`name: notes
servers:
  - name: notes
    image: agentenv:dev
    command: [/agentenv, serve, notes, --listen, ":8080"]
    port: 8080
    database: true
service_db:
  image: agentenv-postgres:local
  ready_timeout: 4s
  web_ui:
    enabled: true
  db_mcp:
    enabled: true
gateway:
  image: agentenv:dev
`))
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// TestDeploy_notes deploys notes in container mode through package deploy. Its first wave (the
// network and the service DB) must appear as the expected objects; the deploy then fails on the
// service DB's readiness (no Postgres runs on a simulated node) and must leave nothing.
func TestDeploy_notes(t *testing.T) {
	r := newRig(t, nil, nil)
	id := "dep-" + testRun()
	checkNoLeftovers(t, r.cs, map[string]string{agentenv.LabelDeployment: id})
	done := make(chan error, 1)
	go func() {
		_, err := deploy.New(r.mgr, nil).Deploy(t.Context(), notesEnv(t), deploy.Options{Provider: "kubernetes", Name: id, Budget: 2 * time.Minute})
		done <- err
	}()

	ctx := t.Context()
	sel := metav1.ListOptions{LabelSelector: agentenv.LabelDeployment + "=" + id}
	var seen []string
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) && len(seen) == 0 {
		pods, err := r.cs.Pods("").List(ctx, metav1.ListOptions{LabelSelector: sel.LabelSelector + "," + agentenv.LabelRole + "=service_db"})
		if err != nil {
			t.Fatal(err)
		}
		for _, pod := range pods.Items {
			ns := pod.Namespace
			if pod.Status.Phase != "Running" {
				continue
			}
			seen = append(seen, "pod "+ns+"/"+pod.Name)
			if _, err := r.cs.Services(ns).Get(ctx, "servicedb", metav1.GetOptions{}); err != nil {
				t.Errorf("service servicedb in %s: %v", ns, err)
			}
			nsObj, err := r.cs.Namespaces().Get(ctx, ns, metav1.GetOptions{})
			if err != nil || nsObj.Labels[agentenv.LabelDeployment] != id || nsObj.Labels[agentenv.LabelRole] != "network" {
				t.Errorf("namespace %s = %v, %v; want the deployment's network", ns, nsObj.Labels, err)
			}
			nps, err := r.cs.NetworkPolicies(ns).List(ctx, sel)
			if err != nil || len(nps.Items) != 5 {
				t.Errorf("network policies in %s = %d, %v; want 5", ns, len(nps.Items), err)
			}
			if _, err := r.cs.NetworkPolicies(ns).Get(ctx, kubernetes.PolicyEgress, metav1.GetOptions{}); err != nil {
				t.Errorf("egress policy in %s: %v", ns, err)
			}
			checkHardened(t, ctx, r.cs, &pod)
			if pod.Spec.ActiveDeadlineSeconds == nil || pod.Labels[agentenv.LabelExpires] == "" {
				t.Errorf("pod %s lacks its backstop: deadline %v labels %v", pod.Name, pod.Spec.ActiveDeadlineSeconds, pod.Labels)
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	if len(seen) == 0 {
		t.Errorf("no running service DB pod of deployment %s within 60s", id)
	}
	select {
	case err := <-done:
		if err == nil {
			t.Fatalf("Deploy on simulated nodes = nil, want a readiness failure")
		}
		t.Logf("deploy failed as expected on simulated nodes: %.200v", err)
	case <-time.After(2 * time.Minute):
		t.Fatalf("Deploy did not return within 2m")
	}
	if left, err := leftovers(ctx, r.cs, map[string]string{agentenv.LabelDeployment: id}); err != nil || len(left) > 0 {
		t.Errorf("after the failed deploy: left %v, %v", left, err)
	}
}

// checkHardened checks what the API server stored of the service DB's Pod: seccomp
// RuntimeDefault, no privilege escalation, no capabilities, the env file's default limits and
// their requests, and its environment (the superuser's password among it) only in its Secret.
func checkHardened(t *testing.T, ctx context.Context, cs kubernetes.API, pod *corev1.Pod) {
	t.Helper()
	if psc := pod.Spec.SecurityContext; psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("pod %s security context = %+v, want seccomp RuntimeDefault", pod.Name, psc)
	} else if psc.RunAsNonRoot != nil {
		t.Errorf("pod %s: runAsNonRoot set for the postgres image, whose user is not numeric", pod.Name)
	}
	c := pod.Spec.Containers[0]
	if sc := c.SecurityContext; sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation || sc.Capabilities == nil ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" {
		t.Errorf("container security context = %+v", sc)
	}
	if c.Resources.Limits.Memory().Value() != spec.DefaultMemory || c.Resources.Limits.Cpu().MilliValue() != 1000 ||
		c.Resources.Requests.Memory().Value() != spec.DefaultMemory/4 || c.Resources.Requests.Cpu().MilliValue() != 250 {
		t.Errorf("resources = limits %v requests %v, want 1Gi/1 and a quarter", c.Resources.Limits, c.Resources.Requests)
	}
	secret, err := cs.Secrets(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("secret of %s: %v", pod.Name, err)
	}
	if len(secret.Data["POSTGRES_PASSWORD"]) == 0 {
		t.Errorf("secret %s lacks POSTGRES_PASSWORD: keys %v", secret.Name, slices.Collect(maps.Keys(secret.Data)))
	}
	for _, e := range c.Env {
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != secret.Name {
			t.Errorf("env %s of pod %s = %+v, want a reference into Secret %s", e.Name, pod.Name, e, secret.Name)
		}
	}
}

// TestDeploy_cancelled cancels a container-mode deploy of notes at each step boundary the
// simulated cluster reaches: the network create, the service DB create, and the service DB's
// readiness wait. Nothing of the deployment may be left.
func TestDeploy_cancelled(t *testing.T) {
	for _, step := range []struct{ op string }{{"create_network"}, {"create"}, {"ready"}} {
		t.Run(step.op, func(t *testing.T) {
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var plan *fault.Plan
			if step.op != "ready" {
				plan = fault.NewPlan(fault.Rule{Op: step.op, Call: 1, Action: fault.Cancel, Cancel: cancel})
			} else {
				plan = fault.NewPlan()
				time.AfterFunc(2*time.Second, cancel)
			}
			r := newRig(t, nil, func(p agentenv.Provider) agentenv.Provider { return fault.WrapProvider(p, plan) })
			id := "dep-" + testRun()
			checkNoLeftovers(t, r.cs, map[string]string{agentenv.LabelDeployment: id})
			_, err := deploy.New(r.mgr, nil).Deploy(ctx, notesEnv(t), deploy.Options{Provider: "kubernetes", Name: id, Budget: time.Minute})
			if err == nil || ctx.Err() == nil {
				t.Fatalf("Deploy cancelled at %s = %v (ctx %v), want a cancellation", step.op, err, ctx.Err())
			}
			if left, err := leftovers(context.Background(), r.cs, map[string]string{agentenv.LabelDeployment: id}); err != nil || len(left) > 0 {
				t.Errorf("after a deploy cancelled at %s: left %v, %v", step.op, left, err)
			}
		})
	}
}

// TestCLI_killedThenGC deploys notes with the CLI, kills it with SIGKILL while the service DB is
// up, and runs agentenv gc: everything the deploy made must be gone.
func TestCLI_killedThenGC(t *testing.T) {
	cfg := cluster(t)
	p := newProvider(t, nil)
	cs := clientset(t, p)
	dir := t.TempDir()
	bin := testbin.Agentenv(t)
	envFile := filepath.Join(dir, "notes.yaml")
	if err := os.WriteFile(envFile, []byte(`name: notes
servers:
  - name: notes
    image: agentenv:dev
    command: [/agentenv, serve, notes, --listen, ":8080"]
    port: 8080
    database: true
service_db:
  image: agentenv-postgres:local
  ready_timeout: 2m
gateway:
  image: agentenv:dev
`), 0o644); err != nil {
		t.Fatal(err)
	}
	id := "dep-" + testRun()
	labels := map[string]string{agentenv.LabelDeployment: id}
	checkNoLeftovers(t, cs, labels)
	env := append(os.Environ(),
		"AGENTENV_PROVIDER_KUBERNETES_KUBECONFIG="+cfg.Kubeconfig,
		"AGENTENV_PROVIDER_KUBERNETES_NODE_NAME="+cfg.NodeName,
		"AGENTENV_CONFIG=", "XDG_STATE_HOME="+filepath.Join(dir, "state"),
	)
	ledger := "--ledger=" + filepath.Join(dir, "ledger.db")
	cmd := exec.Command(bin, "env", "deploy", envFile, "--provider", "kubernetes", "--name", id, ledger)
	cmd.Env = env
	out := &testproc.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill() })
	deadline := time.Now().Add(60 * time.Second)
	for {
		pods, err := cs.Pods("").List(t.Context(), metav1.ListOptions{LabelSelector: agentenv.LabelDeployment + "=" + id})
		if err == nil && len(pods.Items) > 0 && pods.Items[0].Status.Phase == "Running" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no running pod of %s within 60s; CLI output:\n%s", id, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	if left, err := leftovers(t.Context(), cs, labels); err != nil || len(left) == 0 {
		t.Fatalf("after SIGKILL: leftovers %v, %v; want the deploy's objects still there", left, err)
	}
	gc := exec.Command(bin, "gc", ledger)
	gc.Env = env
	gcOut, err := gc.CombinedOutput()
	if err != nil {
		t.Fatalf("agentenv gc: %v\n%s", err, gcOut)
	}
	if left, err := leftovers(t.Context(), cs, labels); err != nil || len(left) > 0 {
		t.Errorf("after gc: left %v, %v\ngc said:\n%s", left, err, gcOut)
	}
}
