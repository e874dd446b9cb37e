package kubernetes

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/gentype"
	k8stesting "k8s.io/client-go/testing"

	"github.com/agentenv/agentenv"
)

// newFake returns a provider on a fake API whose Pods run as soon as they are created (with a
// UID), as kwok makes them.
func newFake(t *testing.T, cfg Config) (*Provider, *fakeAPI) {
	t.Helper()
	cs := newFakeAPI(t)
	cs.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		pod := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod)
		pod.UID = types.UID("uid-" + pod.Name)
		pod.Status.Phase = corev1.PodRunning
		return false, nil, nil
	})
	p, err := New(cfg, nil)
	if err != nil {
		t.Fatalf("New = %v", err)
	}
	p.api, p.where = cs, "the fake API"
	t.Cleanup(func() { p.Close() })
	return p, cs
}

// fakeAPI is the provider's API on client-go's object tracker, with its watches: what
// client-go's fake clientset is, for the two groups the provider speaks.
type fakeAPI struct {
	k8stesting.Fake
	objects k8stesting.ObjectTracker
}

var _ API = (*fakeAPI)(nil)

func newFakeAPI(t *testing.T) *fakeAPI {
	t.Helper()
	scheme, err := newScheme()
	if err != nil {
		t.Fatal(err)
	}
	f := &fakeAPI{objects: k8stesting.NewObjectTracker(scheme, serializer.NewCodecFactory(scheme).UniversalDecoder())}
	f.AddReactor("*", "*", k8stesting.ObjectReaction(f.objects))
	f.AddWatchReactor("*", func(a k8stesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if wa, ok := a.(k8stesting.WatchActionImpl); ok {
			opts = wa.ListOptions
		}
		w, err := f.objects.Watch(a.GetResource(), a.GetNamespace(), opts)
		return err == nil, w, err
	})
	return f
}

// fakeResource returns the fake client of resource (of kind) in namespace; items points at a
// list's items.
func fakeResource[E, LE any, T interface {
	*E
	object
}, L interface {
	*LE
	runtime.Object
}](f *k8stesting.Fake, gv schema.GroupVersion, resource, kind, namespace string, items func(L) *[]E) Resource[T, L] {
	return gentype.NewFakeClientWithList(f, namespace, gv.WithResource(resource), gv.WithKind(kind),
		func() T { return new(E) }, func() L { return new(LE) },
		func(dst, src L) {}, // a list's metadata: the provider reads none
		func(l L) []T {
			var out []T
			for i := range *items(l) {
				out = append(out, &(*items(l))[i])
			}
			return out
		},
		func(l L, ts []T) {
			*items(l) = nil
			for _, t := range ts {
				*items(l) = append(*items(l), *(*E)(t))
			}
		})
}

func (f *fakeAPI) Pods(ns string) Resource[*corev1.Pod, *corev1.PodList] {
	return fakeResource(&f.Fake, corev1.SchemeGroupVersion, "pods", "Pod", ns, func(l *corev1.PodList) *[]corev1.Pod { return &l.Items })
}

func (f *fakeAPI) Services(ns string) Resource[*corev1.Service, *corev1.ServiceList] {
	return fakeResource(&f.Fake, corev1.SchemeGroupVersion, "services", "Service", ns, func(l *corev1.ServiceList) *[]corev1.Service { return &l.Items })
}

func (f *fakeAPI) ServiceAccounts(ns string) Resource[*corev1.ServiceAccount, *corev1.ServiceAccountList] {
	return fakeResource(&f.Fake, corev1.SchemeGroupVersion, "serviceaccounts", "ServiceAccount", ns, func(l *corev1.ServiceAccountList) *[]corev1.ServiceAccount { return &l.Items })
}

func (f *fakeAPI) Secrets(ns string) Resource[*corev1.Secret, *corev1.SecretList] {
	return fakeResource(&f.Fake, corev1.SchemeGroupVersion, "secrets", "Secret", ns, func(l *corev1.SecretList) *[]corev1.Secret { return &l.Items })
}

