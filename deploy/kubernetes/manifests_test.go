package kubernetes_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/yaml"

	"github.com/agentenv/agentenv/config"
	manifests "github.com/agentenv/agentenv/deploy/kubernetes"
	"github.com/agentenv/agentenv/provider/kubernetes"
)

// doc is one object of a manifest file.
type doc struct {
	file string
	obj  *unstructured.Unstructured
}

func (d doc) String() string {
	return fmt.Sprintf("%s: %s %s", d.file, d.obj.GetKind(), d.obj.GetName())
}

// readManifests returns every object of every manifest file, in file order.
func readManifests(t testing.TB) []doc {
	t.Helper()
	files, err := fs.Glob(manifests.Manifests, "*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests embedded (%v)", err)
	}
	var out []doc
	for _, f := range files {
		b, err := fs.ReadFile(manifests.Manifests, f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(b), 4096)
		for i := 1; ; i++ {
			var m map[string]any
			if err := dec.Decode(&m); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: document %d: %v", f, i, err)
			}
			if len(m) == 0 {
				continue
			}
			out = append(out, doc{file: f, obj: &unstructured.Unstructured{Object: m}})
		}
	}
	return out
}

// one returns the only object of kind, converted to T; it fails t unless there is exactly one.
func one[T any](t testing.TB, docs []doc, kind string) (*T, doc) {
	t.Helper()
	var found []doc
	for _, d := range docs {
		if d.obj.GetKind() == kind {
			found = append(found, d)
		}
	}
	if len(found) != 1 {
		t.Fatalf("manifests hold %d objects of kind %s, want 1: %v", len(found), kind, found)
	}
	out := new(T)
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(found[0].obj.Object, out, true); err != nil {
		t.Fatalf("%s: %v", found[0], err)
	}
	return out, found[0]
}

