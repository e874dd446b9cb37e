//go:build e2e

package vercel_test

import (
	"os"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/provider/providertest"
	"github.com/agentenv/agentenv/provider/vercel"
)

// TestE2EConformance runs the conformance suite against the real Vercel Sandbox with
// VERCEL_TOKEN, VERCEL_TEAM_ID and VERCEL_PROJECT_ID (and VERCEL_IMAGE, default Vercel's
// universal image, which has python3). With the e2e tag and no token it fails: a live test that
// cannot run must not pass.
func TestE2EConformance(t *testing.T) {
	image := os.Getenv("VERCEL_IMAGE")
	if image == "" {
		image = "universal"
	}
	providertest.RunLive(t, "VERCEL_TOKEN", "Vercel Sandbox", func(t *testing.T, token string) agentenv.Provider {
		p, err := vercel.New(vercel.Config{Token: token, TeamID: os.Getenv("VERCEL_TEAM_ID"), ProjectID: os.Getenv("VERCEL_PROJECT_ID"),
			Image: image, Config: cloudapi.Config{Rate: 1, MaxTimeout: 45 * time.Minute}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}, providertest.Options{
		Image: image, Command: []string{"python3", "-m", "http.server", "8080"}, Port: 8080,
		ExitCommand: []string{"/bin/sh", "-c", "exit 3"}, ExitCode: 3, Wait: 90 * time.Second,
	})
}
