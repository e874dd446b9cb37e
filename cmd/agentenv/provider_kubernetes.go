package main

import (
	"fmt"
	"os"
	"strconv"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/config"
	"github.com/agentenv/agentenv/provider/kubernetes"
)

// kubeconfigKey is the setting that chooses the kubernetes provider's cluster.
const kubeconfigKey = "provider.kubernetes.kubeconfig"

// newKubernetes builds the kubernetes provider from the provider.kubernetes.* keys. The cluster
// is chosen only by configuration: without provider.kubernetes.kubeconfig or .context (and
// outside a Pod) the provider is not configured, so no command reaches a cluster by accident.
// An unconfigured provider is not an error here: it refuses every call, before contacting
// anything, with a message naming the kubeconfig it did not read and what to set, so that
// commands not naming it are unaffected.
func newKubernetes(a *app) (agentenv.Provider, error) {
	cfg := kubernetes.Config{}
	for key, dst := range map[string]*string{
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
	kc, err := a.cfg.Get(kubeconfigKey)
	switch {
	case err != nil:
		cfg.Unconfigured = fmt.Sprintf("%s is %s, which does not resolve: set the variable, or set %s to a kubeconfig's path (such as %s)",
			kubeconfigKey, a.cfg.Raw(kubeconfigKey), kubeconfigKey, kubernetes.DefaultKubeconfig())
	case kc == "" && cfg.Context == "" && os.Getenv("KUBERNETES_SERVICE_HOST") == "":
		cfg.Unconfigured = unconfiguredHint()
	default:
		cfg.Kubeconfig = kc
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

// unconfiguredHint says, for a provider given neither kubeconfig nor context, which kubeconfig
// it did not read (the one KUBECONFIG names, else ~/.kube/config) and how to choose it.
func unconfiguredHint() string {
	what := "the default kubeconfig " + kubernetes.DefaultKubeconfig()
	if os.Getenv("KUBECONFIG") != "" {
		what = "the kubeconfig KUBECONFIG names (" + os.Getenv("KUBECONFIG") + ")"
	}
	return fmt.Sprintf("%s is not set, and agentenv does not read %s unless told to: set %s (in .agentenv/config.toml, or %s) to a kubeconfig's path, or to env:KUBECONFIG to read the KUBECONFIG variable",
		kubeconfigKey, what, kubeconfigKey, config.EnvName(kubeconfigKey))
}
