//go:build e2e

package smolvm_test

import (
	"os"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/providertest"
	"github.com/agentenv/agentenv/provider/smolvm"
)

// TestE2EConformance runs the conformance suite against a real smolvm server at SMOLVM_URL
// (unix:///path/to/smolvm.sock or http://host:port, what `smolvm serve start` reports), with
// SMOLVM_IMAGE (default python:3.12-alpine, which must have python3 and /bin/sh; smolvm pulls
// it). With the e2e tag and no SMOLVM_URL it fails: a live test that cannot run must not pass.
func TestE2EConformance(t *testing.T) {
	url := os.Getenv("SMOLVM_URL")
	if url == "" {
		t.Fatal("SMOLVM_URL is not set: the e2e tag runs against a real smolvm server (`smolvm serve start`) and needs its address")
	}
	image := os.Getenv("SMOLVM_IMAGE")
	if image == "" {
		image = "python:3.12-alpine"
	}
	providertest.Run(t, func(t *testing.T) agentenv.Provider {
		p, err := smolvm.New(smolvm.Config{URL: url, Image: image}, nil)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}, providertest.Options{
		Image: image, Command: []string{"python3", "-m", "http.server", "8080"}, Port: 8080,
		ExitCommand: []string{"/bin/sh", "-c", "exit 3"}, ExitCode: 3, Wait: 3 * time.Minute,
	})
}
