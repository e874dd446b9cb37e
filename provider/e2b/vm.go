package e2b

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/filetar"
	"github.com/agentenv/agentenv/internal/shellquote"
)

// stackNetwork is the Docker network inside a VM that a stack's containers share, so that
// they reach each other by name.
const stackNetwork = "agentenv"

// CreateVM implements agentenv.VMHost: a sandbox from the Docker-capable template
// (Config.VMTemplate), labelled and timed out as Create's, with no workload of its own.
func (p *Provider) CreateVM(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if err := p.check(spec, p.cfg.VMTemplate); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("e2b: create vm %s: %w", spec.Name, err)
	}
	vm := spec
	vm.Ports = nil
	return p.create(ctx, vm, p.cfg.VMTemplate, nil)
}

// exitNoImage is the exit code of RunInVM's script when the image is not in the VM.
const exitNoImage = 97

// RunInVM implements agentenv.VMHost: it starts spec as a container of vm's stack with
// `docker create` and `docker start` through the process API (as root), on the stack's network
// under spec.Name and spec.Aliases. Each of spec.Ports is published on a VM port the VM's engine picks (two
// components of a stack may well listen on the same port), read back with `docker port`, and
// reached at E2B's URL of that VM port (Config.SandboxURL). The image must be in the VM
// already: a template for agentenv is built with the env's images, and a missing one is
// ErrInvalid naming it (nothing is pulled). spec.Files are packed in a tar, uploaded into the
// VM through envd's filesystem API, and copied into the container before it starts. On error
// it removes the container it made.
func (p *Provider) RunInVM(ctx context.Context, vm string, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if !recordName.MatchString(spec.Name) || spec.Image == "" {
		return agentenv.Sandbox{}, fmt.Errorf("e2b: run %s in %s: want a container name and an image: %w", spec.Name, vm, agentenv.ErrInvalid)
	}
	var archive []byte
	if len(spec.Files) > 0 {
		var err error
		if archive, err = filetar.Pack("/", spec.Files); err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("e2b: run %s in %s: files: %w: %w", spec.Name, vm, err, agentenv.ErrInvalid)
		}
	}
	for _, port := range spec.Ports {
		if port <= 0 || port > 65535 {
			return agentenv.Sandbox{}, fmt.Errorf("e2b: run %s in %s: port %d: want 1-65535: %w", spec.Name, vm, port, agentenv.ErrInvalid)
		}
	}
	d, err := p.detail(ctx, vm)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("e2b: run %s in %s: %w", spec.Name, vm, err)
	}
	labels := maps.Clone(d.Metadata)
	delete(labels, labelPorts)
	maps.Copy(labels, spec.Labels)
	args := []string{"docker", "create", "--name", spec.Name, "--network", stackNetwork}
	for _, a := range spec.Aliases {
		args = append(args, "--network-alias", a)
	}
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		args = append(args, "--label", k+"="+labels[k])
	}
	for _, k := range slices.Sorted(maps.Keys(spec.Env)) {
		args = append(args, "-e", k+"="+spec.Env[k])
	}
	for _, port := range spec.Ports {
		args = append(args, "-p", strconv.Itoa(port))
	}
	if spec.WorkDir != "" {
		args = append(args, "-w", spec.WorkDir)
	}
	args = append(args, spec.Image)
	args = append(args, spec.Command...)
	image, name := shellquote.Join([]string{spec.Image}), shellquote.Join([]string{spec.Name})
	script := "docker image inspect " + image + " >/dev/null 2>&1 || exit " + strconv.Itoa(exitNoImage) + "; " +
		"docker network inspect " + stackNetwork + " >/dev/null 2>&1 || docker network create " + stackNetwork + " >/dev/null; " +
		shellquote.Join(args) + " >/dev/null || exit $?; "
	if archive != nil {
		tarFile := "/tmp/agentenv-files-" + rand.Text() + ".tar"
		if err := p.upload(ctx, vm, d.EnvdAccessToken, tarFile, "root", archive); err != nil {
			return agentenv.Sandbox{}, fmt.Errorf("e2b: run %s in %s: %w", spec.Name, vm, err)
		}
		script = "trap 'rm -f " + tarFile + "' EXIT; " + script +
			"docker cp - " + shellquote.Join([]string{spec.Name + ":/"}) + " <" + tarFile + " || exit $?; "
	}
	script += "docker start " + name + " >/dev/null || exit $?"
	for _, port := range spec.Ports {
		script += fmt.Sprintf("; echo \"port %d $(docker port %s %d/tcp | head -n 1)\"", port, name, port)
	}
	res, err := p.process(ctx, vm, d.EnvdAccessToken, processConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}, "root", "", true)
	switch {
	case err != nil:
	case res.ExitCode == exitNoImage:
		err = fmt.Errorf("image %s is not in the vm: build the vm template (%s) with the env's images: %w", spec.Image, p.cfg.VMTemplate, agentenv.ErrInvalid)
	case res.ExitCode != 0:
		err = fmt.Errorf("docker create/start exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	default:
		err = ctx.Err()
	}
	var published map[int]int
	if err == nil {
		published, err = parsePorts(string(res.Stdout), spec.Ports)
	}
	if err != nil {
		cctx, cancel := cleanup.Context(ctx, p.cfg.RequestTimeout)
		defer cancel()
		if rerr := p.RemoveFromVM(cctx, vm, spec.Name); rerr != nil {
			p.log.Warn("remove a container that failed to start; it goes with the vm", "vm", vm, "container", spec.Name, "err", rerr)
		}
		return agentenv.Sandbox{}, fmt.Errorf("e2b: run %s in %s: %w", spec.Name, vm, err)
	}
	sb := agentenv.Sandbox{ID: spec.Name, Name: spec.Name, Provider: p.cfg.Name, State: agentenv.SandboxRunning, Labels: labels}
	for _, port := range spec.Ports {
		if sb.Endpoints == nil {
			sb.Endpoints = map[string]string{}
		}
		sb.Endpoints[strconv.Itoa(port)] = p.cfg.SandboxURL(vm, published[port])
	}
	return sb, nil
}

