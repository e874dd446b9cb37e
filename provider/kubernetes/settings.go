package kubernetes

import "github.com/agentenv/agentenv/internal/setting"

// Settings are the settings of the kubernetes provider, under provider.kubernetes.
func Settings() []setting.Key {
	return []setting.Key{
		{Name: "provider.kubernetes.kubeconfig", Doc: "kubeconfig of the kubernetes provider, a path or env:KUBECONFIG (unset, with no context: the provider is not configured, except in a Pod)"},
		{Name: "provider.kubernetes.context", Doc: "kubeconfig context of the kubernetes provider (default: the file's current context)"},
		{Name: "provider.kubernetes.namespace", Default: "agentenv", Doc: "namespace of kubernetes sandboxes that join no network; each deployment gets a namespace of its own"},
		{Name: "provider.kubernetes.node_name", Doc: "spec.nodeName of every Pod, for a cluster without a scheduler (kwok); empty: the scheduler places Pods"},
		{Name: "provider.kubernetes.qps", Default: "200", Doc: "kubernetes API requests per second (client-side limit)"},
		{Name: "provider.kubernetes.burst", Default: "400", Doc: "kubernetes API request burst"},
		{Name: "provider.kubernetes.concurrency", Default: "32", Doc: "kubernetes sandbox creates in flight"},
		{Name: "provider.kubernetes.gateway_service", Doc: "Service type exposing the gateway (LoadBalancer or NodePort); empty: port-forward to 127.0.0.1"},
	}
}
