package docker

import "github.com/agentenv/agentenv/internal/setting"

// Settings are the settings of the docker provider, under provider.docker.
func Settings() []setting.Key {
	return []setting.Key{
		{Name: "provider.docker.host", Doc: "Docker engine address (default: DOCKER_HOST, else unix:///var/run/docker.sock)"},
		{Name: "provider.docker.builder", Doc: "builder of Dockerfile builds: buildkit or legacy (default: BuildKit where the engine has it, else legacy)"},
	}
}
