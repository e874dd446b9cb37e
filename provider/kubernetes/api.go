package kubernetes

import (
	"context"
	"errors"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Resource is a typed client of one kind of object, in one namespace or, for cluster-scoped
// kinds and for an empty namespace, across the cluster. Errors are client-go's API errors
// (package k8s.io/apimachinery/pkg/api/errors tells their kind).
type Resource[T, L runtime.Object] interface {
	// Get returns the object named name.
	Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error)
	// List returns the objects opts selects.
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	// Watch streams the changes to the objects opts selects, until it is stopped or ctx ends.
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	// Create makes obj and returns it as the API server stored it.
	Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error)
	// Delete starts the deletion of the object named name.
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
	// Patch changes the object named name by data, a patch of type pt, and returns it as the
	// API server stored it. Subresources (client-go's typed clients take them) are not patched
	// here: naming one is an error.
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error)
}

// API is the part of the Kubernetes API the provider speaks: six kinds of the core group and
// the NetworkPolicies of networking.k8s.io/v1, nothing else. On a cluster it is a REST client
// per group on a scheme of those two groups only, not client-go's clientset, whose scheme
// registers every group of Kubernetes: compiling those was most of what building agentenv
// from an empty cache cost.
type API interface {
	// Pods returns the client of the Pods in namespace ("" for every namespace).
	Pods(namespace string) Resource[*corev1.Pod, *corev1.PodList]
	// Services returns the client of the Services in namespace ("" for every namespace).
	Services(namespace string) Resource[*corev1.Service, *corev1.ServiceList]
	// ServiceAccounts returns the client of the ServiceAccounts in namespace.
	ServiceAccounts(namespace string) Resource[*corev1.ServiceAccount, *corev1.ServiceAccountList]
	// Secrets returns the client of the Secrets in namespace ("" for every namespace).
	Secrets(namespace string) Resource[*corev1.Secret, *corev1.SecretList]
	// Namespaces returns the client of the Namespaces.
	Namespaces() Resource[*corev1.Namespace, *corev1.NamespaceList]
	// Nodes returns the client of the Nodes.
	Nodes() Resource[*corev1.Node, *corev1.NodeList]
	// NetworkPolicies returns the client of the NetworkPolicies in namespace ("" for every
	// namespace).
	NetworkPolicies(namespace string) Resource[*networkingv1.NetworkPolicy, *networkingv1.NetworkPolicyList]
}

// object is an API object with metadata, what a typed client handles.
type object interface {
	runtime.Object
	metav1.Object
}

// restAPI is the API of a cluster: a REST client per group, sharing one HTTP client and one
// rate limit.
type restAPI struct {
	core, networking rest.Interface
	params           runtime.ParameterCodec
}

var _ API = restAPI{}

// newScheme returns a scheme of the two groups API speaks.
func newScheme() (*runtime.Scheme, error) {
	scheme := runtime.NewScheme()
	// As client-go's own scheme does: the option types of the core group's version "v1".
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	if err := errors.Join(corev1.AddToScheme(scheme), networkingv1.AddToScheme(scheme)); err != nil {
		return nil, fmt.Errorf("scheme: %w", err)
	}
	return scheme, nil
}

// newRESTAPI returns the API of the cluster rc points at. It does no I/O.
func newRESTAPI(rc *rest.Config) (restAPI, error) {
	scheme, err := newScheme()
	if err != nil {
		return restAPI{}, err
	}
	codecs := serializer.NewCodecFactory(scheme)
	cfg := *rc
	if cfg.RateLimiter == nil && cfg.QPS > 0 {
		// One budget for both groups, as one clientset has.
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	}
	httpClient, err := rest.HTTPClientFor(&cfg)
	if err != nil {
		return restAPI{}, fmt.Errorf("http client: %w", err)
	}
	group := func(gv schema.GroupVersion, path string) (rest.Interface, error) {
		c := cfg
		c.GroupVersion, c.APIPath = &gv, path
		c.NegotiatedSerializer = rest.CodecFactoryForGeneratedClient(scheme, codecs).WithoutConversion()
		return rest.RESTClientForConfigAndClient(&c, httpClient)
	}
	core, err := group(corev1.SchemeGroupVersion, "/api")
	if err != nil {
		return restAPI{}, fmt.Errorf("core client: %w", err)
	}
	networking, err := group(networkingv1.SchemeGroupVersion, "/apis")
	if err != nil {
		return restAPI{}, fmt.Errorf("networking client: %w", err)
	}
	return restAPI{core: core, networking: networking, params: runtime.NewParameterCodec(scheme)}, nil
}

