package fault

import (
	"context"

	"github.com/agentenv/agentenv"
)

// Provider wraps an agentenv.Provider with a Plan. It implements agentenv.Networker when the
// wrapped provider does (and fails CreateNetwork with ErrInvalid otherwise).
type Provider struct {
	agentenv.Provider
	Plan *Plan
}

// WrapProvider returns p with faults from plan injected.
func WrapProvider(p agentenv.Provider, plan *Plan) *Provider {
	return &Provider{Provider: p, Plan: plan}
}

// Create implements agentenv.Provider.
func (f *Provider) Create(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	return do(ctx, f.Plan, "create", func() (agentenv.Sandbox, error) { return f.Provider.Create(ctx, spec) })
}

// CreateNetwork implements agentenv.Networker.
func (f *Provider) CreateNetwork(ctx context.Context, spec agentenv.NetworkSpec) (agentenv.Sandbox, error) {
	return do(ctx, f.Plan, "create_network", func() (agentenv.Sandbox, error) {
		n, ok := f.Provider.(agentenv.Networker)
		if !ok {
			return agentenv.Sandbox{}, agentenv.ErrInvalid
		}
		return n.CreateNetwork(ctx, spec)
	})
}

// Get implements agentenv.Provider.
func (f *Provider) Get(ctx context.Context, id string) (agentenv.Sandbox, error) {
	return do(ctx, f.Plan, "get", func() (agentenv.Sandbox, error) { return f.Provider.Get(ctx, id) })
}

// Terminate implements agentenv.Provider.
func (f *Provider) Terminate(ctx context.Context, id string) error {
	_, err := do(ctx, f.Plan, "terminate", func() (struct{}, error) { return struct{}{}, f.Provider.Terminate(ctx, id) })
	return err
}

// List implements agentenv.Provider.
func (f *Provider) List(ctx context.Context, labels map[string]string) ([]agentenv.Sandbox, error) {
	return do(ctx, f.Plan, "list", func() ([]agentenv.Sandbox, error) { return f.Provider.List(ctx, labels) })
}
