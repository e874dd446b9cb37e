package docker

import (
	"context"
	"fmt"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/engine"
)

// CreateNetwork makes a bridge network named spec.Name carrying spec.Labels, which must
// include agentenv.record=spec.Name. Its Sandbox.ID is spec.Name: sandboxes join it by setting
// SandboxSpec.Network to it, and Terminate(spec.Name) removes it. A network of that name that
// already exists is ErrConflict and is left alone.
func (p *Provider) CreateNetwork(ctx context.Context, spec agentenv.NetworkSpec) (sb agentenv.Sandbox, err error) {
	if err := checkID(spec.Name); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create network: %w", err)
	}
	if got := spec.Labels[agentenv.LabelRecord]; got != spec.Name {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create network %s: label %s=%q, want the record id: %w",
			spec.Name, agentenv.LabelRecord, got, agentenv.ErrInvalid)
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create network %s: %w", spec.Name, err)
	}
	// Docker allows two networks of one name; refuse the second so that the name stays an id.
	existing, err := p.cli.NetworkList(ctx, client.NetworkListOptions{Filters: make(client.Filters).Add("name", spec.Name)})
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create network %s: %w", spec.Name, engine.Kind(p.host, err))
	}
	for _, n := range existing.Items {
		if n.Name == spec.Name {
			return agentenv.Sandbox{}, fmt.Errorf("docker: create network %s: name in use: %w", spec.Name, agentenv.ErrConflict)
		}
	}

	cctx, cancel := cleanup.Detached(ctx, createBound)
	res, err := p.cli.NetworkCreate(cctx, spec.Name, client.NetworkCreateOptions{Driver: "bridge", Labels: spec.Labels, Internal: spec.Isolated})
	cancel()
	if err != nil {
		if !client.IsErrConnectionFailed(err) && !cerrdefs.IsInvalidArgument(err) && !cerrdefs.IsConflict(err) {
			p.cleanup(ctx, spec.Name)
		}
		return agentenv.Sandbox{}, fmt.Errorf("docker: create network %s: %w", spec.Name, engine.Kind(p.host, err))
	}
	if err := ctx.Err(); err != nil {
		p.cleanup(ctx, spec.Name)
		return agentenv.Sandbox{}, fmt.Errorf("docker: create network %s: %w", spec.Name, err)
	}
	p.log.Debug("network created", "record_id", spec.Name, "network_id", res.ID)
	return agentenv.Sandbox{
		ID: spec.Name, Name: spec.Name, Provider: p.cfg.Name, State: agentenv.SandboxRunning,
		Labels: spec.Labels, Endpoints: map[string]string{}, Created: time.Now(),
	}, nil
}

// cleanup removes what a failed create of record id may have made, on a detached, bounded
// context; a failure is logged, and the record is still found by List.
func (p *Provider) cleanup(ctx context.Context, id string) {
	cctx, cancel := cleanup.Context(ctx, cleanupBound)
	defer cancel()
	if err := p.terminate(cctx, id); err != nil {
		p.log.Warn("remove after failed create", "record_id", id, "err", err)
	}
}
