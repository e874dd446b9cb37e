//go:build e2e

package modal_test

import (
	"cmp"
	"os"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/modal"
	"github.com/agentenv/agentenv/provider/providertest"
)

// e2eConfig is the live configuration of the e2e tests: MODAL_TOKEN_ID and MODAL_TOKEN_SECRET,
// MODAL_E2E_REGION (default us-east; container mode pins to it), and the test image
// MODAL_E2E_IMAGE (default python:3.12-slim; it must have python3). With the e2e tag and no
// credentials a test fails: a live test that cannot run must not pass.
func e2eConfig(t *testing.T) (modal.Config, string) {
	t.Helper()
	id, secret := os.Getenv("MODAL_TOKEN_ID"), os.Getenv("MODAL_TOKEN_SECRET")
	if id == "" || secret == "" {
		t.Fatal("MODAL_TOKEN_ID and MODAL_TOKEN_SECRET are not set: the e2e tag runs against Modal and needs a token")
	}
	if os.Getenv("MODAL_SANDBOX_V2") == "" {
		// The provider lists sandboxes by tag, which V2 sandboxes do not support yet.
		t.Setenv("MODAL_SANDBOX_V2", "0")
	}
	region := cmp.Or(os.Getenv("MODAL_E2E_REGION"), "us-east")
	image := cmp.Or(os.Getenv("MODAL_E2E_IMAGE"), "python:3.12-slim")
	return modal.Config{TokenID: id, TokenSecret: secret, App: "agentenv-e2e", Region: region, Rate: 1}, image
}

// TestE2EConformance runs the conformance suite against Modal itself (see e2eConfig).
func TestE2EConformance(t *testing.T) {
	cfg, image := e2eConfig(t)
	providertest.Run(t, func(t *testing.T) agentenv.Provider {
		p, err := modal.New(cfg, nil)
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

// TestE2EVMConformance runs the conformance suite against modal_vm on Modal itself (see
// e2eConfig), its VMs from MODAL_E2E_VM_IMAGE (default docker:dind). The test image must be on
// this machine's Docker engine: modal_vm uploads it into each VM.
func TestE2EVMConformance(t *testing.T) {
	cfg, image := e2eConfig(t)
	cfg.VMImage = cmp.Or(os.Getenv("MODAL_E2E_VM_IMAGE"), "docker:dind")
	providertest.Run(t, func(t *testing.T) agentenv.Provider {
		p, err := modal.NewVM(cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		return p
	}, providertest.Options{
		Image: image, Command: []string{"python3", "-m", "http.server", "8080"}, Port: 8080,
		ExitCommand: []string{"/bin/sh", "-c", "exit 3"}, ExitCode: 3,
		Wait: 5 * time.Minute,
	})
}