// triples returns each rule as "group resource verb".
func triples(perms []kubernetes.Permission) []string {
	var out []string
	for _, p := range perms {
		for _, v := range p.Verbs {
			out = append(out, p.Group+" "+p.Resource+" "+v)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// TestClusterRoleIsThePermissions checks that the workers' ClusterRole grants exactly what the
// kubernetes provider requests: each verb it uses, and nothing else.
func TestClusterRoleIsThePermissions(t *testing.T) {
	role, d := one[rbacv1.ClusterRole](t, readManifests(t), "ClusterRole")
	var granted []kubernetes.Permission
	for i, r := range role.Rules {
		if len(r.NonResourceURLs) > 0 || len(r.ResourceNames) > 0 {
			t.Errorf("%s: rule %d: nonResourceURLs or resourceNames, which the provider needs none of", d, i)
		}
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				if g == "*" || res == "*" || slices.Contains(r.Verbs, "*") {
					t.Errorf("%s: rule %d: a wildcard", d, i)
				}
				granted = append(granted, kubernetes.Permission{Group: g, Resource: res, Verbs: r.Verbs})
			}
		}
	}
	got, want := triples(granted), triples(kubernetes.Permissions())
	for _, g := range got {
		if !slices.Contains(want, g) {
			t.Errorf("%s grants %q, which provider/kubernetes.Permissions does not list", d, g)
		}
	}
	for _, w := range want {
		if !slices.Contains(got, w) {
			t.Errorf("%s does not grant %q, which the kubernetes provider requests", d, w)
		}
	}
}

// TestManifestsFitTogether checks the names the objects use for each other and for agentenv's
// settings: the Deployment's ServiceAccount, ConfigMap and Secret, the binding's role and
// subject, and the environment variables agentenv reads.
func TestManifestsFitTogether(t *testing.T) {
	docs := readManifests(t)
	dep, dd := one[appsv1.Deployment](t, docs, "Deployment")
	sa, _ := one[corev1.ServiceAccount](t, docs, "ServiceAccount")
	role, _ := one[rbacv1.ClusterRole](t, docs, "ClusterRole")
	binding, bd := one[rbacv1.ClusterRoleBinding](t, docs, "ClusterRoleBinding")
	cm, _ := one[corev1.ConfigMap](t, docs, "ConfigMap")
	secret, sd := one[corev1.Secret](t, docs, "Secret")

	for _, d := range docs {
		if d.obj.GetNamespace() != "" {
			t.Errorf("%s names namespace %q: the manifests are namespace-agnostic (kubectl -n)", d, d.obj.GetNamespace())
		}
	}
	if binding.RoleRef.Kind != "ClusterRole" || binding.RoleRef.Name != role.Name {
		t.Errorf("%s binds %s %s, want ClusterRole %s", bd, binding.RoleRef.Kind, binding.RoleRef.Name, role.Name)
	}
	if len(binding.Subjects) != 1 || binding.Subjects[0].Kind != "ServiceAccount" || binding.Subjects[0].Name != sa.Name {
		t.Errorf("%s subjects %+v, want the ServiceAccount %s alone", bd, binding.Subjects, sa.Name)
	}
	spec := dep.Spec.Template.Spec
	if spec.ServiceAccountName != sa.Name {
		t.Errorf("%s runs as ServiceAccount %q, want %q", dd, spec.ServiceAccountName, sa.Name)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%s has %d containers, want 1", dd, len(spec.Containers))
	}
	c := spec.Containers[0]
	if len(c.Args) == 0 || c.Args[0] != "worker" {
		t.Errorf("%s runs %v %v, want agentenv worker", dd, c.Command, c.Args)
	}

	// The environment: what the container defines, each from an object that holds it.
	env := map[string]bool{}
	for _, e := range c.Env {
		env[e.Name] = true
		if ref := e.ValueFrom; ref != nil && ref.ConfigMapKeyRef != nil {
			if ref.ConfigMapKeyRef.Name != cm.Name {
				t.Errorf("%s: %s from ConfigMap %q, want %q", dd, e.Name, ref.ConfigMapKeyRef.Name, cm.Name)
			} else if _, ok := cm.Data[ref.ConfigMapKeyRef.Key]; !ok {
				t.Errorf("%s: %s from key %q, which ConfigMap %s lacks", dd, e.Name, ref.ConfigMapKeyRef.Key, cm.Name)
			}
		}
	}
	for _, f := range c.EnvFrom {
		if f.SecretRef == nil || f.SecretRef.Name != secret.Name {
			t.Errorf("%s: envFrom %+v, want the Secret %s alone", dd, f, secret.Name)
			continue
		}
		for k := range secret.StringData {
			env[k] = true
		}
	}
	ledger := config.EnvName("ledger.dsn")
	if _, ok := secret.StringData[ledger]; !ok {
		t.Errorf("%s lacks %s, the variable of ledger.dsn: keys %v", sd, ledger, slices.Sorted(maps.Keys(secret.StringData)))
	}
	for _, name := range []string{ledger, config.EnvName("provider.kubernetes.namespace"), "AGENTENV_CONFIG",
		"AGENTENV_RUNNER_TEMPORAL", "AGENTENV_RUNNER_NAMESPACE", "AGENTENV_RUNNER_TASK_QUEUE", "AGENTENV_RUNNER_SLOTS"} {
		if !env[name] {
			t.Errorf("%s does not set %s", dd, name)
		}
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	for _, a := range c.Args {
		for _, m := range ref.FindAllStringSubmatch(a, -1) {
			if !env[m[1]] {
				t.Errorf("%s: argument %q refers to $(%s), which the container does not define (Kubernetes would pass it literally)", dd, a, m[1])
			}
		}
	}
}

// TestConfigLoads loads the ConfigMap's config.toml as the worker does (AGENTENV_CONFIG) and
// checks the settings it is there for.
func TestConfigLoads(t *testing.T) {
	cm, d := one[corev1.ConfigMap](t, readManifests(t), "ConfigMap")
	toml, ok := cm.Data["config.toml"]
	if !ok {
		t.Fatalf("%s has no config.toml", d)
	}
	path := filepath.Join(t.TempDir(), "config.toml")
	if err := os.WriteFile(path, []byte(toml), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"AGENTENV_CONFIG": path}
	cfg, err := config.Load(func(k string) string { return env[k] }, t.TempDir())
	if err != nil {
		t.Fatalf("%s: config.toml: %v", d, err)
	}
	for key, want := range map[string]string{
		"provider.default":               "kubernetes",
		"provider.kubernetes.kubeconfig": "", // in-cluster
	} {
		if got := cfg.Raw(key); got != want {
			t.Errorf("%s: config.toml: %s = %q, want %q", d, key, got, want)
		}
	}
	if strings.Contains(toml, "dsn") {
		t.Errorf("%s: config.toml mentions a DSN: it belongs in the Secret", d)
	}
}
