package docker

import (
	"context"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/mount"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/engine"
)

var _ agentenv.Volumer = (*Provider)(nil)

// CreateVolume makes a local volume named spec.Name carrying spec.Labels, which must include
// agentenv.record=spec.Name. Its Sandbox.ID is spec.Name: sandboxes mount it by naming it in
// SandboxSpec.Mounts, and Terminate(spec.Name) removes it. A volume of that name that already
// exists is ErrConflict and is left alone (the engine's own create would hand it back).
func (p *Provider) CreateVolume(ctx context.Context, spec agentenv.VolumeSpec) (agentenv.Sandbox, error) {
	if err := checkID(spec.Name); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create volume: %w", err)
	}
	if got := spec.Labels[agentenv.LabelRecord]; got != spec.Name {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create volume %s: label %s=%q, want the record id: %w",
			spec.Name, agentenv.LabelRecord, got, agentenv.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create volume %s: %w", spec.Name, err)
	}
	switch _, err := p.cli.VolumeInspect(ctx, spec.Name, client.VolumeInspectOptions{}); {
	case err == nil:
		return agentenv.Sandbox{}, fmt.Errorf("docker: create volume %s: name in use: %w", spec.Name, agentenv.ErrConflict)
	case !cerrdefs.IsNotFound(err):
		return agentenv.Sandbox{}, fmt.Errorf("docker: create volume %s: %w", spec.Name, engine.Kind(p.host, err))
	}
	cctx, cancel := cleanup.Detached(ctx, createBound)
	_, err := p.cli.VolumeCreate(cctx, client.VolumeCreateOptions{Name: spec.Name, Driver: "local", Labels: spec.Labels})
	cancel()
	if err != nil {
		if !client.IsErrConnectionFailed(err) && !cerrdefs.IsInvalidArgument(err) {
			p.cleanup(ctx, spec.Name)
		}
		return agentenv.Sandbox{}, fmt.Errorf("docker: create volume %s: %w", spec.Name, engine.Kind(p.host, err))
	}
	if err := ctx.Err(); err != nil {
		p.cleanup(ctx, spec.Name)
		return agentenv.Sandbox{}, fmt.Errorf("docker: create volume %s: %w", spec.Name, err)
	}
	p.log.Debug("volume created", "record_id", spec.Name)
	return agentenv.Sandbox{
		ID: spec.Name, Name: spec.Name, Provider: p.cfg.Name, State: agentenv.SandboxRunning,
		Labels: spec.Labels, Endpoints: map[string]string{}, Created: time.Now(),
	}, nil
}

// mounts are spec's Mounts as the engine takes them: volumes only, never a host path.
func mounts(spec agentenv.SandboxSpec) ([]mount.Mount, error) {
	var out []mount.Mount
	for i, m := range spec.Mounts {
		if err := checkID(m.Volume); err != nil {
			return nil, fmt.Errorf("mounts[%d].volume: %w", i, err)
		}
		out = append(out, mount.Mount{Type: mount.TypeVolume, Source: m.Volume, Target: m.Path, ReadOnly: m.ReadOnly})
	}
	return out, nil
}

// checkMounts makes sure every volume spec mounts exists and is agentenv's (carries a record
// label) before the container is created: the engine would make a missing one itself, with no
// label, and so out of gc's sight.
func (p *Provider) checkMounts(ctx context.Context, spec agentenv.SandboxSpec) error {
	for i, m := range spec.Mounts {
		res, err := p.cli.VolumeInspect(ctx, m.Volume, client.VolumeInspectOptions{})
		switch {
		case cerrdefs.IsNotFound(err):
			return fmt.Errorf("mounts[%d]: volume %q does not exist: %w", i, m.Volume, agentenv.ErrInvalid)
		case err != nil:
			return fmt.Errorf("mounts[%d]: volume %q: %w", i, m.Volume, engine.Kind(p.host, err))
		case res.Volume.Labels[agentenv.LabelRecord] == "":
			return fmt.Errorf("mounts[%d]: volume %q is not one agentenv made (no %s label): %w", i, m.Volume, agentenv.LabelRecord, agentenv.ErrInvalid)
		}
	}
	return nil
}

// removeVolume removes volume name. The engine can still count it as in use by a container
// just removed (on a loaded host, or a sandbox of the same teardown): it is tried again until
// ctx ends.
func (p *Provider) removeVolume(ctx context.Context, name string) error {
	for {
		_, err := p.cli.VolumeRemove(ctx, name, client.VolumeRemoveOptions{Force: true})
		if err == nil || engine.IsGone(err) {
			return nil
		}
		if !cerrdefs.IsConflict(err) || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (still in use when %w)", err, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}
