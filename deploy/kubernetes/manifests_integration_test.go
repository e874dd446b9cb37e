//go:build integration

package kubernetes_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/kubernetes"
	"github.com/agentenv/agentenv/provider/providertest"
)

// testLabel marks what a test makes, with the test's run id as value.
const testLabel = "agentenv.test"

// cluster is the test kube-apiserver, as its admin.
type cluster struct {
	rc     *rest.Config
	dyn    dynamic.Interface
	mapper meta.RESTMapper
}

// newCluster reads AGENTENV_TEST_KUBECONFIG (scripts/kube/up.sh prints it) and fails t, never
// skipping, without it.
func newCluster(t *testing.T) cluster {
	t.Helper()
	kc := os.Getenv("AGENTENV_TEST_KUBECONFIG")
	if kc == "" {
		t.Fatalf("these tests need a Kubernetes API server: set AGENTENV_TEST_KUBECONFIG (eval \"$(scripts/kube/up.sh)\" starts a local one)")
	}
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatalf("kubeconfig %s: %v", kc, err)
	}
	dyn, err := dynamic.NewForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(rc)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		t.Fatalf("discovery on %s: %v", rc.Host, err)
	}
	return cluster{rc: rc, dyn: dyn, mapper: restmapper.NewDiscoveryRESTMapper(groups)}
}

// client returns the client of obj's kind, in ns when the kind is namespaced (and sets obj's
// namespace to it).
func (c cluster) client(t *testing.T, obj *unstructured.Unstructured, ns string) dynamic.ResourceInterface {
	t.Helper()
	gvk := obj.GroupVersionKind()
	m, err := c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		t.Fatalf("%s %s: the API server serves no such kind: %v", gvk, obj.GetName(), err)
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		obj.SetNamespace(ns)
		return c.dyn.Resource(m.Resource).Namespace(ns)
	}
	return c.dyn.Resource(m.Resource)
}

// create makes obj for real and deletes it when t ends.
func (c cluster) create(t *testing.T, obj *unstructured.Unstructured, ns string) {
	t.Helper()
	ri := c.client(t, obj, ns)
	if _, err := ri.Create(t.Context(), obj, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
		t.Fatalf("create %s %s: %v", obj.GetKind(), obj.GetName(), err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := ri.Delete(ctx, obj.GetName(), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			t.Errorf("delete %s %s: %v", obj.GetKind(), obj.GetName(), err)
		}
	})
}

// namespace makes a namespace for t, labelled with run, deleted when t ends (the test cluster
// has no namespace controller: it stays Terminating, empty of what the test made).
func (c cluster) namespace(t *testing.T, run string) string {
	t.Helper()
	ns := "agentenv-dk-" + run
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "v1", "kind": "Namespace",
		"metadata": map[string]any{"name": ns, "labels": map[string]any{testLabel: run}},
	}}
	c.create(t, obj, "")
	return ns
}

// bindTo points a ClusterRoleBinding's ServiceAccount subjects at ns, as whoever deploys the
// manifests does for their namespace.
func bindTo(t *testing.T, obj *unstructured.Unstructured, ns string) {
	t.Helper()
	subjects, _, err := unstructured.NestedSlice(obj.Object, "subjects")
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range subjects {
		if m, ok := s.(map[string]any); ok && m["kind"] == "ServiceAccount" {
			m["namespace"] = ns
		}
	}
	if err := unstructured.SetNestedSlice(obj.Object, subjects, "subjects"); err != nil {
		t.Fatal(err)
	}
}

func newRun() string { return fmt.Sprintf("%08x", rand.Uint32()) }

