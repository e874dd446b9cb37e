package lifecycle

import (
	"context"
	"fmt"
	"time"

	"github.com/agentenv/agentenv"
)

// guard returns p with a panic in any of its calls, of an ability too, turned into an error: a
// faulty provider must not take down the process that holds the records of everything it made.
func guard(p agentenv.Provider) agentenv.Provider {
	name := p.Name()
	return agentenv.Intercept(p, func(ctx context.Context, op string, call func(context.Context) error) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("%s: %s panicked: %v", name, op, r)
			}
		}()
		return call(ctx)
	})
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

func (g guardedLedger) Insert(ctx context.Context, r agentenv.Record) (err error) {
	defer ledgerRecovered(&err, "insert", r.ID)
	return g.Ledger.Insert(ctx, r)
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
