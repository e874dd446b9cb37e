package vmdocker_test

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/registrylogin"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

const pinned = "registry.example:5000/images/app@sha256:" + "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"

func TestPullScriptPullsOnlyWhatIsMissingAndForgetsTheLogin(t *testing.T) {
	code, _, calls := run(t, vmdocker.PullScript(pinned, ""), "", "HAVE_IMAGE=1")
	if code != 0 || call(calls, "pull") != nil {
		t.Errorf("with the image there: exit %d, calls %q; want 0 and no pull", code, calls)
	}
	code, _, calls = run(t, vmdocker.PullScript(pinned, ""), "")
	if c := call(calls, "pull", "-q"); code != 0 || len(c) != 3 || c[2] != pinned {
		t.Errorf("without it: exit %d, calls %q; want docker pull -q %s", code, calls, pinned)
	}

	auth := filepath.Join(t.TempDir(), "auth.json")
	login := registrylogin.DockerConfig(pinned, agentenv.RegistryAuth{Username: "u", Password: "p"})
	if err := os.WriteFile(auth, login, 0o600); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	script := vmdocker.PullScript(pinned, auth)
	cmd := exec.Command("/bin/sh", "-c", script+"\ncode=$?; echo \"$d\" >"+filepath.Join(dir, "d")+"; exit $code")
	if err := os.WriteFile(filepath.Join(dir, "docker"), []byte(fakeDocker), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd.Env = []string{"PATH=" + dir + ":/usr/bin:/bin", "CALLS=" + filepath.Join(dir, "calls"), "PULL_FAILS=1"}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "pull access denied") {
		t.Errorf("a refused pull: %v, %q; want its exit code and message", err, out)
	}
	if got, _ := os.ReadFile(filepath.Join(dir, "calls.config")); string(got) != string(login) {
		t.Errorf("the pull's Docker config = %q, want %q", got, login)
	}
	d, _ := os.ReadFile(filepath.Join(dir, "d"))
	for _, p := range []string{auth, strings.TrimSpace(string(d))} {
		if _, err := os.Stat(p); p == "" || !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%q is left after the pull (%v): the login must go", p, err)
		}
	}
}

// localShell runs scripts on this machine with the fake docker, as a VM's shell would.
type localShell struct {
	t   *testing.T
	env []string
}

func (s localShell) Run(ctx context.Context, script string) (agentenv.ExecResult, error) {
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Env = s.env
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return agentenv.ExecResult{ExitCode: ee.ExitCode(), Stdout: []byte(stdout.String()), Stderr: []byte(stderr.String())}, nil
	}
	return agentenv.ExecResult{Stdout: []byte(stdout.String()), Stderr: []byte(stderr.String())}, err
}

func (s localShell) Put(_ context.Context, file string, r io.Reader) error {
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	return os.WriteFile(file, data, 0o600)
}

func TestStartRunsThePinnedImageOrSaysWhyNot(t *testing.T) {
	for _, fails := range []bool{false, true} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "docker"), []byte(fakeDocker), 0o755); err != nil {
			t.Fatal(err)
		}
		calls := filepath.Join(dir, "calls")
		env := []string{"PATH=" + dir + ":/usr/bin:/bin", "CALLS=" + calls}
		if fails {
			// The image itself is there (uploaded, for the fake), the pinned one cannot come.
			env = append(env, "PULL_FAILS=1")
			if err := os.WriteFile(calls+".pulled", []byte("app:1\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		spec := agentenv.SandboxSpec{Name: "c", Image: "app:1", Pinned: pinned, PullAuth: &agentenv.RegistryAuth{Username: "u", Password: "p"}}
		st, err := vmdocker.Start(t.Context(), localShell{t, env}, vmdocker.Run{Spec: spec}, nil, vmdocker.Images{Hint: "h"}, nil)
		if err != nil {
			t.Fatalf("pull fails %v: Start: %v", fails, err)
		}
		b, _ := os.ReadFile(calls)
		created := ""
		for line := range strings.Lines(string(b)) {
			if args := strings.Split(strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\x00"), "\x00"); args[0] == "create" {
				created = args[len(args)-1]
			}
		}
		want, note := pinned, "pulled "+pinned+" in the vm"
		if fails {
			want, note = "app:1", "pull of "+pinned+" failed (docker pull exited 1: pull access denied for "+pinned+"); uploading app:1 from this host"
		}
		if created != want || st.ImageNote != note {
			t.Errorf("pull fails %v: created %q with note %q; want %q, %q", fails, created, st.ImageNote, want, note)
		}
		if sb := vmdocker.Sandbox(st, spec, "p", nil, nil); sb.ImageNote != note {
			t.Errorf("Sandbox's ImageNote = %q, want %q", sb.ImageNote, note)
		}
	}
}
