//go:build e2e

package kubernetes_test

import (
	"time"

	"github.com/agentenv/agentenv/provider/providertest"
)

// defaultNode is empty on a real cluster: the scheduler places Pods.
const defaultNode = ""

// workload needs busybox pullable by the cluster's nodes.
var workload = providertest.Options{
	Image:       "busybox:1.36",
	Command:     []string{"sh", "-c", "mkdir -p /www && echo ok > /www/index.html && exec httpd -f -p 8080 -h /www"},
	Port:        8080,
	ExitCommand: []string{"sh", "-c", "exit 3"},
	ExitCode:    3,
	Wait:        2 * time.Minute,
}
