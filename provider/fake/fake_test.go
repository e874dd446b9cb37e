package fake_test

import (
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/fake"
	"github.com/agentenv/agentenv/provider/providertest"
)

// The fake passes the conformance suite that every real provider passes, so that unit tests on
// it say something about the real ones.
func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) agentenv.Provider { return fake.New("fake") }, providertest.Options{
		Image: "any", Command: []string{"serve"}, Port: 8080, ExitCommand: []string{"exit", "3"}, ExitCode: 3,
	})
}
