package fault

import (
	"context"
	"time"

	"github.com/agentenv/agentenv"
)

// Ledger wraps an agentenv.Ledger with a Plan.
type Ledger struct {
	agentenv.Ledger
	Plan *Plan
}

// WrapLedger returns l with faults from plan injected.
func WrapLedger(l agentenv.Ledger, plan *Plan) *Ledger { return &Ledger{Ledger: l, Plan: plan} }

// Put implements agentenv.Ledger.
func (f *Ledger) Put(ctx context.Context, r agentenv.Record) error {
	_, err := do(ctx, f.Plan, "put", func() (struct{}, error) { return struct{}{}, f.Ledger.Put(ctx, r) })
	return err
}

// Insert implements agentenv.Ledger.
func (f *Ledger) Insert(ctx context.Context, r agentenv.Record) error {
	_, err := do(ctx, f.Plan, "insert", func() (struct{}, error) { return struct{}{}, f.Ledger.Insert(ctx, r) })
	return err
}

// Get implements agentenv.Ledger.
func (f *Ledger) Get(ctx context.Context, id string) (agentenv.Record, error) {
	return do(ctx, f.Plan, "get", func() (agentenv.Record, error) { return f.Ledger.Get(ctx, id) })
}

// Update implements agentenv.Ledger.
func (f *Ledger) Update(ctx context.Context, id string, fn func(*agentenv.Record) error) (agentenv.Record, error) {
	return do(ctx, f.Plan, "update", func() (agentenv.Record, error) { return f.Ledger.Update(ctx, id, fn) })
}

// List implements agentenv.Ledger.
func (f *Ledger) List(ctx context.Context, flt agentenv.Filter) ([]agentenv.Record, error) {
	return do(ctx, f.Plan, "list", func() ([]agentenv.Record, error) { return f.Ledger.List(ctx, flt) })
}

// RenewLease implements agentenv.Ledger.
func (f *Ledger) RenewLease(ctx context.Context, o agentenv.Owner, until time.Time) (int, error) {
	return do(ctx, f.Plan, "renew", func() (int, error) { return f.Ledger.RenewLease(ctx, o, until) })
}
