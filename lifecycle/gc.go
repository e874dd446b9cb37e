package lifecycle

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/agentenv/agentenv"
)

// GCOptions tunes a gc pass.
type GCOptions struct {
	DryRun bool // report what would be done, change nothing
}

// GCAction is one thing gc did (or would do) to a record or an unrecorded sandbox.
type GCAction struct {
	Record   string           `json:"record"`
	Provider string           `json:"provider"`
	Reason   string           `json:"reason"`  // why it was collected
	Outcome  agentenv.Outcome `json:"outcome"` // empty on a dry run
	Detail   string           `json:"detail,omitempty"`
}

// GCReport is what a gc pass found and did.
type GCReport struct {
	Actions []GCAction `json:"actions"`
	Kept    int        `json:"kept"` // records left alone: owned by a live process, or not expired
	Errors  []string   `json:"errors,omitempty"`
	// Unlisted names the providers gc could not list although no record of this ledger is up
	// on them (an engine that is not running, a cloud without credentials): not an error, but
	// their expired unrecorded sandboxes were not looked for.
	Unlisted []string `json:"unlisted,omitempty"`
	// InFlight names records whose creator died while its create may still be running in the
	// backend: nothing is listed for them yet (or, for an image build, what was listed has been
	// removed), and they are young enough that something may still appear. They stay
	// abandoned; a later gc collects what appears, or closes them once they are older than the
	// create timeout.
	InFlight []string `json:"in_flight,omitempty"`
}

// Clean reports whether every collected sandbox is down (true on a dry run with no errors).
func (r GCReport) Clean() bool {
	if len(r.Errors) > 0 {
		return false
	}
	for _, a := range r.Actions {
		if a.Outcome != "" && !a.Outcome.Down() {
			return false
		}
	}
	return true
}

// GC joins the ledger with each provider's listing and terminates what nobody owns any more:
// records whose owner process is dead (same host) or whose lease ran out (any host), records whose
// expiry passed, terminate_failed records (retried), abandoned and creating records (resolved by
// listing their label), and listed sandboxes whose record is gone or expired. Records owned by a
// live process and not expired are never touched, so gc is safe to run at any time, also while
// other runs are live. Sandboxes that carry our labels but no record of this ledger are collected
// only once their expiry label has passed: they may belong to another ledger.
func (m *Manager) GC(ctx context.Context, opts GCOptions) (GCReport, error) {
	v, err := m.observe(ctx, opts)
	if err != nil {
		return GCReport{}, err
	}
	return m.carryOut(ctx, planGC(v), v.Now), nil
}

