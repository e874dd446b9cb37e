package vmdocker_test

import (
	"errors"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

// fakeDocker is a docker CLI for the scripts to call: it records each call's arguments (one
// call a line, arguments NUL-separated) in $CALLS and answers as a VM's engine would, steered
// by $HAVE_IMAGE, $IN_USE, $EXITED and $PULL_FAILS. A pull copies the Docker config it was
// given to $CALLS.config, and what it pulled is there to inspect.
const fakeDocker = `#!/bin/sh
for a in "$@"; do printf '%s\0' "$a"; done >>"$CALLS"; echo >>"$CALLS"
case "$1 $2" in
"image inspect") [ -n "$HAVE_IMAGE" ] || grep -qxF "$3" "$CALLS.pulled" 2>/dev/null ;;
"pull -q") [ -z "$DOCKER_CONFIG" ] || cp "$DOCKER_CONFIG/config.json" "$CALLS.config"
	[ -z "$PULL_FAILS" ] || { echo "pull access denied for $3" >&2; exit 1; }
	echo "$3" >>"$CALLS.pulled" ;;
"container inspect") [ -n "$IN_USE" ] ;;
"network inspect") exit 1 ;;
"port "*) echo "0.0.0.0:3$(echo "$3" | cut -d/ -f1)" ;;
"inspect -f") if [ -n "$EXITED" ]; then echo "false 3"; else echo "true 0"; fi ;;
"cp -") cat >/dev/null ;;
esac
`

// run runs script with the fake docker and returns its exit code, stdout and the calls made.
func run(t *testing.T, script, stdin string, env ...string) (int, string, [][]string) {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "docker"), []byte(fakeDocker), 0o755); err != nil {
		t.Fatal(err)
	}
	calls := filepath.Join(dir, "calls")
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = append([]string{"PATH=" + dir + ":/usr/bin:/bin", "CALLS=" + calls}, env...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.Output()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(calls)
	var got [][]string
	for line := range strings.Lines(string(b)) {
		got = append(got, strings.Split(strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\x00"), "\x00"))
	}
	return code, string(out), got
}

// call returns the first recorded call whose first arguments are prefix.
func call(calls [][]string, prefix ...string) []string {
	for _, c := range calls {
		if len(c) >= len(prefix) && slices.Equal(c[:len(prefix)], prefix) {
			return c
		}
	}
	return nil
}

func TestRunScript(t *testing.T) {
	spec := agentenv.SandboxSpec{
		Name: "db", Image: "postgres:16", Command: []string{"postgres", "-c", "it's"},
		Env: map[string]string{"B": "2", "A": "1 1"}, WorkDir: "/w", Aliases: []string{"db.local"},
		CapAdd: []string{"CHOWN", "SETUID"}, Memory: 256 << 20, CPUs: 0.5, Ports: []int{5432, 8080},
	}
	labels := map[string]string{"agentenv.record": "vm-1", "agentenv.role": "service_db"}
	for _, c := range []struct {
		name      string
		run       vmdocker.Run
		env       []string
		wantCode  int
		wantPorts map[int]int
		wantFlags []string // docker create's arguments between the name and the image
		wantCp    bool
		exited    bool
	}{
		{
			name: "engine-picked ports, files on stdin",
			run:  vmdocker.Run{Spec: spec, Labels: labels, Files: "-"},
			env:  []string{"HAVE_IMAGE=1"},
			wantFlags: []string{"--network", "agentenv", "--network-alias", "db.local",
				"--label", "agentenv.record=vm-1", "--label", "agentenv.role=service_db",
				"-e", "A=1 1", "-e", "B=2", "-p", "5432", "-p", "8080", "-w", "/w",
				"--cap-drop", "ALL", "--cap-add", "CHOWN", "--cap-add", "SETUID",
				"--security-opt", "no-new-privileges", "--memory", "268435456", "--memory-swap", "268435456", "--cpus", "0.5", "--pids-limit", "1024"},
			wantPorts: map[int]int{5432: 35432, 8080: 38080},
			wantCp:    true,
		},
		{
			name: "fixed slots, no files, exited at once",
			run:  vmdocker.Run{Spec: agentenv.SandboxSpec{Name: "main", Image: "img", Ports: []int{80}}, Slots: map[int]int{80: 20000}},
			env:  []string{"HAVE_IMAGE=1", "EXITED=1"},
			wantFlags: []string{"--network", "agentenv", "-p", "20000:80",
				"--cap-drop", "ALL", "--security-opt", "no-new-privileges", "--pids-limit", "1024"},
			wantPorts: map[int]int{80: 380}, // what `docker port` said
			exited:    true,
		},
		{name: "missing image", run: vmdocker.Run{Spec: spec}, wantCode: vmdocker.ExitNoImage},
		{name: "name in use", run: vmdocker.Run{Spec: spec}, env: []string{"HAVE_IMAGE=1", "IN_USE=1"}, wantCode: vmdocker.ExitNameInUse},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, calls := run(t, vmdocker.RunScript(c.run), "tar", c.env...)
			if code != c.wantCode {
				t.Fatalf("exit code %d, want %d; calls %q", code, c.wantCode, calls)
			}
			if code != 0 {
				if call(calls, "create") != nil {
					t.Errorf("docker create ran though the script exited %d", code)
				}
				return
			}
			create := call(calls, "create", "--name", c.run.Spec.Name)
			if create == nil {
				t.Fatalf("no docker create; calls %q", calls)
			}
			tail := append([]string{c.run.Spec.Image}, c.run.Spec.Command...)
			if got := create[3 : len(create)-len(tail)]; !slices.Equal(got, c.wantFlags) {
				t.Errorf("docker create flags\n got %q\nwant %q", got, c.wantFlags)
			}
			if got := create[len(create)-len(tail):]; !slices.Equal(got, tail) {
				t.Errorf("docker create image and command = %q, want %q", got, tail)
			}
			if (call(calls, "cp", "-") != nil) != c.wantCp {
				t.Errorf("docker cp ran: %v, want %v", !c.wantCp, c.wantCp)
			}
			if call(calls, "network", "create", "agentenv") == nil {
				t.Error("the stack network was not made")
			}
			st, err := vmdocker.ParseRun(out, c.run)
			if err != nil {
				t.Fatal(err)
			}
			if !maps.Equal(st.Ports, c.wantPorts) || st.Running == c.exited || (c.exited && st.ExitCode != 3) {
				t.Errorf("ParseRun = %+v, want ports %v, exited %v", st, c.wantPorts, c.exited)
			}
		})
	}
}

