//go:build e2e

package e2b_test

import (
	"os"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/provider/e2b"
	"github.com/agentenv/agentenv/provider/providertest"
)

// TestE2EConformance runs the conformance suite against the real E2B with E2B_API_KEY (and
// E2B_TEMPLATE, default "base", a template with python3). With the e2e tag and no key it fails:
// a live test that cannot run must not pass.
func TestE2EConformance(t *testing.T) {
	template := os.Getenv("E2B_TEMPLATE")
	if template == "" {
		template = e2b.DefaultTemplate
	}
	providertest.RunLive(t, "E2B_API_KEY", "E2B", func(t *testing.T, key string) agentenv.Provider {
		p, err := e2b.New(e2b.Config{APIKey: key, Config: cloudapi.Config{Rate: 1, MaxTimeout: time.Hour}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}, providertest.Options{
		Image: template, Command: []string{"python3", "-m", "http.server", "8080"}, Port: 8080,
		ExitCommand: []string{"/bin/sh", "-c", "exit 3"}, ExitCode: 3,
		FinishedUnlisted: true, Wait: 60 * time.Second,
	})
}
