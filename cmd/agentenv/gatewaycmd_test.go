package main

import (
	"bytes"
	"strings"
	"testing"
)

// The gateway takes its role tokens from the environment only, and says which variable is
// wrong when they do not parse; nothing starts.
func TestGatewayRoleTokensFromTheEnvironment(t *testing.T) {
	t.Setenv("AGENTENV_CONFIG", "")
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	t.Setenv("AGENTENV_GATEWAY_TOKEN", "admin-token")
	for raw, want := range map[string]string{
		`["agent"]`:               "AGENTENV_GATEWAY_ROLE_TOKENS",
		`{"agent":""}`:            "empty token",
		`{"agent":"admin-token"}`: "not distinct",
	} {
		t.Setenv("AGENTENV_GATEWAY_ROLE_TOKENS", raw)
		var out, errOut bytes.Buffer
		// 127.0.0.1:1 refuses connections, and a connect timeout of 1ms ends the wait at once
		// if the configuration were accepted.
		code := run([]string{"gateway", "--listen", "127.0.0.1:0", "--connect-timeout", "1ms", "--server", "a=http://127.0.0.1:1/mcp"}, nil, &out, &errOut)
		if code == 0 || !strings.Contains(errOut.String(), want) {
			t.Errorf("role tokens %s: exit %d, stderr %q; want an error naming %q", raw, code, errOut.String(), want)
		}
	}
}
