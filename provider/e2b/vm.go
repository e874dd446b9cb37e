package e2b

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
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

// RunInVM implements agentenv.VMHost: it starts spec as a container of vm's stack with
// `docker run -d` through the process API (as root), on the stack's network under spec.Name
// and spec.Aliases, its ports published on the VM's same ports and reached at E2B's port URLs.
// The image must be pullable from inside the VM. On error it removes the container it made.
func (p *Provider) RunInVM(ctx context.Context, vm string, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if !recordName.MatchString(spec.Name) || spec.Image == "" || len(spec.Files) > 0 {
		return agentenv.Sandbox{}, fmt.Errorf("e2b: run %s in %s: want a container name, an image and no files: %w", spec.Name, vm, agentenv.ErrInvalid)
	}
	d, err := p.detail(ctx, vm)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("e2b: run %s in %s: %w", spec.Name, vm, err)
	}
	labels := maps.Clone(d.Metadata)
	delete(labels, labelPorts)
	maps.Copy(labels, spec.Labels)
	args := []string{"docker", "run", "-d", "--name", spec.Name, "--network", stackNetwork}
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
		args = append(args, "-p", fmt.Sprintf("%d:%d", port, port))
	}
	if spec.WorkDir != "" {
		args = append(args, "-w", spec.WorkDir)
	}
	args = append(args, spec.Image)
	args = append(args, spec.Command...)
	script := "docker network inspect " + stackNetwork + " >/dev/null 2>&1 || docker network create " + stackNetwork + " >/dev/null; " + shellJoin(args)
	res, err := p.process(ctx, vm, d.EnvdAccessToken, processConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}, "root", "", true)
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("docker run exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	if err == nil {
		err = ctx.Err()
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
		sb.Endpoints[strconv.Itoa(port)] = p.cfg.SandboxURL(vm, port)
	}
	return sb, nil
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
	res, err := p.process(ctx, vm, d.EnvdAccessToken, processConfig{Cmd: "/bin/sh", Args: []string{"-c", shellJoin([]string{"docker", "rm", "-f", name})}}, "root", "", true)
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

// shellJoin quotes args for /bin/sh.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}
