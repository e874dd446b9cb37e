package pgstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/moby/moby/api/types/network"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv/internal/engine"
)

// DockerAttacher joins a store that is a container on a Docker engine (the one `agentenv state
// up` starts) to the private networks of that engine's deployments.
type DockerAttacher struct {
	cli       *client.Client
	host      string
	container string
}

// NewDockerAttacher returns an Attacher for container on the engine at host ("" for
// DOCKER_HOST or the default socket). It does no I/O.
func NewDockerAttacher(host, container string) (*DockerAttacher, error) {
	cli, h, err := engine.Client(host)
	if err != nil {
		return nil, err
	}
	return &DockerAttacher{cli: cli, host: h, container: container}, nil
}

// Attach connects the store's container to network under aliases; a container already on
// it is left as it is.
func (a *DockerAttacher) Attach(ctx context.Context, networkID string, aliases []string) error {
	_, err := a.cli.NetworkConnect(ctx, networkID, client.NetworkConnectOptions{
		Container:      a.container,
		EndpointConfig: &network.EndpointSettings{Aliases: aliases},
	})
	if err != nil && !strings.Contains(err.Error(), "already exists") {
		return fmt.Errorf("connect %s to %s: %w", a.container, networkID, engine.Kind(a.host, err))
	}
	return nil
}