func (f *fakeAPI) Namespaces() Resource[*corev1.Namespace, *corev1.NamespaceList] {
	return fakeResource(&f.Fake, corev1.SchemeGroupVersion, "namespaces", "Namespace", "", func(l *corev1.NamespaceList) *[]corev1.Namespace { return &l.Items })
}

func (f *fakeAPI) Nodes() Resource[*corev1.Node, *corev1.NodeList] {
	return fakeResource(&f.Fake, corev1.SchemeGroupVersion, "nodes", "Node", "", func(l *corev1.NodeList) *[]corev1.Node { return &l.Items })
}

func (f *fakeAPI) NetworkPolicies(ns string) Resource[*networkingv1.NetworkPolicy, *networkingv1.NetworkPolicyList] {
	return fakeResource(&f.Fake, networkingv1.SchemeGroupVersion, "networkpolicies", "NetworkPolicy", ns, func(l *networkingv1.NetworkPolicyList) *[]networkingv1.NetworkPolicy { return &l.Items })
}

func labelsFor(id, role string) map[string]string {
	return map[string]string{
		agentenv.LabelRecord:     id,
		agentenv.LabelRun:        "run-1",
		agentenv.LabelDeployment: "dep-1",
		agentenv.LabelOwner:      "host.example/123/456",
		agentenv.LabelExpires:    "2030-01-02T03:04:05Z",
		agentenv.LabelRole:       role,
	}
}