func TestParseRun(t *testing.T) {
	r := vmdocker.Run{Spec: agentenv.SandboxSpec{Ports: []int{80, 443}}}
	for _, c := range []struct {
		name, out string
		want      vmdocker.Started
		wantErr   bool
	}{
		{"ipv4 and ipv6", "port 80 0.0.0.0:32768\nport 443 [::]:32769\nstate true 0\n",
			vmdocker.Started{Running: true, Ports: map[int]int{80: 32768, 443: 32769}}, false},
		{"exited", "port 80 0.0.0.0:1\nport 443 0.0.0.0:2\nstate false 137", vmdocker.Started{ExitCode: 137, Ports: map[int]int{80: 1, 443: 2}}, false},
		{"noise is skipped", "warning: x\nport 80 0.0.0.0:1\nport 443 0.0.0.0:2\n", vmdocker.Started{Running: true, Ports: map[int]int{80: 1, 443: 2}}, false},
		{"a port not published", "port 80 0.0.0.0:1\nport 443 \nstate true 0", vmdocker.Started{}, true},
		{"garbage port", "port 80 0.0.0.0:x\nport 443 0.0.0.0:2", vmdocker.Started{}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := vmdocker.ParseRun(c.out, r)
			if (err != nil) != c.wantErr {
				t.Fatalf("ParseRun err = %v, want error %v", err, c.wantErr)
			}
			if !c.wantErr && (got.Running != c.want.Running || got.ExitCode != c.want.ExitCode || !maps.Equal(got.Ports, c.want.Ports)) {
				t.Errorf("ParseRun = %+v, want %+v", got, c.want)
			}
		})
	}
}

