package fault

import (
	"context"

	"github.com/agentenv/agentenv"
)

// Provider wraps an agentenv.Provider with a Plan. Every operation of the provider and of each
// ability it has goes through the plan under its agentenv.Op* name (create, create_vm, exec,
// run_in_vm, ...), and the wrapper has exactly the wrapped provider's abilities.
type Provider struct {
	agentenv.Provider       // the wrapped provider, each call through Plan
	Plan              *Plan // may be replaced between calls
}

// WrapProvider returns p with faults from plan injected.
func WrapProvider(p agentenv.Provider, plan *Plan) *Provider {
	f := &Provider{Plan: plan}
	f.Provider = agentenv.Intercept(p, func(ctx context.Context, op string, call func(context.Context) error) error {
		_, err := do(ctx, f.Plan, op, func() (struct{}, error) { return struct{}{}, call(ctx) })
		return err
	})
	return f
}

// Abilities implements agentenv.Abler: those of the wrapped provider, each through the plan.
func (f *Provider) Abilities() agentenv.Abilities { return agentenv.AbilitiesOf(f.Provider) }