func TestCreate_podAndServiceShape(t *testing.T) {
	p, cs := newFake(t, Config{NodeName: "kwok-node-0", StopGrace: 2 * time.Second})
	ctx := t.Context()
	expires := time.Now().Add(time.Hour)
	spec := agentenv.SandboxSpec{
		Name: "sb-1", Image: "img:1", Command: []string{"serve", "--port", "8080"},
		Env: map[string]string{"B": "2", "A": "1"}, Labels: labelsFor("sb-1", "conformance"),
		Ports: []int{8080}, Memory: 64 << 20, CPUs: 0.5, CapAdd: []string{"NET_BIND_SERVICE"}, Expires: expires,
	}
	sb, err := p.Create(ctx, spec)
	if err != nil {
		t.Fatalf("Create = %v", err)
	}
	if sb.ID != "sb-1" || sb.Name != "sb-1" || sb.State != agentenv.SandboxRunning || sb.Provider != "kubernetes" {
		t.Errorf("Create = %+v, want sb-1 running on kubernetes", sb)
	}
	pod, err := cs.Pods(DefaultNamespace).Get(ctx, "sb-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pod: %v", err)
	}
	if got := pod.Labels[agentenv.LabelRecord]; got != "sb-1" {
		t.Errorf("pod label record = %q", got)
	}
	if got := pod.Labels[agentenv.LabelExpires]; got != "20300102T030405Z" {
		t.Errorf("pod label expires = %q, want the label-safe form 20300102T030405Z", got)
	}
	if got := pod.Labels[agentenv.LabelOwner]; strings.Contains(got, "/") || got == "" {
		t.Errorf("pod label owner = %q, want a label-safe digest", got)
	}
	if got := readLabels(pod.Labels, pod.Annotations); got[agentenv.LabelOwner] != "host.example/123/456" || got[agentenv.LabelExpires] != "2030-01-02T03:04:05Z" {
		t.Errorf("labels read back = %v, want the exact values", got)
	}
	s := pod.Spec
	if s.ActiveDeadlineSeconds == nil || *s.ActiveDeadlineSeconds < 3590 || *s.ActiveDeadlineSeconds > 3601 {
		t.Errorf("activeDeadlineSeconds = %v, want about 3600 (time to Expires)", s.ActiveDeadlineSeconds)
	}
	if s.NodeName != "kwok-node-0" || s.RestartPolicy != corev1.RestartPolicyNever || s.ServiceAccountName != ServiceAccountName {
		t.Errorf("pod spec node %q restart %q sa %q", s.NodeName, s.RestartPolicy, s.ServiceAccountName)
	}
	if s.AutomountServiceAccountToken == nil || *s.AutomountServiceAccountToken {
		t.Errorf("automountServiceAccountToken = %v, want false", s.AutomountServiceAccountToken)
	}
	if s.TerminationGracePeriodSeconds == nil || *s.TerminationGracePeriodSeconds != 2 {
		t.Errorf("terminationGracePeriodSeconds = %v, want 2", s.TerminationGracePeriodSeconds)
	}
	c := s.Containers[0]
	if c.Image != "img:1" || strings.Join(c.Args, " ") != "serve --port 8080" || len(c.Command) != 0 {
		t.Errorf("container image %q args %q command %q", c.Image, c.Args, c.Command)
	}
	if len(c.Env) != 2 || c.Env[0].Name != "A" || c.Env[1].Name != "B" {
		t.Errorf("env = %v, want A, B sorted", c.Env)
	}
	for _, e := range c.Env {
		if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name != "sb-1" || e.ValueFrom.SecretKeyRef.Key != e.Name {
			t.Errorf("env %s = %+v, want a reference to key %s of Secret sb-1 and no value in the Pod", e.Name, e, e.Name)
		}
	}
	secret, err := cs.Secrets(DefaultNamespace).Get(ctx, "sb-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("secret: %v", err)
	}
	if string(secret.Data["A"]) != "1" || string(secret.Data["B"]) != "2" || len(secret.Data) != 2 || secret.Labels[agentenv.LabelRecord] != "sb-1" ||
		secret.Immutable == nil || !*secret.Immutable {
		t.Errorf("secret data %q labels %v immutable %v, want A=1 B=2, the record label, immutable", secret.Data, secret.Labels, secret.Immutable)
	}
	if psc := s.SecurityContext; psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || psc.RunAsNonRoot != nil {
		t.Errorf("pod security context = %+v, want seccomp RuntimeDefault and no runAsNonRoot for an image not known to be non-root", psc)
	}
	sc := c.SecurityContext
	if sc == nil || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation ||
		len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" || len(sc.Capabilities.Add) != 1 {
		t.Errorf("security context = %+v", sc)
	}
	if c.Resources.Limits.Memory().Value() != 64<<20 || c.Resources.Limits.Cpu().MilliValue() != 500 {
		t.Errorf("limits = %v", c.Resources.Limits)
	}
	if c.Resources.Requests.Memory().Value() != 16<<20 || c.Resources.Requests.Cpu().MilliValue() != 125 {
		t.Errorf("requests = %v, want a quarter of the limits", c.Resources.Requests)
	}

	// An image known to run as a non-root user is held to it; without env there is no Secret.
	nr := agentenv.SandboxSpec{Name: "sb-2", Image: "agentenv:dev", Labels: labelsFor("sb-2", "conformance"), NonRoot: true, Expires: expires}
	if _, err := p.Create(ctx, nr); err != nil {
		t.Fatalf("Create non-root = %v", err)
	}
	pod2, err := cs.Pods(DefaultNamespace).Get(ctx, "sb-2", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("pod sb-2: %v", err)
	}
	if psc := pod2.Spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("non-root pod security context = %+v, want runAsNonRoot and seccomp RuntimeDefault", psc)
	}
	if _, err := cs.Secrets(DefaultNamespace).Get(ctx, "sb-2", metav1.GetOptions{}); err == nil {
		t.Errorf("a Secret exists for a sandbox without env")
	}

	svc, err := cs.Services(DefaultNamespace).Get(ctx, "sb-1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("service named by the record id: %v", err)
	}
	if svc.Spec.Selector[agentenv.LabelRecord] != "sb-1" || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8080 {
		t.Errorf("service selector %v ports %v", svc.Spec.Selector, svc.Spec.Ports)
	}
	if len(svc.OwnerReferences) != 1 || svc.OwnerReferences[0].Kind != "Pod" || svc.OwnerReferences[0].UID != "uid-sb-1" {
		t.Errorf("service owner references = %v, want the pod", svc.OwnerReferences)
	}
	if svc.Labels[agentenv.LabelRecord] != "sb-1" {
		t.Errorf("service labels = %v", svc.Labels)
	}
	if _, err := cs.ServiceAccounts(DefaultNamespace).Get(ctx, ServiceAccountName, metav1.GetOptions{}); err != nil {
		t.Errorf("service account in %s: %v", DefaultNamespace, err)
	}
	// Terminate removes the Secret with the Pod.
	if err := p.Terminate(ctx, "sb-1"); err != nil {
		t.Fatalf("Terminate(sb-1) = %v", err)
	}
	if _, err := cs.Secrets(DefaultNamespace).Get(ctx, "sb-1", metav1.GetOptions{}); err == nil {
		t.Errorf("secret sb-1 still exists after Terminate")
	}
}