// parsePorts reads the "port P ADDR:VMPORT" lines of RunInVM's script: the VM port each of
// ports is published on.
func parsePorts(out string, ports []int) (map[int]int, error) {
	got := map[int]int{}
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "port" {
			continue
		}
		port, err1 := strconv.Atoi(f[1])
		i := strings.LastIndex(f[2], ":")
		vmPort, err2 := strconv.Atoi(f[2][i+1:])
		if err1 == nil && err2 == nil && vmPort > 0 {
			got[port] = vmPort
		}
	}
	for _, port := range ports {
		if got[port] == 0 {
			return nil, fmt.Errorf("port %d: not published in the vm (docker port said %q)", port, strings.TrimSpace(out))
		}
	}
	return got, nil
}

// RemoveFromVM implements agentenv.VMHost with `docker rm -f`; a container, or a VM, that is
// gone counts as removed.
func (p *Provider) RemoveFromVM(ctx context.Context, vm, name string) error {
	if !recordName.MatchString(name) {
		return fmt.Errorf("e2b: remove %q from %s: %w", name, vm, agentenv.ErrInvalid)
	}
	d, err := p.detail(ctx, vm)
	if errors.Is(err, agentenv.ErrGone) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("e2b: remove %s from %s: %w", name, vm, err)
	}
	res, err := p.process(ctx, vm, d.EnvdAccessToken, processConfig{Cmd: "/bin/sh", Args: []string{"-c", shellquote.Join([]string{"docker", "rm", "-f", name})}}, "root", "", true)
	switch {
	case errors.Is(err, agentenv.ErrGone):
		return nil
	case err != nil:
		return fmt.Errorf("e2b: remove %s from %s: %w", name, vm, err)
	case res.ExitCode != 0 && !strings.Contains(string(res.Stderr), "No such container"):
		return fmt.Errorf("e2b: remove %s from %s: docker rm exited %d: %s", name, vm, res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}
