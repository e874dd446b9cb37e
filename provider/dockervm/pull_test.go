package dockervm

import "testing"

func TestInVM(t *testing.T) {
	const gw = "172.16.0.1"
	for ref, want := range map[string]string{
		"127.0.0.1:5000/r/images/a@sha256:x": "172.16.0.1:5000/r/images/a@sha256:x",
		"localhost:5000/r/a@sha256:x":        "172.16.0.1:5000/r/a@sha256:x",
		"[::1]:5000/r/a@sha256:x":            "172.16.0.1:5000/r/a@sha256:x",
		"127.0.0.2/r/a@sha256:x":             "172.16.0.1/r/a@sha256:x",
		"ghcr.io/r/a@sha256:x":               "ghcr.io/r/a@sha256:x",
		"10.0.0.5:5000/r/a@sha256:x":         "10.0.0.5:5000/r/a@sha256:x",
	} {
		if got := inVM(ref, gw); got != want {
			t.Errorf("inVM(%q) = %q, want %q", ref, got, want)
		}
	}
	if got := inVM("127.0.0.1:5000/r/a", ""); got != "127.0.0.1:5000/r/a" {
		t.Errorf("no gateway: %q, want the ref as it is", got)
	}
}
