package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/kubernetes"
)

// newKubernetes builds the kubernetes provider from the provider.kubernetes.* keys. The cluster
// is chosen only by configuration: without provider.kubernetes.kubeconfig or .context (and
// outside a Pod) the provider is not configured, so no command reaches a cluster by accident.
func newKubernetes(a *app) (agentenv.Provider, error) {
	cfg := kubernetes.Config{}
	for key, dst := range map[string]*string{
		"provider.kubernetes.kubeconfig":      &cfg.Kubeconfig,
		"provider.kubernetes.context":         &cfg.Context,
		"provider.kubernetes.namespace":       &cfg.Namespace,
		"provider.kubernetes.node_name":       &cfg.NodeName,
		"provider.kubernetes.gateway_service": &cfg.GatewayService,
	} {
		v, err := a.cfg.Get(key)
		if err != nil {
			return nil, err
		}
		*dst = v
	}
	if cfg.Kubeconfig == "" && cfg.Context == "" && os.Getenv("KUBERNETES_SERVICE_HOST") == "" {
		return nil, nil
	}
	for key, set := range map[string]func(string) error{
		"provider.kubernetes.qps": func(s string) error {
			f, err := strconv.ParseFloat(s, 32)
			cfg.QPS = float32(f)
			return err
		},
		"provider.kubernetes.burst":       func(s string) (err error) { cfg.Burst, err = strconv.Atoi(s); return err },
		"provider.kubernetes.concurrency": func(s string) (err error) { cfg.Concurrency, err = strconv.Atoi(s); return err },
	} {
		v, err := a.cfg.Get(key)
		if err != nil {
			return nil, err
		}
		if err := set(v); err != nil {
			return nil, fmt.Errorf("config: %s = %q: %w", key, v, agentenv.ErrInvalid)
		}
	}
	return kubernetes.New(cfg, a.log)
}
