package vmdocker_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

func TestPrepareRefusesBadPortsAndPacksFiles(t *testing.T) {
	if _, err := vmdocker.Prepare(agentenv.SandboxSpec{Ports: []int{8080, 70000}}); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "port 70000") {
		t.Errorf("Prepare with port 70000 = %v, want ErrInvalid naming it", err)
	}
	if a, err := vmdocker.Prepare(agentenv.SandboxSpec{Ports: []int{8080}}); a != nil || err != nil {
		t.Errorf("Prepare without files = %d bytes, %v; want none, nil", len(a), err)
	}
	a, err := vmdocker.Prepare(agentenv.SandboxSpec{Files: map[string][]byte{"/etc/x.conf": []byte("x")}})
	if err != nil || len(a) == 0 {
		t.Errorf("Prepare with a file = %d bytes, %v; want an archive", len(a), err)
	}
}

// scriptShell is a VM shell that records what it is asked and answers out and err to every
// script.
type scriptShell struct {
	out     agentenv.ExecResult
	err     error
	scripts []string
	puts    []string
}

func (s *scriptShell) Run(_ context.Context, script string) (agentenv.ExecResult, error) {
	s.scripts = append(s.scripts, script)
	return s.out, s.err
}

func (s *scriptShell) Put(_ context.Context, file string, r io.Reader) error {
	s.puts = append(s.puts, file)
	_, err := io.Copy(io.Discard, r)
	return err
}

func TestStartUploadsTheFilesAndRemovesThemAfter(t *testing.T) {
	sh := &scriptShell{out: agentenv.ExecResult{ExitCode: 7, Stderr: []byte("boom")}}
	run := vmdocker.Run{Spec: agentenv.SandboxSpec{Name: "c", Image: "img"}}
	_, err := vmdocker.Start(t.Context(), sh, run, []byte("tar"), vmdocker.Images{Hint: "h"}, nil)
	if err == nil {
		t.Fatal("Start of a script exiting 7 succeeded")
	}
	if len(sh.puts) != 1 || len(sh.scripts) != 1 || !strings.HasPrefix(sh.scripts[0], "trap ") || !strings.Contains(sh.scripts[0], "rm -f '\\''"+sh.puts[0]) {
		t.Errorf("puts %v, scripts %q; want the archive put and removed by the script", sh.puts, sh.scripts)
	}
	rec := vmdocker.Sandbox(vmdocker.Started{Running: true, Ports: map[int]int{8080: 32768}},
		agentenv.SandboxSpec{Name: "c", Ports: []int{8080}}, "p", nil, func(vp int) string { return "u" + strings.Repeat("!", vp-32767) })
	if rec.ID != "c" || rec.State != agentenv.SandboxRunning || rec.Endpoints["8080"] != "u!" {
		t.Errorf("Sandbox = %+v", rec)
	}
}

func TestRemoveCountsGoneAsRemoved(t *testing.T) {
	for _, c := range []struct {
		name string
		sh   *scriptShell
		ok   bool
	}{
		{"removed", &scriptShell{}, true},
		{"absent", &scriptShell{out: agentenv.ExecResult{ExitCode: 1, Stderr: []byte("Error: No such container: kv")}}, true},
		{"vm gone", &scriptShell{err: fmt.Errorf("process: %w", agentenv.ErrGone)}, true},
		{"rm failed", &scriptShell{out: agentenv.ExecResult{ExitCode: 1, Stderr: []byte("daemon gone")}}, false},
		{"transport", &scriptShell{err: errors.New("connection reset")}, false},
	} {
		err := vmdocker.Remove(context.Background(), c.sh, "kv")
		if (err == nil) != c.ok || len(c.sh.scripts) != 1 || c.sh.scripts[0] != vmdocker.RemoveScript("kv") {
			t.Errorf("%s: Remove = %v after %q, want ok=%v running RemoveScript", c.name, err, c.sh.scripts, c.ok)
		}
	}
}

func TestUploadHintNamesTheProviderAndItsImage(t *testing.T) {
	got := vmdocker.UploadHint("acme", "vm image", "acme/docker:1")
	want := "acme uploads images from this host's Docker engine ($DOCKER_HOST), or build the vm image (acme/docker:1) with the env's images"
	if got != want {
		t.Errorf("UploadHint = %q, want %q", got, want)
	}
}
