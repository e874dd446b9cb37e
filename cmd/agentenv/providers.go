package main

import (
	"fmt"
	"path/filepath"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
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
	{deploy.StoreProvider, newStateStore},
	{"tensorlake", newTensorlake},
	{"tenki", newTenki},
	{"smol_vm", newSmolVM},
	{"vercel", newVercel},
}

func newDocker(a *app) (agentenv.Provider, error) {
	host, err := a.cfg.Get("provider.docker.host")
	if err != nil {
		return nil, err
	}
	builder, err := a.cfg.Get("provider.docker.builder")
	if err != nil {
		return nil, err
	}
	p, err := docker.New(docker.Config{Host: host, Builder: builder}, a.log)
	if err != nil {
		return nil, fmt.Errorf("provider.docker: %w", err)
	}
	return p, nil
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

// credential reads the credential at config key: its value, or "" and a hint saying what to
// set (example: the env: reference the key usually takes) when it is empty or does not
// resolve. A cloud provider given no credential refuses every call with that hint, before
// creating anything, so that commands not naming it are unaffected and a chain moves on.
func (a *app) credential(key, example string) (value, hint string) {
	v, err := a.cfg.Get(key)
	switch {
	case err != nil:
		return "", fmt.Sprintf("set %s (%s = %s does not resolve)", key, key, a.cfg.Raw(key))
	case v == "":
		return "", fmt.Sprintf("set %s (for example %s)", key, example)
	}
	return v, ""
}
