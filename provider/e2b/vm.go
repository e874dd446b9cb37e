package e2b

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"maps"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/engine"
	"github.com/agentenv/agentenv/internal/filetar"
	"github.com/agentenv/agentenv/internal/shellquote"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

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
// `docker create` and `docker start` through the process API (as root), on the stack's network
// under spec.Name and spec.Aliases. Each of spec.Ports is published on a VM port the VM's engine picks (two
// components of a stack may well listen on the same port), read back with `docker port`, and
// reached at E2B's URL of that VM port (Config.SandboxURL). A template for agentenv is built
// with the env's images; an image the VM lacks is uploaded from this host's Docker engine
// (Config.DockerHost) through envd, as modal_vm does, and one missing from both is ErrInvalid
// naming it (nothing is pulled). spec.Files are packed in a tar, uploaded into the
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
	run := vmdocker.Run{Spec: spec, Labels: labels}
	var res agentenv.ExecResult
	for uploaded := false; ; uploaded = true {
		if res, err = p.runScript(ctx, vm, d.EnvdAccessToken, run, archive); err != nil || res.ExitCode != vmdocker.ExitNoImage || uploaded {
			break
		}
		if err = p.uploadImage(ctx, vm, d.EnvdAccessToken, spec.Image); err != nil {
			break
		}
	}
	if err == nil {
		err = vmdocker.RunError(run, res.ExitCode, res.Stderr, p.imageHint())
	}
	if err == nil {
		err = ctx.Err()
	}
	var st vmdocker.Started
	if err == nil {
		st, err = vmdocker.ParseRun(string(res.Stdout), run)
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
	if !st.Running {
		sb.State, sb.ExitCode = agentenv.SandboxExited, st.ExitCode
	}
	for _, port := range spec.Ports {
		if sb.Endpoints == nil {
			sb.Endpoints = map[string]string{}
		}
		sb.Endpoints[strconv.Itoa(port)] = p.cfg.SandboxURL(vm, st.Ports[port])
	}
	return sb, nil
}

// runScript runs run's RunScript in vm as root, first uploading archive (the spec's files, nil
// for none) into the VM for it to copy in; the script removes the upload when it ends.
func (p *Provider) runScript(ctx context.Context, vm, token string, run vmdocker.Run, archive []byte) (agentenv.ExecResult, error) {
	script := vmdocker.RunScript(run)
	if archive != nil {
		run.Files = "/tmp/agentenv-files-" + rand.Text() + ".tar"
		if err := p.upload(ctx, vm, token, run.Files, "root", bytes.NewReader(archive)); err != nil {
			return agentenv.ExecResult{}, err
		}
		script = "trap " + shellquote.Join([]string{"rm -f " + shellquote.Join([]string{run.Files})}) + " EXIT\n" + vmdocker.RunScript(run)
	}
	return p.process(ctx, vm, token, processConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}, "root", "", true)
}

// uploadImage supplies vm with image from this host's Docker engine (Config.DockerHost): the
// `docker save` archive streamed into a file in the VM through envd, then `docker load`.
func (p *Provider) uploadImage(ctx context.Context, vm, token, image string) error {
	host, _, err := engine.Client(p.cfg.DockerHost)
	if err != nil {
		return fmt.Errorf("%w (%v)", vmdocker.MissingImage(image, p.imageHint()), err)
	}
	defer host.Close()
	start := time.Now()
	err = vmdocker.Upload(ctx, host, image, func(ctx context.Context, saved io.Reader) error {
		file := "/tmp/agentenv-image-" + rand.Text() + ".tar"
		if err := p.upload(ctx, vm, token, file, "root", saved); err != nil {
			return err
		}
		res, err := p.process(ctx, vm, token, processConfig{Cmd: "/bin/sh", Args: []string{"-c", vmdocker.LoadScript(file)}}, "root", "", true)
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("docker load exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
		}
		return err
	}, p.imageHint())
	if err == nil {
		p.log.Debug("image uploaded into the vm", "vm", vm, "image", image, "took", time.Since(start))
	}
	return err
}

// imageHint says, in a missing image's error, where e2b gets its images.
func (p *Provider) imageHint() string {
	return fmt.Sprintf("e2b uploads images from this host's Docker engine ($DOCKER_HOST), or build the vm template (%s) with the env's images", p.cfg.VMTemplate)
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
	res, err := p.process(ctx, vm, d.EnvdAccessToken, processConfig{Cmd: "/bin/sh", Args: []string{"-c", vmdocker.RemoveScript(name)}}, "root", "", true)
	switch {
	case errors.Is(err, agentenv.ErrGone):
		return nil
	case err == nil:
		err = vmdocker.Removed(res.ExitCode, res.Stderr)
	}
	if err != nil {
		return fmt.Errorf("e2b: remove %s from %s: %w", name, vm, err)
	}
	return nil
}
