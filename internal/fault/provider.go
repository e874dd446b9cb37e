package fault

import (
	"context"
	"fmt"
	"slices"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/suggest"
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

// ParseProviders reads the plans of a comma list of PROVIDER/OP:CALL:ACTION (the
// AGENTENV_FAULTS form, such as "docker/create:2:error,docker/terminate:*:lost"), one plan per
// provider. A provider not among known and an operation not among agentenv.Ops() are errors
// naming the valid ones: a misspelt operation would inject nothing, and a chaos run would pass.
func ParseProviders(spec string, known []string) (map[string]*Plan, error) {
	rules := map[string][]string{}
	var order []string
	for _, f := range strings.Split(spec, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		name, rule, ok := strings.Cut(f, "/")
		if !ok {
			return nil, fmt.Errorf("%q: want PROVIDER/OP:CALL:ACTION", f)
		}
		if !slices.Contains(known, name) {
			return nil, fmt.Errorf("%q: provider %q is not configured%s (have %s)", f, name, suggest.DidYouMean(name, known), strings.Join(known, ", "))
		}
		if _, seen := rules[name]; !seen {
			order = append(order, name)
		}
		rules[name] = append(rules[name], rule)
	}
	plans := map[string]*Plan{}
	for _, name := range order {
		plan, err := Parse(strings.Join(rules[name], ","))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		for _, op := range plan.Ops() {
			if !slices.Contains(agentenv.Ops(), op) {
				return nil, fmt.Errorf("%s/%s: unknown operation%s (want one of %s)", name, op, suggest.DidYouMean(op, agentenv.Ops()), strings.Join(agentenv.Ops(), ", "))
			}
		}
		plans[name] = plan
	}
	return plans, nil
}
