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
// whatever it had not reached is reported as left (the records stay for gc). Containers added to
// a VM's stack (in_vm records) go first, removed from their VM; then sandboxes and VMs,
// concurrently; networks, images and volumes after them. A sandbox that had already finished or disappeared
// counts as already gone, never as a failure. The error is non-nil when the receipt is not clean.
func (m *Manager) Teardown(ctx context.Context, recs []agentenv.Record) (agentenv.Receipt, error) {
	rc := agentenv.Receipt{Started: m.cfg.Now().UTC()}
	var inVM, first, last []agentenv.Record
	for _, r := range recs {
		switch r.Kind {
		case agentenv.KindInVM:
			inVM = append(inVM, r)
		case agentenv.KindNetwork, agentenv.KindImage, agentenv.KindVolume:
			last = append(last, r)
		default:
			first = append(first, r)
		}
	}
	rc.Items = append(rc.Items, m.teardownInVM(ctx, inVM)...)
	rc.Items = append(rc.Items, m.teardownPhase(ctx, first)...)
	rc.Items = append(rc.Items, m.teardownPhase(ctx, last)...)
	rc.Finished = m.cfg.Now().UTC()
	if !rc.Clean() {
		return rc, fmt.Errorf("teardown: %d of %d not confirmed down", len(rc.Items)-rc.Count(agentenv.OutcomeTerminated)-rc.Count(agentenv.OutcomeAlreadyGone), len(rc.Items))
	}
	return rc, nil
}

// TeardownIDs tears down the records with the given ids; see Teardown. Like the teardown, the
// records are read on a cleanup context: a teardown is most often asked for by a caller that
// was just cancelled.
func (m *Manager) TeardownIDs(ctx context.Context, ids ...string) (agentenv.Receipt, error) {
	cctx, cancel := cleanup.Context(ctx, m.cfg.CallTimeout)
	defer cancel()
	recs := make([]agentenv.Record, 0, len(ids))
	for _, id := range ids {
		r, err := m.cfg.Ledger.Get(cctx, id)
		if err != nil {
			return agentenv.Receipt{}, fmt.Errorf("teardown %s: %w", id, err)
		}
		recs = append(recs, r)
	}
	return m.Teardown(ctx, recs)
}

// teardownPhase terminates recs concurrently, then verifies them together. Records that share a
// provider and a deployment (or a run) are listed once for the whole phase rather than once each,
// before and after: a deployment's teardown costs a few listings, not a few per sandbox.
func (m *Manager) teardownPhase(ctx context.Context, recs []agentenv.Record) []agentenv.ReceiptItem {
	items := make([]agentenv.ReceiptItem, len(recs))
	todo := make([]bool, len(recs)) // terminated without error: to verify
	running := make([]bool, len(recs))
	sel := sharedSelector(recs)
	var before map[string][]agentenv.Sandbox
	if sel != nil {
		cctx, cancel := cleanup.Context(ctx, m.cfg.TerminateTimeout)
		before, _ = m.listGrouped(cctx, recs[0].Provider, sel) // nil on error: each lists its own
		cancel()
	}
	var wg sync.WaitGroup
	for i, r := range recs {
		wg.Go(func() {
			var known []agentenv.Sandbox
			var ok bool
			if before != nil {
				known, ok = before[r.ID], true
			}
			items[i], running[i], todo[i] = m.terminateOne(ctx, r, known, ok)
		})
	}
	wg.Wait()

	var verify []int
	for i := range recs {
		if todo[i] {
			verify = append(verify, i)
		}
	}
	if len(verify) == 0 {
		return items
	}
	cctx, cancel := cleanup.Context(ctx, m.cfg.TerminateTimeout)
	defer cancel()
	still := m.stillListed(cctx, recs, verify, sel)
	for _, i := range verify {
		r := recs[i]
		it := &items[i]
		switch l := still[r.ID]; {
		case l.err != nil:
			it.Outcome, it.Reason = agentenv.OutcomeFailed, "verify: "+l.err.Error()
			m.finish(ctx, r.ID, agentenv.StateTerminateFailed, it.Reason)
		case len(l.sbs) > 0:
			it.Outcome, it.Reason = agentenv.OutcomeStillListed, fmt.Sprintf("%s still lists %s after terminate", r.Provider, l.sbs[0].ID)
			m.log.Warn("sandbox may still be up", "record_id", r.ID, "provider", r.Provider, "sandbox_id", l.sbs[0].ID)
			m.finish(ctx, r.ID, agentenv.StateTerminateFailed, it.Reason)
		default:
			it.Outcome = agentenv.OutcomeTerminated
			if !running[i] {
				it.Outcome = agentenv.OutcomeAlreadyGone
			}
			m.finish(ctx, r.ID, agentenv.StateGone, "")
		}
	}
	return items
}

// sharedSelector returns the labels that select every one of recs on their one provider (their
// deployment, else their run), or nil when they share none.
func sharedSelector(recs []agentenv.Record) map[string]string {
	if len(recs) < 2 {
		return nil
	}
	dep, run, prov := recs[0].Deployment, recs[0].Run, recs[0].Provider
	for _, r := range recs[1:] {
		if r.Provider != prov {
			return nil
		}
		if r.Deployment != dep {
			dep = ""
		}
		if r.Run != run {
			run = ""
		}
	}
	switch {
	case dep != "":
		return map[string]string{agentenv.LabelDeployment: dep}
	case run != "":
		return map[string]string{agentenv.LabelRun: run}
	}
	return nil
}

