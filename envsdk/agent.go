package envsdk

import (
	"context"
	"fmt"
	"log/slog"
	"net"

	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/agent/a2a"
)

// AgentOptions describe an agent served over A2A; see a2a.ServerOptions.
type AgentOptions = a2a.ServerOptions

// ServeAgent serves ag over A2A on ln (its card at /.well-known/agent-card.json, JSON-RPC at
// /a2a, agentenv's mcp-config, agent-config and trajectory extensions under /ext/) until ctx
// ends, then shuts down within [ShutdownTimeout]. It is how a Go agent is made drivable by
// prompt_agent and deploy_agent. It closes ln.
func ServeAgent(ctx context.Context, ln net.Listener, ag agent.Agent, o AgentOptions) error {
	srv, err := a2a.NewServer(ag, o)
	if err != nil {
		ln.Close()
		return fmt.Errorf("envsdk: %w", err)
	}
	defer srv.Close()
	log := o.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return ServeHandler(ctx, ln, srv, nil, log)
}
