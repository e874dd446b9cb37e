package task

import (
	"errors"
	"fmt"

	"github.com/agentenv/agentenv/agent"
)

// harnessSpec is a command-line agent run in a sandbox next to the env.
type harnessSpec struct {
	Image   string   `yaml:"image" task:"required"`
	Command []string `yaml:"command" task:"required"`
}

// checkHarness checks a prompt_agent step whose agent is a harness.
func (s *promptAgent) checkHarness() error {
	if s.Prompt == "" {
		return errors.New("prompt: a harness agent needs a prompt")
	}
	return nil
}

// harnessAgent is the harness agent a prompt_agent step names.
func (s *promptAgent) harnessAgent(sc *scope) (agent.Agent, error) {
	return nil, fmt.Errorf("agent: harness agents are not built yet")
}
