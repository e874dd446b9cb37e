// Package registrylogin writes a login to an image registry (agentenv.RegistryAuth) in the two
// forms a pull takes it: the Docker config file `docker login` leaves, which a Docker CLI in a VM
// and a Kubernetes image pull Secret read, and the Engine API's X-Registry-Auth header. It does no
// I/O.
package registrylogin

import (
	"encoding/base64"
	"encoding/json"
	"strings"

	"github.com/moby/moby/api/types/registry"

	"github.com/agentenv/agentenv"
)

// Host is the registry of an image reference (host[:port]), as a pinned reference always names
// one; "docker.io" for a reference without one.
func Host(ref string) string {
	host, _, ok := strings.Cut(ref, "/")
	if !ok || !strings.ContainsAny(host, ".:") && host != "localhost" {
		return "docker.io"
	}
	return host
}

// DockerConfig is the Docker config file that logs in to ref's registry with auth, as
// `docker login` writes it (and as a Secret of type kubernetes.io/dockerconfigjson holds it).
func DockerConfig(ref string, auth agentenv.RegistryAuth) []byte {
	entry := map[string]string{"auth": base64.StdEncoding.EncodeToString([]byte(auth.Username + ":" + auth.Password))}
	if auth.IdentityToken != "" {
		entry["identitytoken"] = auth.IdentityToken
	}
	data, _ := json.Marshal(map[string]map[string]map[string]string{"auths": {Host(ref): entry}})
	return data
}

// Header is auth as the Engine API's pull and push take it (X-Registry-Auth); "{}" encoded for
// nil, which the engine wants for an anonymous pull or push.
func Header(ref string, auth *agentenv.RegistryAuth) string {
	cfg := registry.AuthConfig{}
	if auth != nil {
		cfg = registry.AuthConfig{Username: auth.Username, Password: auth.Password, IdentityToken: auth.IdentityToken, ServerAddress: Host(ref)}
	}
	data, _ := json.Marshal(cfg)
	return base64.URLEncoding.EncodeToString(data)
}
