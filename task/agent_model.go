package task

import (
	"fmt"
	"strconv"

	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/agent/model"
)

// modelAgent is the built-in model agent of a prompt_agent step (agent: openai or anthropic),
// on the endpoint the [model] settings name. The settings are read when the step runs; the
// API key is never recorded.
func (s *promptAgent) modelAgent(sc *scope) (agent.Agent, error) {
	src := sc.e.r.Model
	if src == nil {
		return nil, fmt.Errorf("%s agent: no [model] settings configured", s.Agent.Kind)
	}
	get := func(key string) (string, error) {
		v, err := src.Get(key)
		if err != nil {
			return "", fmt.Errorf("%s: %w", key, err)
		}
		return v, nil
	}
	cfg := model.Config{Provider: s.Agent.Kind, HTTP: sc.e.r.httpClient()}
	var err error
	if cfg.BaseURL, err = get("model.base_url"); err != nil {
		return nil, err
	}
	if cfg.Model, err = get("model.name"); err != nil {
		return nil, err
	}
	if cfg.APIKey, err = get("model.api_key"); err != nil {
		return nil, err
	}
	sc.secret(cfg.APIKey)
	for _, p := range []struct {
		key string
		to  *float64
	}{{"model.input_price", &cfg.Prices.Input}, {"model.output_price", &cfg.Prices.Output}} {
		v, err := get(p.key)
		if err != nil || v == "" {
			if err != nil {
				return nil, err
			}
			continue
		}
		if *p.to, err = strconv.ParseFloat(v, 64); err != nil || *p.to < 0 {
			return nil, fmt.Errorf("%s: want USD per million tokens, got %q", p.key, v)
		}
	}
	a, err := model.New(cfg)
	if err != nil {
		return nil, fmt.Errorf("%s agent: %w", s.Agent.Kind, err)
	}
	return a, nil
}
