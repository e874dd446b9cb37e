//go:build e2e

package tenki_test

import (
	"os"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cloudapi"
	"github.com/agentenv/agentenv/provider/providertest"
	"github.com/agentenv/agentenv/provider/tenki"
)

// TestE2EConformance runs the conformance suite against the real Tenki with the variables its
// SDKs read: TENKI_AUTH_TOKEN (TENKI_API_KEY when it is unset, as the SDKs fall back),
// TENKI_API_ENDPOINT (default Tenki's public endpoint), and TENKI_IMAGE (default "sandbox",
// Tenki's base image, which must have python3). With the e2e tag and no key it fails: a live
// test that cannot run must not pass.
func TestE2EConformance(t *testing.T) {
	if os.Getenv("TENKI_AUTH_TOKEN") == "" && os.Getenv("TENKI_API_KEY") != "" {
		t.Setenv("TENKI_AUTH_TOKEN", os.Getenv("TENKI_API_KEY"))
	}
	image := os.Getenv("TENKI_IMAGE")
	if image == "" {
		image = "sandbox"
	}
	providertest.RunLive(t, "TENKI_AUTH_TOKEN", "Tenki", func(t *testing.T, key string) agentenv.Provider {
		p, err := tenki.New(tenki.Config{Token: key, APIURL: os.Getenv("TENKI_API_ENDPOINT"), Config: cloudapi.Config{Rate: 1, MaxTimeout: time.Hour}}, nil)
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