// observe gathers what a gc pass decides from (gcView), and changes nothing: the records not
// gone; whether the processes of their owners on this host run; for each record gc would
// collect whose create may still run, its provider's listing under its label; each provider's
// whole listing; and the records, looked up by id, of listed sandboxes labelled with a record
// not listed. It fails only if the ledger cannot list records; a provider's failure to list is
// in the view.
func (m *Manager) observe(ctx context.Context, opts GCOptions) (gcView, error) {
	recs, err := m.cfg.Ledger.List(ctx, agentenv.Filter{States: agentenv.NotGone()})
	if err != nil {
		return gcView{}, fmt.Errorf("gc: list records: %w", err)
	}
	v := gcView{
		Opts: opts, Now: m.cfg.Now(), Self: m.cfg.Owner, CreateTimeout: m.cfg.CreateTimeout, Records: recs,
		Alive: map[agentenv.Owner]bool{}, ByLabel: map[string]gcListing{}, Listings: map[string]gcListing{},
		Lookups: map[string]agentenv.Record{},
	}
	known := map[string]bool{}
	for _, r := range recs {
		known[r.ID] = true
		if o := r.Owner; !o.IsZero() && o != v.Self && o.Host == v.Self.Host {
			if _, ok := v.Alive[o]; !ok {
				v.Alive[o] = ProcessAlive(o)
			}
		}
	}
	for _, r := range recs {
		if v.collectReason(r) == "" || !mayBeInFlight(r, v.Now, v.CreateTimeout) {
			continue
		}
		if b, ok := m.backends[r.Provider]; ok {
			listed, err := b.p.List(ctx, map[string]string{agentenv.LabelRecord: r.ID})
			v.ByLabel[r.ID] = gcListing{Sandboxes: listed, Err: err}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(m.backends)) {
		listed, err := m.backends[name].p.List(ctx, nil)
		v.Listings[name] = gcListing{Sandboxes: listed, Err: err}
		if err != nil {
			continue
		}
		for _, sb := range listed {
			id := sb.Labels[agentenv.LabelRecord]
			if id == "" || known[id] {
				continue
			}
			known[id] = true
			if r, err := m.cfg.Ledger.Get(ctx, id); err == nil {
				v.Lookups[id] = r
			}
		}
	}
	return v, nil
}

// carryOut does what plan p says and reports it: it removes what image builds in flight made
// and marks creating records in flight abandoned; on a dry run it stops there (p then holds no
// such work) and reports what it would collect. Otherwise it tears down the records to collect,
// terminates the foreign sandboxes by provider id, and closes the deployments that have nothing
// up any more (reconcileDeployments, as of now).
func (m *Manager) carryOut(ctx context.Context, p gcPlan, now time.Time) GCReport {
	rep := GCReport{Kept: p.Kept, Unlisted: p.Unlisted, Errors: p.Errors}
	for _, f := range p.InFlight {
		m.holdInFlight(ctx, f)
		rep.InFlight = append(rep.InFlight, f.Record.ID)
	}
	if p.DryRun {
		for _, it := range append(slices.Clip(p.Collect), p.Foreign...) {
			rep.Actions = append(rep.Actions, GCAction{Record: it.Record.ID, Provider: it.Record.Provider, Reason: it.Reason})
		}
		return rep
	}
	reasons := map[string]string{}
	var collect []agentenv.Record
	for _, it := range p.Collect {
		collect = append(collect, it.Record)
		reasons[it.Record.ID] = it.Reason
	}
	rc, _ := m.Teardown(ctx, collect)
	for _, it := range p.Foreign {
		rep.Actions = append(rep.Actions, m.collectForeign(ctx, it.Record, it.Reason))
	}
	for _, it := range rc.Items {
		rep.Actions = append(rep.Actions, GCAction{Record: it.Record, Provider: it.Provider, Reason: reasons[it.Record], Outcome: it.Outcome, Detail: it.Reason})
	}
	if err := m.reconcileDeployments(ctx, now); err != nil {
		rep.Errors = append(rep.Errors, err.Error())
	}
	return rep
}

// holdInFlight does what gc does to a record it leaves in flight: it terminates what f says an
// image build made so far (a failure is logged; the next gc retries) and marks the record
// abandoned if f says so.
func (m *Manager) holdInFlight(ctx context.Context, f gcInFlight) {
	for _, sb := range f.Remove {
		b, err := m.backend(f.Record.Provider)
		if err == nil {
			err = b.p.Terminate(ctx, sb.ID)
		}
		if err != nil {
			m.log.Warn("gc: remove what an image build in flight made so far; the next gc retries", "record_id", f.Record.ID, "err", err)
		}
	}
	if f.Abandon {
		m.finish(ctx, f.Record.ID, agentenv.StateAbandoned, "its creator died with the create in flight")
	}
}

// reconcileDeployments closes the documents of deployments that have nothing up any more: one
// whose deploying process died is failed, a live one whose sandboxes are all gone is torn down.
// A deployment whose deploying process still runs is left alone, even with no record yet.
func (m *Manager) reconcileDeployments(ctx context.Context, now time.Time) error {
	docs, err := m.cfg.Ledger.Deployments().List(ctx, agentenv.DocStates(agentenv.DeploymentDeploying, agentenv.DeploymentLive), 0)
	if err != nil {
		return fmt.Errorf("gc: list deployments: %w", err)
	}
	for _, d := range docs {
		if d.State == "deploying" && !d.Owner.IsZero() && m.ownerAlive(d.Owner, d.Updated.Add(m.cfg.Lease), now) {
			continue
		}
		recs, err := m.cfg.Ledger.List(ctx, agentenv.Filter{Deployment: d.ID})
		if err != nil {
			return fmt.Errorf("gc: list records of %s: %w", d.ID, err)
		}
		up := false
		for _, r := range recs {
			up = up || r.State != agentenv.StateGone
		}
		if up {
			continue
		}
		if d.State == "deploying" {
			d.State, d.Error = "failed", "the deploying process ended before the deploy did; gc removed what it made"
		} else {
			d.State = "torn_down"
		}
		d.Owner, d.Updated = agentenv.Owner{}, now.UTC()
		if err := m.cfg.Ledger.Deployments().Put(ctx, d); err != nil {
			return fmt.Errorf("gc: close deployment %s: %w", d.ID, err)
		}
	}
	return nil
}

// ownerAlive reports whether owner still works: on this host, by its process; elsewhere, by
// its lease.
func (m *Manager) ownerAlive(o agentenv.Owner, leaseUntil, now time.Time) bool {
	if o == m.cfg.Owner {
		return true
	}
	if o.Host == m.cfg.Owner.Host {
		return ProcessAlive(o)
	}
	return now.Before(leaseUntil)
}

// collectForeign terminates a sandbox this ledger has no record of, by its provider id.
func (m *Manager) collectForeign(ctx context.Context, r agentenv.Record, reason string) GCAction {
	a := GCAction{Record: r.ID, Provider: r.Provider, Reason: reason}
	b, err := m.backend(r.Provider)
	if err == nil {
		err = b.p.Terminate(ctx, r.SandboxID)
	}
	if err != nil {
		a.Outcome, a.Detail = agentenv.OutcomeFailed, err.Error()
		return a
	}
	a.Outcome = agentenv.OutcomeTerminated
	return a
}
