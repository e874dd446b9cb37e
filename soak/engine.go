package soak

import (
	"context"
	"errors"
	"fmt"
	"sort"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv/internal/engine"
)

// Resource is one container, network or volume the engine lists.
type Resource struct {
	Kind    string // "container", "network" or "volume"
	ID      string
	Name    string
	Running bool              // containers only
	Labels  map[string]string //
	Ports   []int             // host ports a container publishes
}

// String names r as "container NAME", the form of a leftover.
func (r Resource) String() string { return r.Kind + " " + r.Name }

// Engine is what soak asks of the container engine, never of agentenv's ledger. Implementations
// must be safe for concurrent use.
type Engine interface {
	// List returns the containers (running or not), networks and volumes that carry every one of
	// labels, sorted by kind and name. labels must not be empty.
	List(ctx context.Context, labels map[string]string) ([]Resource, error)
	// Kill sends SIGKILL to a container; Remove force-removes it with its anonymous volumes.
	// Both act behind agentenv's back, as a user or the kernel would.
	Kill(ctx context.Context, id string) error
	Remove(ctx context.Context, id string) error
	// RemoveAll force-removes what List(labels) returns, containers first.
	RemoveAll(ctx context.Context, labels map[string]string) error
}

// Docker is the Engine of a Docker daemon.
type Docker struct{ cli *client.Client }

var _ Engine = (*Docker)(nil)

// NewDocker returns the Engine of the daemon named by DOCKER_HOST (default
// unix:///var/run/docker.sock), or by host when it is not empty.
func NewDocker(host string) (*Docker, error) {
	cli, _, err := engine.Client(host)
	if err != nil {
		return nil, fmt.Errorf("docker engine: %w", err)
	}
	return &Docker{cli: cli}, nil
}

// Close releases the client.
func (d *Docker) Close() error { return d.cli.Close() }

// List implements Engine.
func (d *Docker) List(ctx context.Context, labels map[string]string) ([]Resource, error) {
	f, err := engine.LabelFilter(labels)
	if err != nil {
		return nil, err
	}
	l, err := engine.List(ctx, d.cli, f)
	if err != nil {
		return nil, fmt.Errorf("list by labels: %w", err)
	}
	var out []Resource
	for _, c := range l.Containers {
		r := Resource{Kind: "container", ID: c.ID, Name: c.ID, Running: c.State == container.StateRunning, Labels: c.Labels}
		if len(c.Names) > 0 {
			r.Name = c.Names[0][1:]
		}
		for _, p := range c.Ports {
			if p.PublicPort != 0 {
				r.Ports = append(r.Ports, int(p.PublicPort))
			}
		}
		out = append(out, r)
	}
	for _, n := range l.Networks {
		out = append(out, Resource{Kind: "network", ID: n.ID, Name: n.Name, Labels: n.Labels})
	}
	for _, v := range l.Volumes {
		out = append(out, Resource{Kind: "volume", ID: v.Name, Name: v.Name, Labels: v.Labels})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// Kill implements Engine.
func (d *Docker) Kill(ctx context.Context, id string) error {
	if _, err := d.cli.ContainerKill(ctx, id, client.ContainerKillOptions{Signal: "KILL"}); err != nil {
		return fmt.Errorf("kill container %s: %w", short(id), err)
	}
	return nil
}

// Remove implements Engine.
func (d *Docker) Remove(ctx context.Context, id string) error {
	if _, err := d.cli.ContainerRemove(ctx, id, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true}); err != nil {
		return fmt.Errorf("remove container %s: %w", short(id), err)
	}
	return nil
}

// RemoveAll implements Engine.
func (d *Docker) RemoveAll(ctx context.Context, labels map[string]string) error {
	rs, err := d.List(ctx, labels)
	if err != nil {
		return err
	}
	var errs []error
	for _, kind := range []string{"container", "network", "volume"} {
		for _, r := range rs {
			if r.Kind != kind {
				continue
			}
			var err error
			switch kind {
			case "container":
				err = d.Remove(ctx, r.ID)
			case "network":
				_, err = d.cli.NetworkRemove(ctx, r.ID, client.NetworkRemoveOptions{})
			case "volume":
				_, err = d.cli.VolumeRemove(ctx, r.ID, client.VolumeRemoveOptions{Force: true})
			}
			if err != nil && !engine.IsGone(err) {
				errs = append(errs, fmt.Errorf("remove %s: %w", r, err))
			}
		}
	}
	return errors.Join(errs...)
}

func short(id string) string {
	if len(id) > 12 {
		return id[:12]
	}
	return id
}
