// Package kubernetes holds the manifests that run `agentenv worker` on a Kubernetes cluster
// (the *.yaml files beside this one: a Deployment of workers, its ServiceAccount, the
// ClusterRole the kubernetes provider needs and its binding, a ConfigMap of settings and a
// Secret for the ledger DSN), and their tests: a server-side dry run of every manifest and the
// provider's conformance suite run as the workers' ServiceAccount, against the test
// kube-apiserver. README.md, "Runs on many machines", says how to deploy them.
package kubernetes

import "embed"

// Manifests are the manifests, each a *.yaml file at the root of the FS.
//
//go:embed *.yaml
var Manifests embed.FS