// TestManifestsDryRun sends every manifest to the API server as a create with dryRun=All and
// strict field validation: the server's own schema, defaulting and admission judge each object,
// and nothing is stored.
func TestManifestsDryRun(t *testing.T) {
	c := newCluster(t)
	run := newRun()
	ns := c.namespace(t, run)
	docs := readManifests(t)
	kinds := map[string]bool{}
	for _, d := range docs {
		obj := d.obj.DeepCopy()
		kinds[obj.GetKind()] = true
		if obj.GetKind() == "ClusterRoleBinding" {
			bindTo(t, obj, ns)
		}
		ri := c.client(t, obj, ns)
		got, err := ri.Create(t.Context(), obj, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"})
		if err != nil {
			t.Errorf("%s: server-side dry run: %v", d, err)
			continue
		}
		if got.GetName() != obj.GetName() {
			t.Errorf("%s: dry run answered %s", d, got.GetName())
		}
		// Nothing stored: a dry run that created would leave the object behind.
		if _, err := ri.Get(t.Context(), obj.GetName(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("%s: after the dry run, get = %v, want not found", d, err)
		}
	}
	for _, k := range []string{"Deployment", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "ConfigMap", "Secret"} {
		if !kinds[k] {
			t.Errorf("the manifests hold no %s", k)
		}
	}
}

// TestWorkerRBACRunsTheProvider makes the workers' ServiceAccount, ClusterRole and binding for
// real (the cluster-scoped ones under names of this run), then runs the kubernetes provider's
// conformance suite with that ServiceAccount's token: every request the provider makes, from
// create to port-forward to terminate, must be one the ClusterRole allows.
func TestWorkerRBACRunsTheProvider(t *testing.T) {
	c := newCluster(t)
	run := newRun()
	ns := c.namespace(t, run)
	docs := readManifests(t)
	var saName string
	for _, kind := range []string{"ServiceAccount", "ClusterRole", "ClusterRoleBinding"} {
		for _, d := range docs {
			if d.obj.GetKind() != kind {
				continue
			}
			obj := d.obj.DeepCopy()
			labels := obj.GetLabels()
			if labels == nil {
				labels = map[string]string{}
			}
			labels[testLabel] = run
			obj.SetLabels(labels)
			switch kind {
			case "ServiceAccount":
				saName = obj.GetName()
			case "ClusterRole":
				obj.SetName(obj.GetName() + "-" + run)
			case "ClusterRoleBinding":
				obj.SetName(obj.GetName() + "-" + run)
				role, _, _ := unstructured.NestedString(obj.Object, "roleRef", "name")
				if err := unstructured.SetNestedField(obj.Object, role+"-"+run, "roleRef", "name"); err != nil {
					t.Fatal(err)
				}
				bindTo(t, obj, ns)
			}
			c.create(t, obj, ns)
		}
	}
	if saName == "" {
		t.Fatal("the manifests hold no ServiceAccount")
	}

	// A token of the ServiceAccount, and a kubeconfig with it alone.
	tr := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
		"metadata": map[string]any{"name": saName}, // the subresource's parent
		"spec":     map[string]any{"expirationSeconds": int64(3600)},
	}}
	sas := c.dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "serviceaccounts"}).Namespace(ns)
	got, err := sas.Create(t.Context(), tr, metav1.CreateOptions{}, "token")
	if err != nil {
		t.Fatalf("token of ServiceAccount %s/%s: %v", ns, saName, err)
	}
	token, _, _ := unstructured.NestedString(got.Object, "status", "token")
	if token == "" {
		t.Fatalf("token request for %s/%s answered no token", ns, saName)
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["test"] = &clientcmdapi.Cluster{Server: c.rc.Host, InsecureSkipTLSVerify: c.rc.Insecure, CertificateAuthorityData: c.rc.CAData}
	kc.AuthInfos["worker"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["worker"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "worker"}
	kc.CurrentContext = "worker"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}

	node, ok := os.LookupEnv("AGENTENV_TEST_KUBE_NODE")
	if !ok {
		node = "kwok-node-0" // scripts/kube/up.sh's simulated node; the cluster has no scheduler
	}
	p, err := kubernetes.New(kubernetes.Config{Kubeconfig: path, NodeName: node, Namespace: ns}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	api, err := p.API(t.Context())
	if err != nil {
		t.Fatalf("the provider as %s/%s: %v", ns, saName, err)
	}
	// The binding reaches the authorizer through its informer: wait for it, bounded.
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := api.Pods("").List(t.Context(), metav1.ListOptions{Limit: 1})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("as %s/%s, listing Pods still fails 30s after the binding: %v", ns, saName, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The token is the ServiceAccount's, not an admin's: what the ClusterRole leaves out is refused.
	if _, err := api.Nodes().List(t.Context(), metav1.ListOptions{Limit: 1}); !apierrors.IsForbidden(err) {
		t.Fatalf("as %s/%s, listing Nodes (granted: get only) = %v, want forbidden", ns, saName, err)
	}

	t.Cleanup(func() { checkNoLeftovers(t, c, run) })
	providertest.Run(t, func(*testing.T) agentenv.Provider { return p }, providertest.Options{
		Image:       "agentenv-kwok:none", // never pulled: the node is simulated
		Command:     []string{"serve"},    // kwok answers port-forwards to any Pod port with HTTP 200
		Port:        8080,
		ExitCommand: []string{"agentenv-kwok-exit", "3"}, // kwok moves such Pods to Failed, exit code 3
		ExitCode:    3,
		Labels:      map[string]string{testLabel: run},
	})
}

// checkNoLeftovers fails t if a Pod (not being deleted), Service, Secret or NetworkPolicy labelled
// with run is left.
func checkNoLeftovers(t *testing.T, c cluster, run string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var left []string
	for _, gvr := range []schema.GroupVersionResource{
		{Version: "v1", Resource: "pods"}, {Version: "v1", Resource: "services"}, {Version: "v1", Resource: "secrets"},
		{Group: "networking.k8s.io", Version: "v1", Resource: "networkpolicies"},
	} {
		l, err := c.dyn.Resource(gvr).List(ctx, metav1.ListOptions{LabelSelector: testLabel + "=" + run})
		if err != nil {
			t.Errorf("list %s: %v", gvr.Resource, err)
			continue
		}
		for _, o := range l.Items {
			if o.GetDeletionTimestamp() == nil {
				left = append(left, gvr.Resource+" "+o.GetNamespace()+"/"+o.GetName())
			}
		}
	}
	if len(left) > 0 {
		t.Errorf("left behind with %s=%s: %s", testLabel, run, strings.Join(left, ", "))
	}
}