func TestDeadline(t *testing.T) {
	p, _ := newFake(t, Config{DefaultTimeout: 2 * time.Hour})
	now := time.Now()
	for _, tt := range []struct {
		name string
		spec agentenv.SandboxSpec
		want int64
	}{
		{"timeout wins", agentenv.SandboxSpec{Timeout: 90 * time.Second, Expires: now.Add(time.Hour)}, 90},
		{"expires", agentenv.SandboxSpec{Expires: now.Add(10 * time.Minute)}, 600},
		{"neither", agentenv.SandboxSpec{}, 7200},
		{"expired", agentenv.SandboxSpec{Expires: now.Add(-time.Minute)}, 1},
	} {
		if got := p.deadline(tt.spec, now); got != tt.want {
			t.Errorf("%s: deadline = %d, want %d", tt.name, got, tt.want)
		}
	}
	// agentenv.expires is always set, from the deadline when the spec has no label for it.
	pod, err := p.podFor("ns", agentenv.SandboxSpec{Name: "x", Image: "i", Labels: map[string]string{agentenv.LabelRecord: "x"}}, now)
	if err != nil {
		t.Fatal(err)
	}
	if pod.Labels[agentenv.LabelExpires] == "" {
		t.Errorf("pod labels %v lack %s", pod.Labels, agentenv.LabelExpires)
	}
}

