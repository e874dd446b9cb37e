package task

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"context"

	"github.com/agentenv/agentenv/internal/cleanup"
)

// Before an env is torn down, the episode keeps its gateway's /trajectory (every tool call as
// the gateway saw it: role, arguments, result, timing) in the run's folder, beside the agent's
// own trajectory, so that a reader can compare what the agent says it did with what reached
// the env. The run document names the file in attrs as GatewayTrajectoryAttr + the env's step.

// GatewayTrajectoryAttr prefixes the run document attribute that names the file holding the
// gateway trajectory of the env a deploy_env step made.
const GatewayTrajectoryAttr = "gateway_trajectory."

// maxGatewayTrajectory bounds what is kept of one gateway trajectory.
const maxGatewayTrajectory = 16 << 20

// keepGatewayTrajectory saves the gateway trajectory of the env step made. It is bounded and
// runs on a cleanup context (the episode may be ending on a cancellation); a failure is logged
// and the teardown goes on.
func (e *episode) keepGatewayTrajectory(ctx context.Context, step string, env DeployedEnv) {
	if env.GatewayURL == "" || env.Token == "" {
		return
	}
	cctx, cancel := cleanup.Context(ctx, 5*time.Second)
	defer cancel()
	path, err := e.saveGatewayTrajectory(cctx, step, env)
	if err != nil {
		e.log.Warn("keep the gateway trajectory", "run", e.id, "step", step, "err", err)
		return
	}
	e.mu.Lock()
	e.doc.Attrs[GatewayTrajectoryAttr+step] = path
	e.mu.Unlock()
}

func (e *episode) saveGatewayTrajectory(ctx context.Context, step string, env DeployedEnv) (string, error) {
	url := strings.TrimSuffix(env.GatewayURL, "/mcp") + "/trajectory"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+env.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	dir, err := e.folder()
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, step+".gateway.ndjson")
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return "", err
	}
	_, cerr := io.Copy(f, io.LimitReader(resp.Body, maxGatewayTrajectory))
	if err := f.Close(); cerr == nil {
		cerr = err
	}
	return path, cerr
}
