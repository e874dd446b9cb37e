package kubernetes

// Permission is one RBAC rule the provider needs: Verbs on Resource (a plural, or
// plural/subresource) of the API group Group ("" for core).
type Permission struct {
	Group    string
	Resource string
	Verbs    []string
}

// Permissions returns every API request the provider makes, as RBAC rules over the whole
// cluster: it makes a Namespace per deployment and lists its objects across namespaces, so a
// namespaced Role cannot hold them. They are all a ClusterRole of a process running the provider
// (an `agentenv worker` in a Pod) needs, and deploy/kubernetes/rbac.yaml grants exactly these
// (its test compares them). GET /version, read when connecting, is every authenticated user's
// (system:public-info-viewer). rbac_test.go reads this package's calls and fails when one is
// missing here.
func Permissions() []Permission {
	return []Permission{
		{Group: "", Resource: "namespaces", Verbs: []string{"create", "delete", "list"}},
		{Group: "", Resource: "nodes", Verbs: []string{"get"}}, // the gateway's node address, for a NodePort Service
		// patch: a Pod whose pinned image cannot be pulled runs the image as named instead.
		{Group: "", Resource: "pods", Verbs: []string{"create", "delete", "get", "list", "patch", "watch"}},
		{Group: "", Resource: "pods/portforward", Verbs: []string{"create"}},          // endpoints on 127.0.0.1
		{Group: "", Resource: "secrets", Verbs: []string{"create", "delete", "list"}}, // a sandbox's environment, its pull login
		{Group: "", Resource: "serviceaccounts", Verbs: []string{"create", "delete"}},
		{Group: "", Resource: "services", Verbs: []string{"create", "delete", "list"}},
		{Group: "networking.k8s.io", Resource: "networkpolicies", Verbs: []string{"create", "delete", "list"}},
	}
}
