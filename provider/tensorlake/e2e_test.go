//go:build e2e

package tensorlake_test

import (
	"os"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/provider/providertest"
	"github.com/agentenv/agentenv/provider/tensorlake"
)

// TestE2EConformance runs the conformance suite against the real Tensorlake with
// TENSORLAKE_API_KEY (and TENSORLAKE_IMAGE, default Tensorlake's default image, which must have
// python3). With the e2e tag and no key it fails: a live test that cannot run must not pass.
func TestE2EConformance(t *testing.T) {
	image := os.Getenv("TENSORLAKE_IMAGE")
	providertest.RunLive(t, "TENSORLAKE_API_KEY", "Tensorlake", func(t *testing.T, key string) agentenv.Provider {
		p, err := tensorlake.New(tensorlake.Config{APIKey: key, Image: image, Config: cloudapi.Config{Rate: 1, MaxTimeout: time.Hour}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}, providertest.Options{
		Image: image, Command: []string{"python3", "-m", "http.server", "8080"}, Port: 8080,
		ExitCommand: []string{"/bin/sh", "-c", "exit 3"}, ExitCode: 3,
		FinishedUnlisted: true, Wait: 90 * time.Second,
	})
}
