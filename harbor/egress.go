package harbor

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/spec"
	"github.com/agentenv/agentenv/task"
)

// The egress proxy of a task with network_mode = "allowlist": its steps, its name on the
// task's network, its port.
const (
	egressStep        = "egress"         // the proxy's deploy_sandbox step
	egressNetworkStep = "egress_network" // the proxy's way out: a private network with a route out
	ProxyAlias        = "egress-proxy"   // the proxy's name on the task's network
	ProxyPort         = 3128
)

// ProxyURL is the proxy's address as the task's sandboxes have it in HTTP_PROXY and HTTPS_PROXY.
var ProxyURL = fmt.Sprintf("http://%s:%d", ProxyAlias, ProxyPort)

// egress puts steps, whose environment isolate has cut off the internet, behind an egress
// proxy that lets through only hosts: the proxy is a sandbox of agentenv's runtime image
// (spec.DefaultImage, which the run's image map may map) running `agentenv serve
// egress-proxy`, on a private network of its own that has a route out and joined to the
// task's network as ProxyAlias. Every sandbox on the task's network starts after it, with
// HTTP_PROXY, HTTPS_PROXY (both spellings) naming it and NO_PROXY naming the task's own
// sandboxes, unless the task sets them itself. A service of the task already named ProxyAlias
// is refused.
//
// With byPhase (the task's phases differ in network mode, see phased), the proxy starts with
// base's policy, a "public" one letting every host through, and takes each phase's from
// PolicyFile.
func egress(t *Task, steps []step, base netPolicy, byPhase bool) ([]step, error) {
	local := []string{"localhost", "127.0.0.1", "::1"}
	for _, s := range steps {
		if s["type"] != task.TypeDeploySandbox || s["network"] != networkStep {
			continue
		}
		aliases, _ := s["aliases"].([]string)
		if slices.Contains(aliases, ProxyAlias) {
			return nil, fmt.Errorf("%s: [environment] network_mode %q: a service is named %s, the egress proxy's name on the task's network: %w",
				filepath.Join(t.Dir, "task.toml"), NetworkAllowlist, ProxyAlias, agentenv.ErrInvalid)
		}
		local = append(local, aliases...)
	}
	noProxy := strings.Join(local, ",")
	proxyEnv := map[string]string{
		"HTTP_PROXY": ProxyURL, "HTTPS_PROXY": ProxyURL, "http_proxy": ProxyURL, "https_proxy": ProxyURL,
		"NO_PROXY": noProxy, "no_proxy": noProxy,
	}
	for _, s := range steps {
		if s["type"] != task.TypeDeploySandbox || s["network"] != networkStep {
			continue
		}
		env, _ := s["env"].(map[string]string)
		if env == nil {
			env = map[string]string{}
		}
		for k, v := range proxyEnv {
			if _, set := env[k]; !set {
				env[k] = v
			}
		}
		s["env"] = env
		deps, _ := s["depends_on"].([]string)
		s["depends_on"] = append(slices.Clone(deps), egressStep)
	}
	command := append([]string{"/agentenv", "serve", "egress-proxy", "--listen", fmt.Sprintf(":%d", ProxyPort)}, base.flags()...)
	if byPhase {
		command = append(command, "--policy-file", PolicyFile)
	}
	proxy := []step{
		{"id": egressNetworkStep, "type": task.TypeDeployNetwork, "depends_on": []string{}},
		{"id": egressStep, "type": task.TypeDeploySandbox, "image": spec.DefaultImage, "command": command,
			"network": egressNetworkStep, "join": []map[string]any{{"network": networkStep, "aliases": []string{ProxyAlias}}},
			"cpus": 0.5, "memory_mb": 128, "depends_on": []string{networkStep, egressNetworkStep}},
	}
	// Right after the task's network, before the sandboxes that depend on the proxy.
	at := slices.IndexFunc(steps, func(s step) bool { return s["id"] == networkStep })
	return slices.Insert(steps, at+1, proxy...), nil
}
