package temporalserver

import (
	"fmt"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// fatalTB records the message of the first Fatalf and ends the goroutine, as testing does.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}

func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// addr runs Addr on a fatalTB and returns what it returned or the message it failed with.
func addr(t *testing.T) (string, string) {
	tb := &fatalTB{TB: t}
	var got string
	done := make(chan struct{})
	go func() {
		defer close(done)
		got = Addr(tb)
	}()
	<-done
	return got, tb.msg
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