func TestCreateNetwork_namespaceAndPolicies(t *testing.T) {
	p, cs := newFake(t, Config{})
	ctx := t.Context()
	net, err := p.CreateNetwork(ctx, agentenv.NetworkSpec{Name: "net-1", Labels: labelsFor("net-1", "network")})
	if err != nil {
		t.Fatalf("CreateNetwork = %v", err)
	}
	if net.ID != "net-1" || net.State != agentenv.SandboxRunning {
		t.Errorf("CreateNetwork = %+v", net)
	}
	ns, err := cs.Namespaces().Get(ctx, "net-1", metav1.GetOptions{})
	if err != nil || ns.Labels[agentenv.LabelRecord] != "net-1" {
		t.Fatalf("namespace = %v, %v", ns, err)
	}
	if _, err := cs.ServiceAccounts("net-1").Get(ctx, ServiceAccountName, metav1.GetOptions{}); err != nil {
		t.Errorf("service account: %v", err)
	}
	nps, err := cs.NetworkPolicies("net-1").List(ctx, metav1.ListOptions{})
	if err != nil || len(nps.Items) != 5 {
		t.Fatalf("policies = %v, %v; want 5", nps, err)
	}
	var egress *networkingv1.NetworkPolicy
	for i := range nps.Items {
		if nps.Items[i].Name == PolicyEgress {
			egress = &nps.Items[i]
		}
	}
	if egress == nil {
		t.Fatalf("no %s policy", PolicyEgress)
	}
	// Every Pod of the namespace; egress only to the namespace's own Pods and to port 53.
	if e := egress.Spec; len(e.PodSelector.MatchLabels)+len(e.PodSelector.MatchExpressions) != 0 ||
		!slices.Equal(e.PolicyTypes, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}) || len(e.Egress) != 2 {
		t.Fatalf("egress policy = %+v", e)
	}
	for _, rule := range egress.Spec.Egress {
		switch {
		case len(rule.Ports) == 0:
			if len(rule.To) != 1 || rule.To[0].PodSelector == nil || rule.To[0].NamespaceSelector != nil || rule.To[0].IPBlock != nil ||
				len(rule.To[0].PodSelector.MatchLabels) != 0 {
				t.Errorf("egress rule without ports reaches %+v, want the namespace's own Pods only", rule.To)
			}
		default:
			if len(rule.To) != 0 || len(rule.Ports) != 2 || rule.Ports[0].Port.IntValue() != 53 || rule.Ports[1].Port.IntValue() != 53 ||
				*rule.Ports[0].Protocol != corev1.ProtocolUDP || *rule.Ports[1].Protocol != corev1.ProtocolTCP {
				t.Errorf("egress rule with ports = %+v, want DNS (53/udp, 53/tcp) only", rule)
			}
		}
	}
	for _, np := range nps.Items {
		if np.Labels[agentenv.LabelRecord] != "net-1" {
			t.Errorf("policy %s labels = %v", np.Name, np.Labels)
		}
	}
	roles := []string{roleGateway, roleMCPServer, roleServiceDB, roleDBMCP, roleDBWeb, "other"}
	want := map[[2]string]bool{}
	for _, to := range roles {
		want[[2]string{"outside", roleGateway}] = true
		for _, from := range roles {
			want[[2]string{from, roleGateway}] = true
			want[[2]string{from, to}] = to == roleGateway
		}
	}
	want[[2]string{roleGateway, roleMCPServer}] = true
	want[[2]string{roleGateway, roleDBMCP}] = true // db-mcp is a backend of the gateway
	want[[2]string{roleMCPServer, roleServiceDB}] = true
	want[[2]string{roleDBMCP, roleServiceDB}] = true
	want[[2]string{roleDBWeb, roleServiceDB}] = true
	for pair, ok := range want {
		if got := allowed(nps.Items, pair[0], pair[1]); got != ok {
			t.Errorf("ingress %s -> %s allowed = %v, want %v", pair[0], pair[1], got, ok)
		}
	}

	// A component joins the network under its aliases: a Service per alias, in the namespace.
	spec := agentenv.SandboxSpec{
		Name: "notes-1", Image: "img", Labels: labelsFor("notes-1", roleMCPServer), Ports: []int{8080},
		Network: "net-1", Aliases: []string{"notes"}, Timeout: time.Minute,
	}
	if _, err := p.Create(ctx, spec); err != nil {
		t.Fatalf("Create on the network = %v", err)
	}
	if _, err := cs.Pods("net-1").Get(ctx, "notes-1", metav1.GetOptions{}); err != nil {
		t.Errorf("pod in the network's namespace: %v", err)
	}
	svc, err := cs.Services("net-1").Get(ctx, "notes", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("service named by the alias: %v", err)
	}
	if svc.Spec.Selector[agentenv.LabelRecord] != "notes-1" || svc.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("alias service selector %v type %s", svc.Spec.Selector, svc.Spec.Type)
	}
	if _, err := cs.Services("net-1").Get(ctx, "notes-1", metav1.GetOptions{}); err == nil {
		t.Errorf("a service named by the record id exists next to the alias's")
	}

	// Terminating the network removes its policies, service account and namespace.
	if err := p.Terminate(ctx, "net-1"); err != nil {
		t.Fatalf("Terminate(net-1) = %v", err)
	}
	if nps, _ := cs.NetworkPolicies("net-1").List(ctx, metav1.ListOptions{}); len(nps.Items) != 0 {
		t.Errorf("policies after Terminate = %d, want 0", len(nps.Items))
	}
	if _, err := cs.Namespaces().Get(ctx, "net-1", metav1.GetOptions{}); err == nil {
		t.Errorf("namespace net-1 still exists after Terminate")
	}
}

// allowed evaluates ingress policies (pod selectors by role only) for a connection from a Pod
// of role from (or "outside" the namespace) to a Pod of role to.
func allowed(nps []networkingv1.NetworkPolicy, from, to string) bool {
	selects := func(sel metav1.LabelSelector, role string) bool {
		s, err := metav1.LabelSelectorAsSelector(&sel)
		return err == nil && s.Matches(labels.Set{agentenv.LabelRole: role})
	}
	isolated, ok := false, false
	for _, np := range nps {
		if !selects(np.Spec.PodSelector, to) {
			continue
		}
		isolated = true
		for _, rule := range np.Spec.Ingress {
			if len(rule.From) == 0 {
				ok = true
			}
			for _, peer := range rule.From {
				if peer.PodSelector != nil && peer.NamespaceSelector == nil && from != "outside" && selects(*peer.PodSelector, from) {
					ok = true
				}
			}
		}
	}
	return !isolated || ok
}

