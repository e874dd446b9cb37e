package main

import (
	"context"
	"net/http"
	"time"

	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/agent/model"
)

// modelSettings are the [model] settings the served agent uses.
type modelSettings struct {
	Provider               string // model.OpenAI (the default) or model.Anthropic
	BaseURL, APIKey, Model string
	MaxTurns               int // the turn budget of a prompt whose agent-config sets none
}

// newModelAgent returns the built-in model agent (agent/model) with s.
func newModelAgent(s modelSettings) (agent.Agent, error) {
	if s.Provider == "" {
		s.Provider = model.OpenAI
	}
	a, err := model.New(model.Config{Provider: s.Provider, BaseURL: s.BaseURL, APIKey: s.APIKey, Model: s.Model,
		HTTP: &http.Client{Timeout: 5 * time.Minute}})
	if err != nil {
		return nil, err
	}
	return withTurns{a, s.MaxTurns}, nil
}

// withTurns gives prompts that set no turn budget the served agent's own.
type withTurns struct {
	agent.Agent
	turns int
}

func (w withTurns) Prompt(ctx context.Context, p agent.Prompt, tr *agent.Trajectory) (agent.Answer, error) {
	if p.MaxTurns == 0 {
		p.MaxTurns = w.turns
	}
	return w.Agent.Prompt(ctx, p, tr)
}
