package main

import (
	"fmt"
	"net"
	"os"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv/agent/model"
	"github.com/agentenv/agentenv/envsdk"
)

// newServeAgentCmd serves the built-in model agent over A2A, so deploy_agent can start it and
// any A2A client can drive it.
func newServeAgentCmd(a *app) *cobra.Command {
	var listen, name, modelName, provider string
	var maxTurns int
	cmd := &cobra.Command{
		Use:   "agent [--listen ADDR] [--model NAME]",
		Short: "The built-in model agent over A2A, with agentenv's mcp-config, agent-config and trajectory extensions",
		Long: `agent serves the built-in model agent over A2A: its card at /.well-known/agent-card.json
(and the legacy /.well-known/agent.json), JSON-RPC at /a2a, and the extensions
urn:agentenv:mcp-config/v1, urn:agentenv:agent-config/v1 and urn:agentenv:trajectory/v1 under
/ext/. The model endpoint is the [model] settings (model.base_url, model.api_key, model.name) on
the official OpenAI or Anthropic SDK (--provider);
agent-config may name another model per prompt.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			base, err := a.cfg.Get("model.base_url")
			if err != nil {
				return fmt.Errorf("model.base_url: %w", err)
			}
			if base == "" {
				return usageError{"serve agent needs model.base_url (AGENTENV_MODEL_BASE_URL or the config file)"}
			}
			key, err := a.cfg.Get("model.api_key")
			if err != nil {
				return fmt.Errorf("model.api_key: %w", err)
			}
			if modelName == "" {
				if modelName, err = a.cfg.Get("model.name"); err != nil {
					return fmt.Errorf("model.name: %w", err)
				}
			}
			ln, err := net.Listen("tcp", listen)
			if err != nil {
				return fmt.Errorf("listen %s: %w", listen, err)
			}
			fmt.Fprintf(a.stderr, "serve agent: A2A at http://%s (card %s)\n", ln.Addr(), "/.well-known/agent-card.json")
			ag, err := newModelAgent(modelSettings{Provider: provider, BaseURL: base, APIKey: key, Model: modelName, MaxTurns: maxTurns})
			if err != nil {
				return usageError{err.Error()}
			}
			return envsdk.ServeAgent(cmd.Context(), ln, ag, envsdk.AgentOptions{Name: name, Description: "agentenv's built-in model agent", Log: a.log})
		},
	}
	cmd.Flags().StringVar(&listen, "listen", ":8080", "address to serve HTTP on")
	cmd.Flags().StringVar(&name, "name", hostname(), "the agent's name on its card")
	cmd.Flags().StringVar(&modelName, "model", "", "model name (default: model.name)")
	cmd.Flags().StringVar(&provider, "provider", model.OpenAI, "the model endpoint's API: openai (any OpenAI-compatible endpoint) or anthropic")
	cmd.Flags().IntVar(&maxTurns, "max-turns", model.DefaultMaxTurns, "model turns per prompt unless agent-config says otherwise")
	return cmd
}

func hostname() string {
	if h, err := os.Hostname(); err == nil {
		return "agentenv agent on " + h
	}
	return "agentenv agent"
}
