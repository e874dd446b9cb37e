package task

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv"
)

// envRoute is what a sandbox started next to a deployed env needs to reach its gateway, read
// from the env's ledger records (no provider call).
type envRoute struct {
	Network     string // the record id of the env's private network; empty in VM mode
	Provider    string // the provider of the env's gateway (else of its first record)
	GatewayPort int    // the gateway's container port on Network; 0 if its record names none
}

// routeTo reads env's records for its network, provider and gateway port.
func routeTo(ctx context.Context, l agentenv.Ledger, env DeployedEnv) (envRoute, error) {
	var rt envRoute
	for _, id := range env.Records {
		r, err := l.Get(ctx, id)
		if err != nil {
			return rt, fmt.Errorf("env %s: record %s: %w", env.ID, id, err)
		}
		if rt.Provider == "" || r.Role == agentenv.RoleGateway {
			rt.Provider = r.Provider
		}
		switch {
		case r.Kind == agentenv.KindNetwork && r.Role != agentenv.RoleBrowserNetwork:
			// The env's own network, not its browser's, which has no route out.
			rt.Network = r.ID
		case r.Role == agentenv.RoleGateway:
			for k := range r.Attrs {
				if p, ok := strings.CutPrefix(k, "endpoint."); ok {
					rt.GatewayPort, _ = strconv.Atoi(p)
				}
			}
		}
	}
	return rt, nil
}
