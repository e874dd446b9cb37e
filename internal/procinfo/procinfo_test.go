package procinfo

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

func TestHostIDIsStableAndNamesThePIDNamespace(t *testing.T) {
	if os.Getenv("PROCINFO_PRINT_HOSTID") == "1" { // the child of the cases below
		os.Stdout.WriteString(HostID())
		os.Exit(0)
	}
	a, b := HostID(), HostID()
	if a != b || len(a) != 12 {
		t.Fatalf("HostID = %q then %q, want one 12-hex id", a, b)
	}
	// A child in the same PID namespace shares it.
	cmd := exec.Command(os.Args[0], "-test.run", "^TestHostIDIsStableAndNamesThePIDNamespace$")
	cmd.Env = append(os.Environ(), "PROCINFO_PRINT_HOSTID=1")
	same, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(same)) != a {
		t.Errorf("a child process in the same PID namespace has HostID %q (%v), want %q", same, err, a)
	}
	// A child in a PID namespace of its own (unshare, as root) does not.
	if _, err := exec.LookPath("unshare"); err != nil || os.Geteuid() != 0 {
		t.Logf("unshare as root not available; the other-namespace case is checked where it is")
		return
	}
	cmd = exec.Command("unshare", "--pid", "--fork", os.Args[0], "-test.run", "^TestHostIDIsStableAndNamesThePIDNamespace$")
	cmd.Env = append(os.Environ(), "PROCINFO_PRINT_HOSTID=1")
	other, err := cmd.Output()
	if err != nil {
		t.Fatalf("unshare --pid: %v", err)
	}
	if got := strings.TrimSpace(string(other)); got == a || len(got) != 12 {
		t.Errorf("a process in another PID namespace has HostID %q, want a different one than %q", got, a)
	}
}
