package task

import (
	"errors"
	"fmt"

	"github.com/agentenv/agentenv/agent"
)

// TypeDeployAgent starts an A2A agent in a sandbox of the run's provider.
const TypeDeployAgent = "deploy_agent"

// checkA2A checks a prompt_agent step whose agent is an A2A agent.
func (s *promptAgent) checkA2A() error {
	if s.Prompt == "" {
		return errors.New("prompt: an A2A agent needs a prompt")
	}
	return nil
}

// a2aAgent is the A2A agent a prompt_agent step names.
func (s *promptAgent) a2aAgent(sc *scope) (agent.Agent, error) {
	return nil, fmt.Errorf("agent: a2a agents are not built yet")
}