func TestRunError(t *testing.T) {
	r := vmdocker.Run{Spec: agentenv.SandboxSpec{Name: "db", Image: "pg:16"}}
	if err := vmdocker.RunError(r, 0, nil, ""); err != nil {
		t.Errorf("RunError(0) = %v", err)
	}
	if err := vmdocker.RunError(r, vmdocker.ExitNoImage, nil, "build the template"); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "pg:16") || !strings.Contains(err.Error(), "build the template") {
		t.Errorf("RunError(no image) = %v, want ErrInvalid naming the image and the hint", err)
	}
	if err := vmdocker.RunError(r, vmdocker.ExitNameInUse, nil, ""); !errors.Is(err, agentenv.ErrConflict) {
		t.Errorf("RunError(name in use) = %v, want ErrConflict", err)
	}
	if err := vmdocker.RunError(r, 125, []byte("boom\n"), ""); err == nil || !strings.Contains(err.Error(), "boom") {
		t.Errorf("RunError(125) = %v, want docker's message", err)
	}
}

func TestExecScript(t *testing.T) {
	code, _, calls := run(t, vmdocker.ExecScript("db", []string{"psql", "-c", "select 'x'"}, map[string]string{"PGPASSWORD": "p w"}, ""), "")
	want := []string{"exec", "-e", "PGPASSWORD=p w", "db", "psql", "-c", "select 'x'"}
	if code != 0 || len(calls) != 1 || !slices.Equal(calls[0], want) {
		t.Errorf("ExecScript ran %q (exit %d), want %q", calls, code, want)
	}
	_, _, calls = run(t, vmdocker.ExecScript("db", []string{"cat"}, nil, "/dev/null"), "")
	if want := []string{"exec", "-i", "db", "cat"}; len(calls) != 1 || !slices.Equal(calls[0], want) {
		t.Errorf("ExecScript with stdin ran %q, want %q", calls, want)
	}
}

func TestRemoved(t *testing.T) {
	if vmdocker.Removed(0, nil) != nil || vmdocker.Removed(1, []byte("Error: No such container: x")) != nil {
		t.Error("Removed: a removal or an absent container is an error")
	}
	if vmdocker.Removed(1, []byte("daemon gone")) == nil {
		t.Error("Removed: a failure is not an error")
	}
}

func TestSlots(t *testing.T) {
	slots := map[int]int{8080: 20001, 80: 20000}
	s := vmdocker.FormatSlots(slots)
	if s != "80:20000,8080:20001" {
		t.Errorf("FormatSlots = %q", s)
	}
	if got := vmdocker.ParseSlots(s + ",bad,1:x"); !maps.Equal(got, slots) {
		t.Errorf("ParseSlots = %v, want %v", got, slots)
	}
	if got := vmdocker.ParseUsedPorts("20000 20001 \n x 20003"); len(got) != 3 || !got[20003] {
		t.Errorf("ParseUsedPorts = %v", got)
	}
}

func TestPickSlotsTakesFreeSlotsInPoolOrder(t *testing.T) {
	pool := []int{20000, 20001, 20002}
	got, err := vmdocker.PickSlots(pool, map[int]bool{20000: true}, []int{8080, 5432})
	if err != nil || got[8080] != 20001 || got[5432] != 20002 {
		t.Errorf("PickSlots = %v, %v; want 8080 on 20001 and 5432 on 20002", got, err)
	}
	if _, err := vmdocker.PickSlots(pool, map[int]bool{20001: true}, []int{1, 2, 3}); !errors.Is(err, agentenv.ErrUnavailable) {
		t.Errorf("PickSlots of more ports than free slots = %v, want ErrUnavailable", err)
	}
	if got, err := vmdocker.PickSlots(nil, nil, nil); err != nil || len(got) != 0 {
		t.Errorf("PickSlots of no ports = %v, %v", got, err)
	}
}
