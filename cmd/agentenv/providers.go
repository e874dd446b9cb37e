package main

import (
	"path/filepath"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/docker"
	"github.com/agentenv/agentenv/provider/process"
)

// providerTable is every provider the CLI knows, by the name records carry. A constructor does
// no I/O; it returns (nil, nil) when the provider is not configured (for example a cloud
// without credentials), so that only commands naming it fail, with a message saying what to
// set. Adding a provider is one line here.
var providerTable = []struct {
	name  string
	build func(a *app) (agentenv.Provider, error)
}{
	{"docker", newDocker},
	{"process", newProcess},
	{"docker_vm", newDockerVM},
	{"modal", newModal},
	{"modal_vm", newModalVM},
	{"kubernetes", newKubernetes},
	{"e2b", newE2B},
	{stateProvider, newStateStore},
	{"tensorlake", newTensorlake},
	{"smol_vm", newSmolVM},
	{"vercel", newVercel},
}

func newDocker(a *app) (agentenv.Provider, error) {
	host, err := a.cfg.Get("provider.docker.host")
	if err != nil {
		return nil, err
	}
	return docker.New(docker.Config{Host: host}, a.log)
}

func newProcess(a *app) (agentenv.Provider, error) {
	root, err := a.cfg.Get("provider.process.root")
	if err != nil {
		return nil, err
	}
	if root == "" {
		sd, err := stateDir()
		if err != nil {
			return nil, err
		}
		root = filepath.Join(sd, "sandboxes")
	}
	return process.New(process.Config{Root: root}, a.log)
}
