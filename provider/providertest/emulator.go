package providertest

import (
	"os"
	"testing"

	"github.com/agentenv/agentenv"
)

// Emulator is an in-process emulator of a cloud's API, as a provider's tests hold it.
type Emulator interface {
	// Running returns the ids of the sandboxes it still runs.
	Running() []string
	// Close stops it, ending every sandbox.
	Close()
}

// CloseAtEnd closes emu when the test ends, failing the test if emu still runs a sandbox then,
// and returns emu. A cloud provider's tests start their emulator with it:
//
//	emu := providertest.CloseAtEnd(t, acmeemu.Start(apiKey))
func CloseAtEnd[E Emulator](t testing.TB, emu E) E {
	t.Helper()
	t.Cleanup(func() {
		if left := emu.Running(); len(left) != 0 {
			t.Errorf("the emulator still runs %v", left)
		}
		emu.Close()
	})
	return emu
}

// RunLive runs the conformance suite against the real cloud with the API key in the
// environment variable keyVar, for a test built with the e2e tag. Without the key it fails,
// naming keyVar and cloud: a live test that cannot run must not pass. newProvider makes a
// provider with the key.
func RunLive(t *testing.T, keyVar, cloud string, newProvider func(t *testing.T, key string) agentenv.Provider, opts Options) {
	t.Helper()
	key := os.Getenv(keyVar)
	if key == "" {
		t.Fatalf("%s is not set: the e2e tag runs against the real %s and needs an API key", keyVar, cloud)
	}
	Run(t, func(t *testing.T) agentenv.Provider { return newProvider(t, key) }, opts)
}
