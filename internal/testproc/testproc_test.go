package testproc

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"
)

func TestTailKeepsTheLastBytes(t *testing.T) {
	w := &Tail{Max: 8}
	fmt.Fprint(w, "0123456789")
	fmt.Fprint(w, "ab \n")
	if got := w.String(); got != "6789ab" {
		t.Errorf("String() = %q, want the last 8 bytes trimmed, %q", got, "6789ab")
	}
}

// recorder is a testing.TB that keeps Errorf's messages instead of failing.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Errorf(format string, args ...any) {
	r.errs = append(r.errs, fmt.Sprintf(format, args...))
}
func (r *recorder) Helper() {}

func start(t *testing.T, script string) (*exec.Cmd, chan struct{}) {
	cmd := exec.Command("sh", "-c", script)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	time.Sleep(100 * time.Millisecond) // let the shell set its trap
	return cmd, exited
}

func TestStopTermsThenKills(t *testing.T) {
	cmd, exited := start(t, "exec sleep 60")
	r := &recorder{TB: t}
	Stop(r, "sleeper", cmd, exited, 5*time.Second)
	if len(r.errs) != 0 {
		t.Errorf("a process that ends on SIGTERM: %v", r.errs)
	}

	cmd, exited = start(t, `trap "" TERM; while :; do sleep 0.1; done`)
	r = &recorder{TB: t}
	Stop(r, "stubborn", cmd, exited, 300*time.Millisecond)
	if len(r.errs) != 1 || !strings.Contains(r.errs[0], "stubborn") {
		t.Errorf("a process that ignores SIGTERM: errors %v, want one naming it", r.errs)
	}
	select {
	case <-exited:
	default:
		t.Error("the stubborn process still runs after Stop")
	}
}
