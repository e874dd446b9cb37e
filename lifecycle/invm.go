package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
)

// AddToVM starts req.Spec as the container req.Spec.Name of the stack of the VM with record id
// vm, a VM this caller did not make (a deploy --into it), under a record of its own: kind
// in_vm, id agentenv.InVMRecordID(vm, name), naming the VM in Attrs. The record is claimed
// before the start, by one insert of that id: a name that a record not yet gone holds is
// refused with an error wrapping ErrConflict that names the holder's deployment, and of
// concurrent claims of one name, by any processes sharing the ledger, exactly one wins. Like
// Create, the start runs on a detached, bounded context; a failed or cancelled start is
// removed from the VM (waiting up to the reclaim wait for it) and its record ends gone, or
// abandoned for gc. Teardown and gc remove the container, and only it, by its record.
func (m *Manager) AddToVM(ctx context.Context, vm string, req CreateRequest) (agentenv.Record, agentenv.Sandbox, error) {
	b, host, err := m.target(ctx, vm)
	if err != nil {
		return agentenv.Record{}, agentenv.Sandbox{}, err
	}
	if b.a.VMHost == nil {
		return agentenv.Record{}, agentenv.Sandbox{}, lacks(b, "host a VM stack")
	}
	name := req.Spec.Name
	if name == "" {
		return agentenv.Record{}, agentenv.Sandbox{}, fmt.Errorf("add to vm %s: no container name: %w", vm, agentenv.ErrInvalid)
	}
	rec, err := m.claimInVM(ctx, host, name, req)
	if err != nil {
		return agentenv.Record{}, agentenv.Sandbox{}, err
	}

	type result struct {
		sb  agentenv.Sandbox
		err error
	}
	var (
		mu        sync.Mutex
		abandoned bool
	)
	ch := make(chan result, 1)
	m.calls.Add(1)
	go func() {
		defer m.calls.Done()
		cctx, cancel := cleanup.Detached(ctx, m.cfg.CreateTimeout)
		defer cancel()
		sb, err := b.a.VMHost.RunInVM(cctx, host.SandboxID, req.Spec)
		mu.Lock()
		late := abandoned
		mu.Unlock()
		if late {
			// Its caller gave up on it: undo it here, or leave the record abandoned for gc.
			m.undoInVM(ctx, b, host, rec, err)
			return
		}
		ch <- result{sb, err}
	}()
	select {
	case res := <-ch:
		if res.err != nil {
			m.undoInVM(ctx, b, host, rec, res.err)
			return rec, agentenv.Sandbox{}, fmt.Errorf("start %s in %s: %w", name, vm, res.err)
		}
		upd, err := m.cfg.Ledger.Update(ctx, rec.ID, func(r *agentenv.Record) error {
			r.State, r.SandboxID = agentenv.StateLive, name
			for port, addr := range res.sb.Endpoints {
				r.Attrs["endpoint."+port] = addr
			}
			return nil
		})
		if err == nil && ctx.Err() != nil {
			err = context.Cause(ctx)
		}
		if err != nil {
			m.undoInVM(ctx, b, host, rec, nil)
			return rec, agentenv.Sandbox{}, fmt.Errorf("start %s in %s: %w", name, vm, err)
		}
		return upd, res.sb, nil
	case <-ctx.Done():
	}
	m.log.Info("start in a vm cancelled; waiting for it to finish so it can be undone",
		"vm", vm, "record_id", rec.ID, "wait", m.cfg.ReclaimWait)
	wctx, cancel := cleanup.Context(ctx, m.cfg.ReclaimWait)
	defer cancel()
	select {
	case res := <-ch:
		m.undoInVM(ctx, b, host, rec, res.err)
	case <-wctx.Done():
		mu.Lock()
		abandoned = true
		mu.Unlock()
		select {
		case res := <-ch: // it finished in the instant we gave up
			m.undoInVM(ctx, b, host, rec, res.err)
		default:
			m.log.Warn("gave up waiting for a cancelled start in a vm; the record stays for gc", "vm", vm, "record_id", rec.ID)
			m.finish(ctx, rec.ID, agentenv.StateAbandoned, "start in the vm still pending when its caller gave up")
		}
	}
	return rec, agentenv.Sandbox{}, fmt.Errorf("start %s in %s: %w", name, vm, context.Cause(ctx))
}

