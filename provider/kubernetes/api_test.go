package kubernetes

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// TestRESTAPI checks the provider's own scheme and clients against a stand-in API server: the
// paths of both groups, options as query parameters, JSON and protobuf bodies, error statuses
// and watch streams, which a scheme missing a type gets wrong.
func TestRESTAPI(t *testing.T) {
	pod := corev1.Pod{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{Name: "sb-1", Namespace: "ns", Labels: map[string]string{"a": "b"}, UID: "uid-1"},
		Status:     corev1.PodStatus{Phase: corev1.PodRunning},
	}
	policies := networkingv1.NetworkPolicyList{
		TypeMeta: metav1.TypeMeta{APIVersion: "networking.k8s.io/v1", Kind: "NetworkPolicyList"},
		Items:    []networkingv1.NetworkPolicy{{ObjectMeta: metav1.ObjectMeta{Name: "deny", Namespace: "ns"}}},
	}
	var (
		mu          sync.Mutex
		requests    []string
		createdType string // the Content-Type of the create
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		requests = append(requests, r.Method+" "+r.URL.Path)
		mu.Unlock()
		reply := func(code int, v any) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(code)
			json.NewEncoder(w).Encode(v)
		}
		q := r.URL.Query()
		switch {
		case r.URL.Path == "/version":
			reply(http.StatusOK, map[string]string{"gitVersion": "v1.37.2"})
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/ns/pods/sb-1":
			reply(http.StatusOK, pod)
		case r.Method == http.MethodGet && r.URL.Path == "/api/v1/pods" && q.Get("watch") == "true" && q.Get("labelSelector") == "a=b":
			w.Header().Set("Content-Type", "application/json")
			raw, _ := json.Marshal(pod)
			json.NewEncoder(w).Encode(map[string]any{"type": "ADDED", "object": json.RawMessage(raw)})
		case r.Method == http.MethodGet && r.URL.Path == "/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies" && q.Get("labelSelector") == "a=b":
			reply(http.StatusOK, policies)
		case r.Method == http.MethodPost && r.URL.Path == "/api/v1/namespaces":
			// Echo the body in the encoding the client chose (protobuf, as client-go's own).
			body, _ := io.ReadAll(r.Body)
			mu.Lock()
			createdType = r.Header.Get("Content-Type")
			mu.Unlock()
			w.Header().Set("Content-Type", r.Header.Get("Content-Type"))
			w.WriteHeader(http.StatusCreated)
			w.Write(body)
		default:
			reply(http.StatusNotFound, metav1.Status{
				TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Status"}, Status: metav1.StatusFailure,
				Reason: metav1.StatusReasonNotFound, Code: http.StatusNotFound, Message: r.URL.Path + " not found",
			})
		}
	}))
	defer srv.Close()
	kc := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: %q}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
`, srv.URL)
	if err := os.WriteFile(kc, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := New(Config{Kubeconfig: kc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := t.Context()
	api, err := p.API(ctx)
	if err != nil {
		t.Fatalf("API = %v", err)
	}

	got, err := api.Pods("ns").Get(ctx, "sb-1", metav1.GetOptions{})
	if err != nil || got.Name != "sb-1" || got.UID != "uid-1" || got.Status.Phase != corev1.PodRunning {
		t.Errorf("Get(sb-1) = %+v, %v", got, err)
	}
	if _, err := api.Pods("ns").Get(ctx, "nope", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("Get(nope) = %v, want a not-found status", err)
	}
	nps, err := api.NetworkPolicies("ns").List(ctx, metav1.ListOptions{LabelSelector: "a=b"})
	if err != nil || len(nps.Items) != 1 || nps.Items[0].Name != "deny" {
		t.Errorf("NetworkPolicies.List = %+v, %v", nps, err)
	}
	ns, err := api.Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "made"}}, metav1.CreateOptions{})
	if err != nil || ns.Name != "made" {
		t.Errorf("Namespaces.Create = %+v, %v", ns, err)
	}
	w, err := api.Pods("").Watch(ctx, metav1.ListOptions{LabelSelector: "a=b"})
	if err != nil {
		t.Fatalf("Watch = %v", err)
	}
	defer w.Stop()
	ev := <-w.ResultChan()
	if wp, ok := ev.Object.(*corev1.Pod); ev.Type != watch.Added || !ok || wp.Name != "sb-1" {
		t.Errorf("watch event = %s %T %+v, want the pod added", ev.Type, ev.Object, ev.Object)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(requests) == 0 || requests[0] != "GET /version" {
		t.Errorf("requests = %v, want GET /version first (the reachability check)", requests)
	}
	if createdType != "application/vnd.kubernetes.protobuf" {
		t.Errorf("create sent %q, want protobuf as client-go's clients send", createdType)
	}
}
