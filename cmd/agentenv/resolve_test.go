package main

import (
	"bytes"
	"net/netip"
	"strings"
	"testing"
)

func TestResolvePrintsAddressesOrExits2(t *testing.T) {
	t.Setenv("AGENTENV_CONFIG", "")
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	var out, errOut bytes.Buffer
	if code := run([]string{"resolve", "localhost"}, nil, &out, &errOut); code != 0 {
		t.Fatalf("resolve localhost: exit %d\n%s", code, &errOut)
	}
	lines := strings.Fields(out.String())
	if len(lines) == 0 {
		t.Fatal("resolve localhost printed nothing")
	}
	for _, l := range lines {
		if a, err := netip.ParseAddr(l); err != nil || !a.IsLoopback() {
			t.Errorf("resolve localhost printed %q, want loopback addresses only", l)
		}
	}
	out.Reset()
	errOut.Reset()
	if code := run([]string{"resolve", "no-such-host.invalid"}, nil, &out, &errOut); code != 2 {
		t.Errorf("resolve of an unknown name: exit %d, want 2 as getent\n%s", code, &errOut)
	}
	if !strings.Contains(errOut.String(), "no-such-host.invalid") {
		t.Errorf("the error does not name the host: %q", errOut.String())
	}
}