// claimInVM writes the creating record of container name in the VM host, claimed (see claim):
// a record of that id that is gone (an earlier container of that name, removed) is replaced; one
// not yet gone keeps its name.
func (m *Manager) claimInVM(ctx context.Context, host agentenv.Record, name string, req CreateRequest) (agentenv.Record, error) {
	if err := ctx.Err(); err != nil {
		return agentenv.Record{}, fmt.Errorf("add to vm %s: %w", host.ID, err)
	}
	ttl := req.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	now := m.cfg.Now().UTC()
	attrs := maps.Clone(req.Attrs)
	if attrs == nil {
		attrs = map[string]string{}
	}
	attrs[agentenv.AttrVM], attrs[agentenv.AttrInVMName] = host.ID, name
	rec := agentenv.Record{
		ID: agentenv.InVMRecordID(host.ID, name), Kind: agentenv.KindInVM, Provider: host.Provider, Image: req.Spec.Image,
		Run: req.Run, Deployment: req.Deployment, Role: req.Role,
		State: agentenv.StateCreating, Owner: m.cfg.Owner, LeaseUntil: now.Add(m.cfg.Lease),
		Expires: now.Add(ttl).Truncate(time.Second), Attrs: attrs, Created: now,
	}
	m.keepAlive()
	err := m.claim(ctx, rec, func(r agentenv.Record) error {
		return fmt.Errorf("add to vm %s: %s is already in that vm, for deployment %s (record %s, %s): %w",
			host.ID, name, r.Deployment, r.ID, r.State, agentenv.ErrConflict)
	})
	if err != nil {
		if errors.Is(err, agentenv.ErrConflict) {
			return agentenv.Record{}, err
		}
		return agentenv.Record{}, fmt.Errorf("add to vm %s: record intent: %w", host.ID, err)
	}
	return rec, nil
}

// undoInVM removes what a start of rec in the VM host may have made, and closes rec: gone, or
// terminate_failed for gc to retry.
func (m *Manager) undoInVM(ctx context.Context, b *backend, host, rec agentenv.Record, startErr error) {
	if err := m.removeFromVM(ctx, b, host, rec.Attrs[agentenv.AttrInVMName]); err != nil {
		m.log.Warn("container was not removed from the vm after a failed or cancelled start; gc will retry",
			"record_id", rec.ID, "vm", host.ID, "err", err)
		m.finish(ctx, rec.ID, agentenv.StateTerminateFailed, err.Error())
		return
	}
	msg := ""
	if startErr != nil {
		msg = startErr.Error()
	}
	m.finish(ctx, rec.ID, agentenv.StateGone, msg)
}

// teardownInVM removes the containers of in_vm records from their VMs, concurrently. A
// container whose VM is gone (its record gone, or the VM no longer there) is already gone. The
// host's RemoveFromVM is the check: it returns once the backend no longer has the container (a
// forced removal), and one that is gone counts as removed.
func (m *Manager) teardownInVM(ctx context.Context, recs []agentenv.Record) []agentenv.ReceiptItem {
	items := make([]agentenv.ReceiptItem, len(recs))
	var wg sync.WaitGroup
	for i, r := range recs {
		wg.Go(func() { items[i] = m.removeInVM(ctx, r) })
	}
	wg.Wait()
	return items
}

func (m *Manager) removeInVM(ctx context.Context, r agentenv.Record) agentenv.ReceiptItem {
	it := agentenv.ReceiptItem{Record: r.ID, SandboxID: r.SandboxID, Provider: r.Provider, Kind: r.Kind, Role: r.Role}
	if r.State == agentenv.StateGone {
		it.Outcome = agentenv.OutcomeAlreadyGone
		return it
	}
	if cleanup.Stopped(ctx) {
		it.Outcome, it.Reason = agentenv.OutcomeLeft, "teardown stopped before reaching it"
		return it
	}
	cctx, cancel := cleanup.Context(ctx, m.cfg.TerminateTimeout)
	defer cancel()
	fail := func(err error) agentenv.ReceiptItem {
		it.Outcome, it.Reason = agentenv.OutcomeFailed, err.Error()
		m.log.Warn("container was not removed from its vm", "record_id", r.ID, "err", err)
		m.finish(ctx, r.ID, agentenv.StateTerminateFailed, err.Error())
		return it
	}
	host, err := m.cfg.Ledger.Get(cctx, r.Attrs[agentenv.AttrVM])
	switch {
	case errors.Is(err, agentenv.ErrNotFound), err == nil && (host.State == agentenv.StateGone || host.SandboxID == ""):
		it.Outcome, it.Reason = agentenv.OutcomeAlreadyGone, "its vm is gone"
		m.finish(ctx, r.ID, agentenv.StateGone, "")
		return it
	case err != nil:
		return fail(fmt.Errorf("its vm %s: %w", r.Attrs[agentenv.AttrVM], err))
	}
	b, err := m.backend(host.Provider)
	if err != nil {
		return fail(err)
	}
	if b.a.VMHost == nil {
		return fail(lacks(b, "host a VM stack"))
	}
	if _, err := m.cfg.Ledger.Update(cctx, r.ID, func(x *agentenv.Record) error {
		x.State = agentenv.StateTerminating
		return nil
	}); err != nil {
		m.log.Warn("ledger update failed during teardown", "record_id", r.ID, "err", err)
	}
	if err := b.a.VMHost.RemoveFromVM(cctx, host.SandboxID, r.Attrs[agentenv.AttrInVMName]); err != nil {
		if cleanup.Stopped(ctx) {
			it.Outcome, it.Reason = agentenv.OutcomeLeft, "teardown stopped while removing it"
			return it
		}
		return fail(err)
	}
	it.Outcome = agentenv.OutcomeTerminated
	m.finish(ctx, r.ID, agentenv.StateGone, "")
	return it
}