func TestTerminateGetList(t *testing.T) {
	p, cs := newFake(t, Config{})
	ctx := t.Context()
	for _, id := range []string{"a-1", "b-1"} {
		spec := agentenv.SandboxSpec{Name: id, Image: "img", Labels: labelsFor(id, "conformance"), Ports: []int{80}}
		if _, err := p.Create(ctx, spec); err != nil {
			t.Fatalf("Create(%s) = %v", id, err)
		}
	}
	sbs, err := p.List(ctx, map[string]string{agentenv.LabelOwner: "host.example/123/456", agentenv.LabelExpires: "2030-01-02T03:04:05Z"})
	if err != nil || len(sbs) != 2 {
		t.Fatalf("List(owner, expires) = %v, %v; want both", sbs, err)
	}
	if sbs, _ := p.List(ctx, map[string]string{agentenv.LabelRecord: "a-1", agentenv.LabelRun: "other"}); len(sbs) != 0 {
		t.Errorf("List(other run) = %v, want none", sbs)
	}
	if sb, err := p.Get(ctx, "a-1"); err != nil || sb.State != agentenv.SandboxRunning {
		t.Errorf("Get(a-1) = %+v, %v; want running", sb, err)
	}

	// A Pod that failed: Get says gone, List says exited with its code, Terminate succeeds.
	pod, _ := cs.Pods(DefaultNamespace).Get(ctx, "b-1", metav1.GetOptions{})
	pod.Status.Phase = corev1.PodFailed
	pod.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: ContainerName, State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 3}}}}
	if err := cs.objects.Update(corev1.SchemeGroupVersion.WithResource("pods"), pod, DefaultNamespace); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, "b-1"); !errors.Is(err, agentenv.ErrGone) {
		t.Errorf("Get(failed pod) = %v, want ErrGone", err)
	}
	if sbs, _ := p.List(ctx, map[string]string{agentenv.LabelRecord: "b-1"}); len(sbs) != 1 || sbs[0].State != agentenv.SandboxExited || sbs[0].ExitCode != 3 {
		t.Errorf("List(b-1) = %+v, want exited with code 3", sbs)
	}
	if err := p.Terminate(ctx, "b-1"); err != nil {
		t.Errorf("Terminate(failed pod) = %v", err)
	}

	// A Pod deleted behind our back leaves its Service: listed as exited, removed by Terminate.
	if err := cs.Pods(DefaultNamespace).Delete(ctx, "a-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := p.Get(ctx, "a-1"); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("Get(deleted pod) = %v, want ErrNotFound", err)
	}
	sbs, _ = p.List(ctx, map[string]string{agentenv.LabelRecord: "a-1"})
	if len(sbs) != 1 || sbs[0].State != agentenv.SandboxExited {
		t.Errorf("List(a-1) with only its Service left = %+v, want one exited", sbs)
	}
	if err := p.Terminate(ctx, "a-1"); err != nil {
		t.Errorf("Terminate(a-1) = %v", err)
	}
	for _, id := range []string{"a-1", "b-1"} {
		if sbs, _ := p.List(ctx, map[string]string{agentenv.LabelRecord: id}); len(sbs) != 0 {
			t.Errorf("List(%s) after Terminate = %v, want none", id, sbs)
		}
		if _, err := p.Get(ctx, id); !errors.Is(err, agentenv.ErrNotFound) {
			t.Errorf("Get(%s) after Terminate = %v, want ErrNotFound", id, err)
		}
	}
	if svcs, _ := cs.Services(DefaultNamespace).List(ctx, metav1.ListOptions{}); len(svcs.Items) != 0 {
		t.Errorf("services left = %d, want 0", len(svcs.Items))
	}
	if err := p.Terminate(ctx, "never-made"); err != nil {
		t.Errorf("Terminate(unknown) = %v, want nil", err)
	}
}