// listGrouped lists provider name by sel and groups the result by record.
func (m *Manager) listGrouped(ctx context.Context, name string, sel map[string]string) (map[string][]agentenv.Sandbox, error) {
	b, err := m.backend(name)
	if err != nil {
		return nil, err
	}
	sbs, err := b.p.List(ctx, sel)
	if err != nil {
		return nil, err
	}
	by := map[string][]agentenv.Sandbox{}
	for _, sb := range sbs {
		id := sb.Labels[agentenv.LabelRecord]
		by[id] = append(by[id], sb)
	}
	return by, nil
}

// terminateOne terminates what r's provider lists under r (known, when the phase listed it
// already). It returns r's receipt item so far, whether anything of r was running, and whether
// r is left to verify; when it is not, the item is final and the record updated.
func (m *Manager) terminateOne(ctx context.Context, r agentenv.Record, known []agentenv.Sandbox, listed bool) (it agentenv.ReceiptItem, running, verify bool) {
	it = agentenv.ReceiptItem{Record: r.ID, SandboxID: r.SandboxID, Provider: r.Provider, Kind: r.Kind, Role: r.Role}
	if r.State == agentenv.StateGone {
		it.Outcome = agentenv.OutcomeAlreadyGone
		return it, false, false
	}
	if cleanup.Stopped(ctx) {
		it.Outcome, it.Reason = agentenv.OutcomeLeft, "teardown stopped before reaching it"
		return it, false, false
	}
	b, err := m.backend(r.Provider)
	if err != nil {
		it.Outcome, it.Reason = agentenv.OutcomeFailed, err.Error()
		m.finish(ctx, r.ID, agentenv.StateTerminateFailed, err.Error())
		return it, false, false
	}
	cctx, cancel := cleanup.Context(ctx, m.cfg.TerminateTimeout)
	defer cancel()
	if _, err := m.cfg.Ledger.Update(cctx, r.ID, func(x *agentenv.Record) error {
		x.State = agentenv.StateTerminating
		return nil
	}); err != nil {
		m.log.Warn("ledger update failed during teardown", "record_id", r.ID, "err", err)
	}

	before := known
	if !listed {
		if before, err = b.p.List(cctx, map[string]string{agentenv.LabelRecord: r.ID}); err != nil {
			// Cannot tell whether it exists: terminate by the id we know, if any.
			before = nil
			if r.SandboxID != "" {
				before = []agentenv.Sandbox{{ID: r.SandboxID, State: agentenv.SandboxRunning}}
			}
		}
	}
	var errs []error
	for _, sb := range before {
		if sb.State != agentenv.SandboxExited {
			running = true
		}
		if err := b.p.Terminate(cctx, sb.ID); err != nil {
			errs = append(errs, err)
		}
	}
	switch {
	case cleanup.Stopped(ctx) && len(errs) > 0:
		it.Outcome, it.Reason = agentenv.OutcomeLeft, "teardown stopped while terminating"
		return it, running, false
	case len(errs) > 0:
		err := errors.Join(errs...)
		it.Outcome, it.Reason = agentenv.OutcomeFailed, err.Error()
		m.log.Warn("sandbox was not terminated", "record_id", r.ID, "provider", r.Provider, "err", err)
		m.finish(ctx, r.ID, agentenv.StateTerminateFailed, err.Error())
		return it, running, false
	}
	return it, running, true
}

// verifyWait bounds how long a teardown waits for a terminated sandbox to leave the provider's
// listing: backends finish a removal asynchronously (a container being removed, a pod
// terminating), and "may still be up" must be said only of what really stays.
const verifyWait = 5 * time.Second

// listing is what a provider lists under one record, or why it could not list it.
type listing struct {
	sbs []agentenv.Sandbox
	err error
}

// stillListed lists recs[idx] until their provider no longer lists any of them or verifyWait
// passes, and returns, per record, what is still listed or the listing's error; records listed
// no more are absent. With sel, one listing covers them all.
func (m *Manager) stillListed(ctx context.Context, recs []agentenv.Record, idx []int, sel map[string]string) map[string]listing {
	deadline := time.Now().Add(verifyWait)
	for wait := 20 * time.Millisecond; ; wait = min(2*wait, 500*time.Millisecond) {
		out := map[string]listing{}
		var mu sync.Mutex
		note := func(id string, l listing) {
			if l.err != nil || len(l.sbs) > 0 {
				mu.Lock()
				out[id] = l
				mu.Unlock()
			}
		}
		if sel != nil {
			by, err := m.listGrouped(ctx, recs[idx[0]].Provider, sel)
			for _, i := range idx {
				note(recs[i].ID, listing{by[recs[i].ID], err})
			}
		} else {
			var wg sync.WaitGroup
			for _, i := range idx {
				wg.Go(func() {
					by, err := m.listGrouped(ctx, recs[i].Provider, map[string]string{agentenv.LabelRecord: recs[i].ID})
					note(recs[i].ID, listing{by[recs[i].ID], err})
				})
			}
			wg.Wait()
		}
		if len(out) == 0 || time.Now().After(deadline) {
			return out
		}
		select {
		case <-ctx.Done():
			return out
		case <-time.After(wait):
		}
	}
}
