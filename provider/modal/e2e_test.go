//go:build e2e

package modal_test

import (
	"os"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/modal"
	"github.com/agentenv/agentenv/provider/providertest"
)

// TestE2EConformance runs the conformance suite against Modal itself with MODAL_TOKEN_ID and
// MODAL_TOKEN_SECRET (MODAL_E2E_IMAGE, default python:3.12-slim, must have python3). With the e2e
// tag and no credentials it fails: a live test that cannot run must not pass.
func TestE2EConformance(t *testing.T) {
	id, secret := os.Getenv("MODAL_TOKEN_ID"), os.Getenv("MODAL_TOKEN_SECRET")
	if id == "" || secret == "" {
		t.Fatal("MODAL_TOKEN_ID and MODAL_TOKEN_SECRET are not set: the e2e tag runs against Modal and needs a token")
	}
	if os.Getenv("MODAL_SANDBOX_V2") == "" {
		// The provider lists sandboxes by tag, which V2 sandboxes do not support yet.
		t.Setenv("MODAL_SANDBOX_V2", "0")
	}
	image := os.Getenv("MODAL_E2E_IMAGE")
	if image == "" {
		image = "python:3.12-slim"
	}
	providertest.Run(t, func(t *testing.T) agentenv.Provider {
		p, err := modal.New(modal.Config{TokenID: id, TokenSecret: secret, App: "agentenv-e2e", Rate: 1}, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}, providertest.Options{
		Image: image, Command: []string{"python3", "-m", "http.server", "8080"}, Port: 8080,
		ExitCommand: []string{"/bin/sh", "-c", "exit 3"}, ExitCode: 3,
		FinishedUnlisted: true, Wait: 2 * time.Minute,
	})
}
