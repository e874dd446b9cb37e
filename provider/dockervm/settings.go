package dockervm

import "github.com/agentenv/agentenv/internal/setting"

// Settings are the settings of the docker_vm provider, under provider.docker_vm.
func Settings() []setting.Key {
	return []setting.Key{
		{Name: "provider.docker_vm.image", Default: "agentenv-dind:local", Doc: "Docker-in-Docker image of the docker_vm provider's VMs (images/debian/build.sh dind)"},
	}
}
