package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/agentenv/agentenv"
)

// guarded wraps a provider so that a panic in any of its calls becomes an error: a faulty
// provider must not take down the process that holds the records of everything it made.
type guarded struct{ p agentenv.Provider }

func recovered(err *error, p agentenv.Provider, op, id string) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: %s %s panicked: %v", p.Name(), op, id, r)
	}
}

func (g guarded) Name() string                        { return g.p.Name() }
func (g guarded) Capabilities() agentenv.Capabilities { return g.p.Capabilities() }

func (g guarded) Create(ctx context.Context, spec agentenv.SandboxSpec) (sb agentenv.Sandbox, err error) {
	defer recovered(&err, g.p, "create", spec.Name)
	return g.p.Create(ctx, spec)
}

func (g guarded) CreateNetwork(ctx context.Context, spec agentenv.NetworkSpec) (sb agentenv.Sandbox, err error) {
	defer recovered(&err, g.p, "create network", spec.Name)
	n, ok := g.p.(agentenv.Networker)
	if !ok {
		return agentenv.Sandbox{}, fmt.Errorf("%s has no private networks: %w", g.p.Name(), agentenv.ErrInvalid)
	}
	return n.CreateNetwork(ctx, spec)
}

func (g guarded) Get(ctx context.Context, id string) (sb agentenv.Sandbox, err error) {
	defer recovered(&err, g.p, "get", id)
	return g.p.Get(ctx, id)
}

func (g guarded) Terminate(ctx context.Context, id string) (err error) {
	defer recovered(&err, g.p, "terminate", id)
	return g.p.Terminate(ctx, id)
}

func (g guarded) List(ctx context.Context, labels map[string]string) (sbs []agentenv.Sandbox, err error) {
	defer recovered(&err, g.p, "list", "")
	return g.p.List(ctx, labels)
}

// guardedLedger wraps a ledger so that a panic in a call becomes an error; the records stay
// where they were, and gc reconciles them by label.
type guardedLedger struct{ agentenv.Ledger }

func ledgerRecovered(err *error, op, id string) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("ledger: %s %s panicked: %v", op, id, r)
	}
}

func (g guardedLedger) Put(ctx context.Context, r agentenv.Record) (err error) {
	defer ledgerRecovered(&err, "put", r.ID)
	return g.Ledger.Put(ctx, r)
}

func (g guardedLedger) Get(ctx context.Context, id string) (r agentenv.Record, err error) {
	defer ledgerRecovered(&err, "get", id)
	return g.Ledger.Get(ctx, id)
}

func (g guardedLedger) Update(ctx context.Context, id string, fn func(*agentenv.Record) error) (r agentenv.Record, err error) {
	defer ledgerRecovered(&err, "update", id)
	return g.Ledger.Update(ctx, id, fn)
}

func (g guardedLedger) List(ctx context.Context, f agentenv.Filter) (rs []agentenv.Record, err error) {
	defer ledgerRecovered(&err, "list", "")
	return g.Ledger.List(ctx, f)
}

func (g guardedLedger) RenewLease(ctx context.Context, o agentenv.Owner, until time.Time) (n int, err error) {
	defer ledgerRecovered(&err, "renew lease", o.String())
	return g.Ledger.RenewLease(ctx, o, until)
}

func (g guarded) CreateVM(ctx context.Context, spec agentenv.SandboxSpec) (sb agentenv.Sandbox, err error) {
	defer recovered(&err, g.p, "create vm", spec.Name)
	h, ok := g.p.(agentenv.VMHost)
	if !ok {
		return agentenv.Sandbox{}, fmt.Errorf("%s cannot host VMs: %w", g.p.Name(), agentenv.ErrInvalid)
	}
	return h.CreateVM(ctx, spec)
}