func TestCreate_invalid(t *testing.T) {
	p, cs := newFake(t, Config{})
	ctx := t.Context()
	good := agentenv.SandboxSpec{Name: "x-1", Image: "img", Labels: labelsFor("x-1", "r")}
	for name, mutate := range map[string]func(*agentenv.SandboxSpec){
		"mismatched record label": func(s *agentenv.SandboxSpec) { s.Labels = labelsFor("other", "r") },
		"not a dns label":         func(s *agentenv.SandboxSpec) { s.Name = "Bad_Id"; s.Labels = labelsFor("Bad_Id", "r") },
		"no image":                func(s *agentenv.SandboxSpec) { s.Image = "" },
		"aliases without network": func(s *agentenv.SandboxSpec) { s.Aliases = []string{"a"} },
		"bad port":                func(s *agentenv.SandboxSpec) { s.Ports = []int{70000} },
		"files":                   func(s *agentenv.SandboxSpec) { s.Files = map[string][]byte{"/x": nil} },
	} {
		spec := good
		mutate(&spec)
		if _, err := p.Create(ctx, spec); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("%s: Create = %v, want ErrInvalid", name, err)
		}
	}
	if pods, _ := cs.Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{}); len(pods.Items) != 0 {
		t.Errorf("pods after refused creates = %d, want 0", len(pods.Items))
	}
	if _, err := p.Create(ctx, good); err != nil {
		t.Fatalf("Create = %v", err)
	}
	if _, err := p.Create(ctx, good); !errors.Is(err, agentenv.ErrConflict) {
		t.Errorf("Create of an existing pod = %v, want ErrConflict", err)
	}
	if _, err := p.Get(ctx, "x-1"); err != nil {
		t.Errorf("the existing pod was touched by the refused create: Get = %v", err)
	}
}

func TestUnreachableCluster(t *testing.T) {
	dir := t.TempDir()
	kc := filepath.Join(dir, "kubeconfig")
	const cfg = `apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: ctx1, context: {cluster: c, user: u}}]
current-context: ctx1
`
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := agentenv.SandboxSpec{Name: "x-1", Image: "img", Labels: labelsFor("x-1", "r")}
	for _, tt := range []struct{ name, kubeconfig, context string }{
		{"unreachable", kc, "ctx1"},
		{"missing file", filepath.Join(dir, "nope"), ""},
		{"unknown context", kc, "nope"},
	} {
		p, err := New(Config{Kubeconfig: tt.kubeconfig, Context: tt.context, ConnectTimeout: 2 * time.Second}, nil)
		if err != nil {
			t.Fatalf("%s: New = %v, want no I/O and no error", tt.name, err)
		}
		_, err = p.Create(t.Context(), spec)
		if !errors.Is(err, agentenv.ErrUnavailable) || !strings.Contains(err.Error(), tt.kubeconfig) {
			t.Errorf("%s: Create = %v, want ErrUnavailable naming %s", tt.name, err, tt.kubeconfig)
		}
		if tt.context != "" && !strings.Contains(err.Error(), tt.context) {
			t.Errorf("%s: Create = %v, want the context %s named", tt.name, err, tt.context)
		}
	}
}

func TestNew_invalid(t *testing.T) {
	for name, cfg := range map[string]Config{
		"namespace":    {Namespace: "Not_A_Name"},
		"gateway type": {GatewayService: "ExternalName"},
		"negative qps": {QPS: -1},
		"node name":    {NodeName: "bad node"},
	} {
		if _, err := New(cfg, nil); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("%s: New = %v, want ErrInvalid", name, err)
		}
	}
}

func TestGatewayServiceType(t *testing.T) {
	p, cs := newFake(t, Config{GatewayService: "LoadBalancer"})
	ctx := t.Context()
	if _, err := p.CreateNetwork(ctx, agentenv.NetworkSpec{Name: "net-2", Labels: labelsFor("net-2", "network")}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ name, role string }{{"gateway", roleGateway}, {"notes", roleMCPServer}} {
		spec := agentenv.SandboxSpec{Name: c.name + "-1", Image: "img", Labels: labelsFor(c.name+"-1", c.role),
			Ports: []int{8080}, Network: "net-2", Aliases: []string{c.name}}
		if _, err := p.Create(ctx, spec); err != nil {
			t.Fatal(err)
		}
	}
	gw, _ := cs.Services("net-2").Get(ctx, "gateway", metav1.GetOptions{})
	notes, _ := cs.Services("net-2").Get(ctx, "notes", metav1.GetOptions{})
	if gw.Spec.Type != corev1.ServiceTypeLoadBalancer || notes.Spec.Type != corev1.ServiceTypeClusterIP {
		t.Errorf("service types gateway %s notes %s, want LoadBalancer and ClusterIP", gw.Spec.Type, notes.Spec.Type)
	}
}

