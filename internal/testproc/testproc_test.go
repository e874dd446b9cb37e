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
	r := &Recorder{TB: t}
	Stop(r, "sleeper", cmd, exited, 5*time.Second)
	if len(r.Errs) != 0 {
		t.Errorf("a process that ends on SIGTERM: %v", r.Errs)
	}

	cmd, exited = start(t, `trap "" TERM; while :; do sleep 0.1; done`)
	r = &Recorder{TB: t}
	Stop(r, "stubborn", cmd, exited, 300*time.Millisecond)
	if len(r.Errs) != 1 || !strings.Contains(r.Errs[0], "stubborn") {
		t.Errorf("a process that ignores SIGTERM: errors %v, want one naming it", r.Errs)
	}
	select {
	case <-exited:
	default:
		t.Error("the stubborn process still runs after Stop")
	}
}
