package temporalserver

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentenv/agentenv/internal/testproc"
)

// addr runs Addr on a testproc.Recorder and returns what it returned or the message it failed with.
func addr(t *testing.T) (string, string) {
	tb := &testproc.Recorder{TB: t}
	var got string
	done := make(chan struct{})
	go func() {
		defer close(done)
		got = Addr(tb)
	}()
	<-done
	return got, tb.Stopped
}

func TestAddr_fromEnv(t *testing.T) {
	t.Setenv(Env, "127.0.0.1:7233")
	t.Setenv("AGENTENV_TEMPORAL_CACHE", t.TempDir()) // empty: the variable alone must answer
	got, msg := addr(t)
	if msg != "" || got != "127.0.0.1:7233" {
		t.Fatalf("Addr = %q (failure %q), want the variable's 127.0.0.1:7233", got, msg)
	}
}

func TestAddr_noBinaryFailsNamingTheBuild(t *testing.T) {
	cache := t.TempDir()
	t.Setenv(Env, "")
	t.Setenv("AGENTENV_TEMPORAL_CACHE", cache)
	got, msg := addr(t)
	if got != "" {
		t.Fatalf("Addr = %q with no binary, want a failure", got)
	}
	want := filepath.Join(cache, "temporal-devserver-"+Version, "temporal-devserver")
	for _, s := range []string{"scripts/temporal/build.sh", want, Env} {
		if !strings.Contains(msg, s) {
			t.Errorf("failure %q does not name %s", msg, s)
		}
	}
}