func TestLabelValue(t *testing.T) {
	for _, tt := range []struct{ key, in, want string }{
		{agentenv.LabelRole, "mcp_server", "mcp_server"},
		{agentenv.LabelDeployment, "", ""},
		{agentenv.LabelExpires, "2026-11-29T15:45:07Z", "20261129T154507Z"},
	} {
		if got := labelValue(tt.key, tt.in); got != tt.want {
			t.Errorf("labelValue(%s, %q) = %q, want %q", tt.key, tt.in, got, tt.want)
		}
	}
	a, b := labelValue(agentenv.LabelOwner, "h/1/2"), labelValue(agentenv.LabelOwner, "h/1/3")
	if a == b || a != labelValue(agentenv.LabelOwner, "h/1/2") || len(a) > 63 {
		t.Errorf("digests %q %q: want distinct, stable, at most 63 characters", a, b)
	}
}

func TestUnconfigured(t *testing.T) {
	p, err := New(Config{Unconfigured: "set the kubeconfig, please"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := t.Context()
	spec := agentenv.SandboxSpec{Name: "x-1", Image: "img", Labels: labelsFor("x-1", "r")}
	_, createErr := p.Create(ctx, spec)
	_, netErr := p.CreateNetwork(ctx, agentenv.NetworkSpec{Name: "n-1", Labels: labelsFor("n-1", "network")})
	_, getErr := p.Get(ctx, "x-1")
	_, listErr := p.List(ctx, nil)
	_, apiErr := p.API(ctx)
	for name, err := range map[string]error{
		"Create": createErr, "CreateNetwork": netErr, "Get": getErr, "List": listErr,
		"Terminate": p.Terminate(ctx, "x-1"), "API": apiErr,
	} {
		if !errors.Is(err, agentenv.ErrInvalid) || !errors.Is(err, agentenv.ErrUnavailable) || !strings.Contains(err.Error(), "set the kubeconfig, please") {
			t.Errorf("%s = %v, want ErrInvalid and ErrUnavailable with the hint", name, err)
		}
	}
}

// The env's egress list becomes rules of the egress policy beside the namespace's own Pods and
// DNS: one per entry, its address range, on its TCP port when it names one.
func TestCreateNetwork_egressList(t *testing.T) {
	p, cs := newFake(t, Config{})
	ctx := t.Context()
	_, err := p.CreateNetwork(ctx, agentenv.NetworkSpec{Name: "net-2", Labels: labelsFor("net-2", "network"),
		Egress: []agentenv.EgressRule{{CIDR: "203.0.113.0/24", Port: 443}, {CIDR: "2001:db8::/32"}}})
	if err != nil {
		t.Fatalf("CreateNetwork = %v", err)
	}
	np, err := cs.NetworkPolicies("net-2").Get(ctx, PolicyEgress, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(np.Spec.Egress) != 4 {
		t.Fatalf("egress rules = %+v, want own Pods, DNS and the two of the list", np.Spec.Egress)
	}
	first, second := np.Spec.Egress[2], np.Spec.Egress[3]
	if len(first.To) != 1 || first.To[0].IPBlock == nil || first.To[0].IPBlock.CIDR != "203.0.113.0/24" ||
		len(first.Ports) != 1 || first.Ports[0].Port.IntValue() != 443 || *first.Ports[0].Protocol != corev1.ProtocolTCP {
		t.Errorf("first listed rule = %+v, want 203.0.113.0/24 on 443/tcp", first)
	}
	if len(second.To) != 1 || second.To[0].IPBlock == nil || second.To[0].IPBlock.CIDR != "2001:db8::/32" || len(second.Ports) != 0 {
		t.Errorf("second listed rule = %+v, want 2001:db8::/32 on every port", second)
	}
}
