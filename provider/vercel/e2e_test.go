//go:build e2e

package vercel_test

import (
	"os"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/providertest"
	"github.com/agentenv/agentenv/provider/vercel"
)

// TestE2EConformance runs the conformance suite against the real Vercel Sandbox with
// VERCEL_TOKEN, VERCEL_TEAM_ID and VERCEL_PROJECT_ID, or VERCEL_OIDC_TOKEN (and VERCEL_IMAGE,
// default Vercel's universal image, which has python3). With the e2e tag and no credentials it
// fails: a live test that cannot run must not pass.
func TestE2EConformance(t *testing.T) {
	cfg := vercel.Config{Token: os.Getenv("VERCEL_TOKEN"), TeamID: os.Getenv("VERCEL_TEAM_ID"), ProjectID: os.Getenv("VERCEL_PROJECT_ID"),
		Image: os.Getenv("VERCEL_IMAGE"), Rate: 1, MaxTimeout: 45 * time.Minute}
	if cfg.Token == "" {
		cfg.Token = os.Getenv("VERCEL_OIDC_TOKEN")
	}
	if cfg.Token == "" {
		t.Fatal("neither VERCEL_TOKEN nor VERCEL_OIDC_TOKEN is set: the e2e tag runs against the real Vercel Sandbox and needs credentials")
	}
	image := cfg.Image
	if image == "" {
		image = "universal"
	}
	providertest.Run(t, func(t *testing.T) agentenv.Provider {
		p, err := vercel.New(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}, providertest.Options{
		Image: image, Command: []string{"python3", "-m", "http.server", "8080"}, Port: 8080,
		ExitCommand: []string{"/bin/sh", "-c", "exit 3"}, ExitCode: 3, Wait: 90 * time.Second,
	})
}
