package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
)

// Teardown terminates the sandboxes of recs by id, with no live handle, and returns a receipt
// verified by listing the providers again. It runs on a context detached from ctx's
// cancellation, so a cancelled caller still tears down; only ctx's hard stop cuts it short, and
// whatever it had not reached is reported as left (the records stay for gc). Sandboxes and VMs go
// first, concurrently; networks after them. A sandbox that had already finished or disappeared
// counts as already gone, never as a failure. The error is non-nil when the receipt is not clean.
func (m *Manager) Teardown(ctx context.Context, recs []agentenv.Record) (agentenv.Receipt, error) {
	rc := agentenv.Receipt{Started: m.cfg.Now().UTC()}
	var first, last []agentenv.Record
	for _, r := range recs {
		if r.Kind == agentenv.KindNetwork {
			last = append(last, r)
		} else {
			first = append(first, r)
		}
	}
	rc.Items = append(rc.Items, m.teardownPhase(ctx, first)...)
	rc.Items = append(rc.Items, m.teardownPhase(ctx, last)...)
	rc.Finished = m.cfg.Now().UTC()
	if !rc.Clean() {
		return rc, fmt.Errorf("teardown: %d of %d not confirmed down", len(rc.Items)-rc.Count(agentenv.OutcomeTerminated)-rc.Count(agentenv.OutcomeAlreadyGone), len(rc.Items))
	}
	return rc, nil
}

// TeardownIDs tears down the records with the given ids; see Teardown.
func (m *Manager) TeardownIDs(ctx context.Context, ids ...string) (agentenv.Receipt, error) {
	recs := make([]agentenv.Record, 0, len(ids))
	for _, id := range ids {
		r, err := m.cfg.Ledger.Get(ctx, id)
		if err != nil {
			return agentenv.Receipt{}, fmt.Errorf("teardown %s: %w", id, err)
		}
		recs = append(recs, r)
	}
	return m.Teardown(ctx, recs)
}

func (m *Manager) teardownPhase(ctx context.Context, recs []agentenv.Record) []agentenv.ReceiptItem {
	items := make([]agentenv.ReceiptItem, len(recs))
	var wg sync.WaitGroup
	for i, r := range recs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			items[i] = m.teardownOne(ctx, r)
		}()
	}
	wg.Wait()
	return items
}

func (m *Manager) teardownOne(ctx context.Context, r agentenv.Record) agentenv.ReceiptItem {
	it := agentenv.ReceiptItem{Record: r.ID, SandboxID: r.SandboxID, Provider: r.Provider, Kind: r.Kind, Role: r.Role}
	if r.State == agentenv.StateGone {
		it.Outcome = agentenv.OutcomeAlreadyGone
		return it
	}
	if cleanup.Stopped(ctx) {
		it.Outcome, it.Reason = agentenv.OutcomeLeft, "teardown stopped before reaching it"
		return it
	}
	p, err := m.guardedProvider(r.Provider)
	if err != nil {
		it.Outcome, it.Reason = agentenv.OutcomeFailed, err.Error()
		m.finish(ctx, r.ID, agentenv.StateTerminateFailed, err.Error())
		return it
	}
	cctx, cancel := cleanup.Context(ctx, m.cfg.TerminateTimeout)
	defer cancel()
	if _, err := m.cfg.Ledger.Update(cctx, r.ID, func(x *agentenv.Record) error {
		x.State = agentenv.StateTerminating
		return nil
	}); err != nil {
		m.log.Warn("ledger update failed during teardown", "record_id", r.ID, "err", err)
	}

	before, err := p.List(cctx, map[string]string{agentenv.LabelRecord: r.ID})
	if err != nil {
		// Cannot tell whether it exists: terminate by the id we know, if any.
		before = nil
		if r.SandboxID != "" {
			before = []agentenv.Sandbox{{ID: r.SandboxID, State: agentenv.SandboxRunning}}
		}
	}
	running := false
	var errs []error
	for _, sb := range before {
		if sb.State != agentenv.SandboxExited {
			running = true
		}
		if err := p.Terminate(cctx, sb.ID); err != nil {
			errs = append(errs, err)
		}
	}
	switch {
	case cleanup.Stopped(ctx) && len(errs) > 0:
		it.Outcome, it.Reason = agentenv.OutcomeLeft, "teardown stopped while terminating"
		return it
	case len(errs) > 0:
		err := errors.Join(errs...)
		it.Outcome, it.Reason = agentenv.OutcomeFailed, err.Error()
		m.log.Warn("sandbox was not terminated", "record_id", r.ID, "provider", r.Provider, "err", err)
		m.finish(ctx, r.ID, agentenv.StateTerminateFailed, err.Error())
		return it
	}

	after, err := m.stillListed(cctx, p, r.ID)
	switch {
	case err != nil:
		it.Outcome, it.Reason = agentenv.OutcomeFailed, "verify: "+err.Error()
		m.finish(ctx, r.ID, agentenv.StateTerminateFailed, it.Reason)
		return it
	case len(after) > 0:
		it.Outcome, it.Reason = agentenv.OutcomeStillListed, fmt.Sprintf("%s still lists %s after terminate", r.Provider, after[0].ID)
		m.log.Warn("sandbox may still be up", "record_id", r.ID, "provider", r.Provider, "sandbox_id", after[0].ID)
		m.finish(ctx, r.ID, agentenv.StateTerminateFailed, it.Reason)
		return it
	}
	it.Outcome = agentenv.OutcomeTerminated
	if !running {
		it.Outcome = agentenv.OutcomeAlreadyGone
	}
	m.finish(ctx, r.ID, agentenv.StateGone, "")
	return it
}

// verifyWait bounds how long a teardown waits for a terminated sandbox to leave the provider's
// listing: backends finish a removal asynchronously (a container being removed, a pod
// terminating), and "may still be up" must be said only of what really stays.
const verifyWait = 5 * time.Second

// stillListed lists record id until the provider no longer lists it or verifyWait passes, and
// returns the last listing.
func (m *Manager) stillListed(ctx context.Context, p guarded, id string) ([]agentenv.Sandbox, error) {
	deadline := time.Now().Add(verifyWait)
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		after, err := p.List(ctx, map[string]string{agentenv.LabelRecord: id})
		if err != nil || len(after) == 0 || time.Now().After(deadline) {
			return after, err
		}
		select {
		case <-ctx.Done():
			return after, nil
		case <-time.After(wait):
		}
	}
}
