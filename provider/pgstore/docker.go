package pgstore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/engine"
)

// DockerAttacher joins a store that is a container on a Docker engine (one of role agentenv.RoleStateStore,
// publishing the store's port) to the private networks of that engine's deployments. It finds
// the container by the host port the store's DSN names, so any process with that DSN (a soak's
// runner with a state folder of its own included) attaches the same container.
type DockerAttacher struct {
	cli  *client.Client
	host string
	port uint16

	mu        sync.Mutex
	container string
	// ops lets one connect or disconnect of the store's container run at a time: the container
	// joins and leaves the network of every deployment, and Docker 20.10 leaves a stale endpoint
	// behind (a network that no one can remove until dockerd restarts) when one container's
	// endpoints change concurrently.
	ops sync.Mutex
}

// NewDockerAttacher returns an Attacher for the store container publishing port on the engine
// at host ("" for DOCKER_HOST or the default socket). It does no I/O.
func NewDockerAttacher(host string, port uint16) (*DockerAttacher, error) {
	cli, h, err := engine.Client(host)
	if err != nil {
		return nil, err
	}
	return &DockerAttacher{cli: cli, host: h, port: port}, nil
}

// Find returns the id of the store's container, or an error wrapping agentenv.ErrNotFound if
// no running store container publishes the port.
func (a *DockerAttacher) Find(ctx context.Context) (string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.container != "" {
		return a.container, nil
	}
	f, err := engine.LabelFilter(map[string]string{agentenv.LabelRole: string(agentenv.RoleStateStore)})
	if err != nil {
		return "", err
	}
	res, err := a.cli.ContainerList(ctx, client.ContainerListOptions{Filters: f})
	if err != nil {
		return "", fmt.Errorf("find the store's container: %w", engine.Kind(a.host, err))
	}
	for _, c := range res.Items {
		for _, p := range c.Ports {
			if p.PublicPort == a.port && p.PrivatePort == 5432 {
				a.container = c.ID
				return c.ID, nil
			}
		}
	}
	return "", fmt.Errorf("no store container on %s publishes port %d: %w", a.host, a.port, agentenv.ErrNotFound)
}

// Attach connects the store's container to network under aliases; a container already on
// it is left as it is.
func (a *DockerAttacher) Attach(ctx context.Context, networkID string, aliases []string) error {
	id, err := a.Find(ctx)
	if err != nil {
		return err
	}
	a.ops.Lock()
	defer a.ops.Unlock()
	_, err = a.cli.NetworkConnect(ctx, networkID, client.NetworkConnectOptions{
		Container:      id,
		EndpointConfig: &network.EndpointSettings{Aliases: aliases},
	})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("connect %s to %s: %w", id, networkID, engine.Kind(a.host, err))
	}
	return nil
}

// Detach disconnects the store's container from network; a container not on it, a network
// that is gone, or no store container at all, is no error.
func (a *DockerAttacher) Detach(ctx context.Context, networkID string) error {
	id, err := a.Find(ctx)
	if errors.Is(err, agentenv.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	a.ops.Lock()
	defer a.ops.Unlock()
	_, err = a.cli.NetworkDisconnect(ctx, networkID, client.NetworkDisconnectOptions{Container: id})
	if err != nil && !engine.IsGone(err) && !strings.Contains(err.Error(), "is not connected") {
		return fmt.Errorf("disconnect %s from %s: %w", id, networkID, engine.Kind(a.host, err))
	}
	return nil
}
