package main

import (
	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/dockervm"
)

// newDockerVM builds the docker_vm provider on the same engine as docker.
func newDockerVM(a *app) (agentenv.Provider, error) {
	host, err := a.cfg.Get("provider.docker.host")
	if err != nil {
		return nil, err
	}
	image, err := a.cfg.Get("provider.docker_vm.image")
	if err != nil {
		return nil, err
	}
	return dockervm.New(dockervm.Config{Host: host, Image: image}, a.log)
}
