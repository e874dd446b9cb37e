package vmdocker_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

func TestRunInPublishesThePortsOrRemovesTheContainer(t *testing.T) {
	started := agentenv.ExecResult{Stdout: []byte("cid\nport 8080 0.0.0.0:32768\nstate true 0\n")}
	sh := &scriptShell{out: started}
	var published map[int]int
	h := vmdocker.Host{Shell: sh, Labels: map[string]string{agentenv.LabelRecord: "vm-1", "team": "a"},
		Publish: func(_ context.Context, p map[int]int) (func(int) string, error) {
			published = p
			return func(vp int) string { return "https://route-" + strings.Repeat("x", vp-32767) }, nil
		}}
	spec := agentenv.SandboxSpec{Name: "gw", Image: "img", Ports: []int{8080}, Labels: map[string]string{"team": "b"}}
	sb, err := vmdocker.RunIn(t.Context(), h, "acme", spec)
	if err != nil {
		t.Fatal(err)
	}
	if published[8080] != 32768 || sb.Endpoints["8080"] != "https://route-x" || sb.Provider != "acme" ||
		sb.Labels[agentenv.LabelRecord] != "vm-1" || sb.Labels["team"] != "b" {
		t.Errorf("published %v, sandbox %+v; want 8080 on 32768 routed, the VM's labels under the spec's", published, sb)
	}

	sh = &scriptShell{out: started}
	h.Shell, h.Publish = sh, func(context.Context, map[int]int) (func(int) string, error) { return nil, errors.New("no route") }
	if _, err := vmdocker.RunIn(t.Context(), h, "acme", spec); err == nil || !strings.Contains(err.Error(), "no route") {
		t.Errorf("RunIn with a failing Publish = %v, want its error", err)
	}
	if last := sh.scripts[len(sh.scripts)-1]; last != vmdocker.RemoveScript("gw") {
		t.Errorf("last script %q, want the container removed", last)
	}
	if _, err := vmdocker.RunIn(t.Context(), h, "acme", agentenv.SandboxSpec{Name: "x", Image: "img", Ports: []int{0}}); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("RunIn with port 0 = %v, want ErrInvalid", err)
	}
}

func TestRunInPublishesOnTheSlotsChosen(t *testing.T) {
	sh := &scriptShell{out: agentenv.ExecResult{Stdout: []byte("cid\nport 5432 0.0.0.0:20001\nstate true 0\n")}}
	h := vmdocker.Host{Shell: sh, URL: func(vp int) string { return fmt.Sprintf("127.0.0.1:%d", vp+10000) },
		Slots: func(_ context.Context, ports []int) (map[int]int, error) { return map[int]int{ports[0]: 20001}, nil }}
	sb, err := vmdocker.RunIn(t.Context(), h, "acme", agentenv.SandboxSpec{Name: "db", Image: "img", Ports: []int{5432}})
	if err != nil || sb.Endpoints["5432"] != "127.0.0.1:30001" || !strings.Contains(sh.scripts[0], "'-p' '20001:5432'") {
		t.Errorf("RunIn = %+v, %v, script %q; want 5432 published on slot 20001", sb, err, sh.scripts)
	}
	h.Slots = func(context.Context, []int) (map[int]int, error) { return nil, agentenv.ErrUnavailable }
	if _, err := vmdocker.RunIn(t.Context(), h, "acme", agentenv.SandboxSpec{Name: "db", Image: "img", Ports: []int{5432}}); !errors.Is(err, agentenv.ErrUnavailable) {
		t.Errorf("RunIn with no free slot = %v, want Slots' error", err)
	}
}

func TestExecInPutsStdinAndSaysAMissingContainer(t *testing.T) {
	sh := &scriptShell{}
	if _, err := vmdocker.ExecIn(t.Context(), vmdocker.Host{Shell: sh}, "db", []string{"psql"}, nil, []byte("select 1")); err != nil {
		t.Fatal(err)
	}
	if len(sh.puts) != 1 || !strings.Contains(sh.scripts[0], sh.puts[0]) || sh.scripts[1] != "rm -f "+sh.puts[0] {
		t.Errorf("puts %v, scripts %q; want stdin put, read by the exec, then removed", sh.puts, sh.scripts)
	}
	sh = &scriptShell{out: agentenv.ExecResult{ExitCode: 1, Stderr: []byte("Error response from daemon: No such container: db")}}
	if _, err := vmdocker.ExecIn(t.Context(), vmdocker.Host{Shell: sh}, "db", []string{"true"}, nil, nil); !errors.Is(err, agentenv.ErrNotFound) {
		t.Errorf("ExecIn in a missing container = %v, want ErrNotFound", err)
	}
}

func TestAwaitEngineWaitsBoundedAndStopsOnAGoneVM(t *testing.T) {
	if err := vmdocker.AwaitEngine(t.Context(), &scriptShell{}, time.Second); err != nil {
		t.Errorf("AwaitEngine of an engine that answers = %v", err)
	}
	start := time.Now()
	if err := vmdocker.AwaitEngine(t.Context(), &scriptShell{err: fmt.Errorf("session: %w", agentenv.ErrGone)}, time.Minute); !errors.Is(err, agentenv.ErrGone) || time.Since(start) > 5*time.Second {
		t.Errorf("AwaitEngine in a VM that is gone = %v after %s, want ErrGone at once", err, time.Since(start))
	}
	if err := vmdocker.AwaitEngine(t.Context(), &scriptShell{out: agentenv.ExecResult{ExitCode: 1}}, 600*time.Millisecond); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("AwaitEngine of an engine that never answers = %v, want the deadline", err)
	}
}

func TestRunInHoldsTheVMsLockForTheWholeRun(t *testing.T) {
	sh := &scriptShell{out: agentenv.ExecResult{Stdout: []byte("cid\nstate true 0\n")}}
	var events []string
	h := vmdocker.Host{Shell: sh,
		Slots: func(_ context.Context, ports []int) (map[int]int, error) {
			events = append(events, "slots")
			return map[int]int{ports[0]: 20001}, nil
		},
		Lock: func() func() {
			events = append(events, "lock")
			return func() { events = append(events, fmt.Sprintf("unlock after %d scripts", len(sh.scripts))) }
		}}
	if _, err := vmdocker.RunIn(t.Context(), h, "acme", agentenv.SandboxSpec{Name: "db", Image: "img", Ports: []int{5432}}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"lock", "slots", "unlock after 1 scripts"}; fmt.Sprint(events) != fmt.Sprint(want) {
		t.Errorf("events %q, want %q", events, want)
	}
}
