//go:build integration

package temporalserver_test

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/agentenv/agentenv/internal/temporalserver"
)

// TestServerAnswers dials the server Addr gives with the SDK agentenv uses and finds the
// namespace the kit promises registered.
func TestServerAnswers(t *testing.T) {
	addr := temporalserver.Addr(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{HostPort: addr, Namespace: temporalserver.Namespace})
	if err != nil {
		t.Fatalf("dial %s: %v", addr, err)
	}
	defer c.Close()
	ns, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: temporalserver.Namespace})
	if err != nil {
		t.Fatalf("describe namespace %s on %s: %v", temporalserver.Namespace, addr, err)
	}
	if got := ns.GetNamespaceInfo().GetName(); got != temporalserver.Namespace {
		t.Fatalf("namespace described as %q, want %q", got, temporalserver.Namespace)
	}
	if _, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: "agentenv-no-such-namespace"}); err == nil {
		t.Fatalf("describe of an unregistered namespace succeeded on %s: the server does not check names", addr)
	}
}