// newResource returns the typed client of resource (a plural such as "pods") in namespace: E
// is the object type and LE its list.
func newResource[E, LE any, T interface {
	*E
	object
}, L interface {
	*LE
	runtime.Object
}](c rest.Interface, params runtime.ParameterCodec, resource, namespace string) Resource[T, L] {
	return restResource[T, L]{c: c, params: params, resource: resource, namespace: namespace,
		newObject: func() T { return new(E) }, newList: func() L { return new(LE) }}
}

// restResource is the typed client of one resource on a REST client: the requests client-go's
// generated clients make (package gentype), in protobuf where the server speaks it. It is
// written here because package gentype also holds its fakes, which pull client-go's test
// machinery (server-side apply, OpenAPI models) into every binary that imports it.
type restResource[T object, L runtime.Object] struct {
	c         rest.Interface
	params    runtime.ParameterCodec
	resource  string
	namespace string // "" for every namespace, and for a cluster-scoped resource
	newObject func() T
	newList   func() L
}

// request starts a request of verb on the resource, in its namespace if it has one.
func (r restResource[T, L]) request(verb *rest.Request) *rest.Request {
	return verb.UseProtobufAsDefaultIfPreferred(true).NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.resource)
}

// Get returns the object named name.
func (r restResource[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	out := r.newObject()
	err := r.request(r.c.Get()).Name(name).VersionedParams(&opts, r.params).Do(ctx).Into(out)
	return out, err
}

// List returns the objects opts selects.
func (r restResource[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	out := r.newList()
	err := r.request(r.c.Get()).VersionedParams(&opts, r.params).Timeout(timeout(opts)).Do(ctx).Into(out)
	return out, err
}

// Watch streams the changes to the objects opts selects, until it is stopped or ctx ends.
func (r restResource[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return r.request(r.c.Get()).VersionedParams(&opts, r.params).Timeout(timeout(opts)).Watch(ctx)
}

// Create makes obj and returns it as the API server stored it.
func (r restResource[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	out := r.newObject()
	err := r.request(r.c.Post()).VersionedParams(&opts, r.params).Body(obj).Do(ctx).Into(out)
	return out, err
}

// Delete starts the deletion of the object named name.
func (r restResource[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return r.request(r.c.Delete()).Name(name).Body(&opts).Do(ctx).Error()
}

// Patch changes the object named name by data, a patch of type pt, and returns it as the API
// server stored it.
func (r restResource[T, L]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	out := r.newObject()
	if len(subresources) > 0 {
		return out, fmt.Errorf("patch %s %s: subresources %v: not patched here", r.resource, name, subresources)
	}
	err := r.request(r.c.Patch(pt)).Name(name).VersionedParams(&opts, r.params).Body(data).Do(ctx).Into(out)
	return out, err
}

// timeout is the request timeout opts asks for, or 0 for none.
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

// Pods returns the client of the Pods in namespace.
func (a restAPI) Pods(namespace string) Resource[*corev1.Pod, *corev1.PodList] {
	return newResource[corev1.Pod, corev1.PodList](a.core, a.params, "pods", namespace)
}

// Services returns the client of the Services in namespace.
func (a restAPI) Services(namespace string) Resource[*corev1.Service, *corev1.ServiceList] {
	return newResource[corev1.Service, corev1.ServiceList](a.core, a.params, "services", namespace)
}

// ServiceAccounts returns the client of the ServiceAccounts in namespace.
func (a restAPI) ServiceAccounts(namespace string) Resource[*corev1.ServiceAccount, *corev1.ServiceAccountList] {
	return newResource[corev1.ServiceAccount, corev1.ServiceAccountList](a.core, a.params, "serviceaccounts", namespace)
}

// Secrets returns the client of the Secrets in namespace.
func (a restAPI) Secrets(namespace string) Resource[*corev1.Secret, *corev1.SecretList] {
	return newResource[corev1.Secret, corev1.SecretList](a.core, a.params, "secrets", namespace)
}

// Namespaces returns the client of the Namespaces.
func (a restAPI) Namespaces() Resource[*corev1.Namespace, *corev1.NamespaceList] {
	return newResource[corev1.Namespace, corev1.NamespaceList](a.core, a.params, "namespaces", "")
}

// Nodes returns the client of the Nodes.
func (a restAPI) Nodes() Resource[*corev1.Node, *corev1.NodeList] {
	return newResource[corev1.Node, corev1.NodeList](a.core, a.params, "nodes", "")
}

// NetworkPolicies returns the client of the NetworkPolicies in namespace.
func (a restAPI) NetworkPolicies(namespace string) Resource[*networkingv1.NetworkPolicy, *networkingv1.NetworkPolicyList] {
	return newResource[networkingv1.NetworkPolicy, networkingv1.NetworkPolicyList](a.networking, a.params, "networkpolicies", namespace)
}
