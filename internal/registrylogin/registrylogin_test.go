package registrylogin_test

import (
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/registrylogin"
)

const pinned = "registry.example:5000/images/app@sha256:" + "ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12ab12"

func TestDockerConfigLogsInToTheRefsRegistry(t *testing.T) {
	var cfg struct {
		Auths map[string]struct{ Auth, IdentityToken string }
	}
	data := registrylogin.DockerConfig(pinned, agentenv.RegistryAuth{Username: "u", Password: "p:w", IdentityToken: "tok"})
	if err := json.Unmarshal(data, &cfg); err != nil {
		t.Fatal(err)
	}
	a, ok := cfg.Auths["registry.example:5000"]
	if !ok || a.Auth != "dTpwOnc=" || a.IdentityToken != "tok" {
		t.Errorf("DockerConfig = %s, want an auth of u:p:w and the token for registry.example:5000", data)
	}
	for ref, want := range map[string]string{"localhost/x@sha256:1": "localhost", "ghcr.io/a/b": "ghcr.io", "ubuntu": "docker.io", "library/ubuntu": "docker.io"} {
		if got := registrylogin.Host(ref); got != want {
			t.Errorf("RegistryHost(%q) = %q, want %q", ref, got, want)
		}
	}
	if s := (agentenv.RegistryAuth{Password: "secret"}); strings.Contains(fmtAll(s), "secret") {
		t.Errorf("a RegistryAuth prints its password: %s", fmtAll(s))
	}
}

func TestHeaderIsTheEnginesLogin(t *testing.T) {
	for _, c := range []struct {
		auth *agentenv.RegistryAuth
		want string
	}{
		{nil, `{}`},
		{&agentenv.RegistryAuth{Username: "u", Password: "p"}, `{"username":"u","password":"p","serveraddress":"registry.example:5000"}`},
	} {
		got, err := base64.URLEncoding.DecodeString(registrylogin.Header(pinned, c.auth))
		if err != nil || string(got) != c.want {
			t.Errorf("Header(%v) decodes to %s (%v), want %s", c.auth, got, err, c.want)
		}
	}
}

func fmtAll(a agentenv.RegistryAuth) string {
	return strings.Join([]string{a.String(), a.GoString(), a.LogValue().String()}, " ")
}
