//go:build integration && !e2e

package kubernetes_test

import "github.com/agentenv/agentenv/provider/providertest"

// defaultNode is the simulated node scripts/kube/up.sh registers; there is no scheduler.
const defaultNode = "kwok-node-0"

// workload runs nothing real: kwok answers port-forwards to any Pod port with HTTP 200, and
// moves Pods whose first argument is agentenv-kwok-exit to Failed with the next as exit code.
var workload = providertest.Options{
	Image:       "agentenv-kwok:none", // never pulled: the node is simulated
	Command:     []string{"serve"},
	Port:        8080,
	ExitCommand: []string{"agentenv-kwok-exit", "3"},
	ExitCode:    3,
}
