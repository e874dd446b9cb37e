package docker

import (
	"context"
	"fmt"

	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv/internal/engine"
)

// Capacity returns the engine's CPUs and memory in bytes (docker info), for sizing how many
// deploys may start on it at once.
func (p *Provider) Capacity(ctx context.Context) (cpus int, memory int64, err error) {
	res, err := p.cli.Info(ctx, client.InfoOptions{})
	if err != nil {
		return 0, 0, fmt.Errorf("docker info: %w", engine.Kind(p.host, err))
	}
	return res.Info.NCPU, res.Info.MemTotal, nil
}
