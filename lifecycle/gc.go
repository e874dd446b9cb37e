package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sort"
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
	var rep GCReport
	recs, err := m.cfg.Ledger.List(ctx, agentenv.Filter{States: []agentenv.State{
		agentenv.StateCreating, agentenv.StateLive, agentenv.StateTerminating,
		agentenv.StateTerminateFailed, agentenv.StateAbandoned,
	}})
	if err != nil {
		return rep, fmt.Errorf("gc: list records: %w", err)
	}
	now := m.cfg.Now()
	var collect []agentenv.Record
	reasons := map[string]string{}
	for _, r := range recs {
		reason := m.collectReason(r, now)
		if reason == "" {
			rep.Kept++
			continue
		}
		if m.inFlight(ctx, r, now, opts.DryRun) {
			rep.InFlight = append(rep.InFlight, r.ID)
			continue
		}
		collect = append(collect, r)
		reasons[r.ID] = reason
	}

	// Sandboxes listed by a provider with no live record behind them: leaks of this ledger
	// (their record is gone) go through Teardown; foreign ones (no record here) by provider id.
	var foreign []agentenv.Record
	known := map[string]agentenv.Record{}
	for _, r := range recs {
		known[r.ID] = r
	}
	names := make([]string, 0, len(m.backends))
	for name := range m.backends {
		names = append(names, name)
	}
	sort.Strings(names)
	inUse := map[string]bool{}
	for _, r := range recs {
		inUse[r.Provider] = true
	}
	for _, name := range names {
		listed, err := m.backends[name].p.List(ctx, nil)
		if err != nil && !inUse[name] && errors.Is(err, agentenv.ErrUnavailable) {
			rep.Unlisted = append(rep.Unlisted, fmt.Sprintf("%s: %v", name, err))
			continue
		}
		if err != nil {
			rep.Errors = append(rep.Errors, fmt.Sprintf("list %s: %v", name, err))
			continue
		}
		for _, sb := range listed {
			id := sb.Labels[agentenv.LabelRecord]
			if _, ok := known[id]; ok || reasons[id] != "" {
				continue
			}
			r, isForeign, reason := m.orphan(ctx, name, sb, now)
			if reason == "" {
				continue
			}
			if isForeign {
				foreign = append(foreign, r)
			} else {
				collect = append(collect, r)
			}
			reasons[id] = reason
			known[id] = r
		}
	}

	if opts.DryRun {
		for _, r := range append(collect, foreign...) {
			rep.Actions = append(rep.Actions, GCAction{Record: r.ID, Provider: r.Provider, Reason: reasons[r.ID]})
		}
		return rep, nil
	}
	rc, _ := m.Teardown(ctx, collect)
	for _, r := range foreign {
		rep.Actions = append(rep.Actions, m.collectForeign(ctx, r, reasons[r.ID]))
	}
	for _, it := range rc.Items {
		rep.Actions = append(rep.Actions, GCAction{Record: it.Record, Provider: it.Provider, Reason: reasons[it.Record], Outcome: it.Outcome, Detail: it.Reason})
	}
	if err := m.reconcileDeployments(ctx, now); err != nil {
		rep.Errors = append(rep.Errors, err.Error())
	}
	return rep, nil
}

// reconcileDeployments closes the documents of deployments that have nothing up any more: one
// whose deploying process died is failed, a live one whose sandboxes are all gone is torn down.
// A deployment whose deploying process still runs is left alone, even with no record yet.
func (m *Manager) reconcileDeployments(ctx context.Context, now time.Time) error {
	docs, err := m.cfg.Ledger.Deployments().List(ctx, []string{"deploying", "live"}, 0)
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

// inFlight reports whether r's create may still be running in the backend after its creator
// died: r never became live and is younger than the create timeout, and nothing is listed under
// it yet, or it is an image. Collecting it now would close a record whose sandbox may appear a
// moment later. An image build goes on in the backend after its client is gone (an engine ends
// the step it is in, which makes one more image): what it made so far is removed now, and the
// record is watched until its create timeout. Such a record is marked abandoned (unless on a
// dry run, which removes nothing either).
func (m *Manager) inFlight(ctx context.Context, r agentenv.Record, now time.Time, dryRun bool) bool {
	if r.State != agentenv.StateCreating && r.State != agentenv.StateAbandoned {
		return false
	}
	if r.Kind == agentenv.KindInVM {
		// Not listed by label (it carries its VM's); its start ran in its creator's process,
		// which is gone, and the removal by name takes whatever that start made.
		return false
	}
	if now.Sub(r.Created) > m.cfg.CreateTimeout || (!r.Expires.IsZero() && now.After(r.Expires)) {
		return false
	}
	b, err := m.backend(r.Provider)
	if err != nil {
		return false
	}
	listed, err := b.p.List(ctx, map[string]string{agentenv.LabelRecord: r.ID})
	if err != nil || len(listed) > 0 && r.Kind != agentenv.KindImage {
		return false
	}
	if dryRun {
		return true
	}
	for _, sb := range listed {
		if err := b.p.Terminate(ctx, sb.ID); err != nil {
			m.log.Warn("gc: remove what an image build in flight made so far; the next gc retries", "record_id", r.ID, "err", err)
		}
	}
	if r.State == agentenv.StateCreating {
		m.finish(ctx, r.ID, agentenv.StateAbandoned, "its creator died with the create in flight")
	}
	return true
}

// collectReason says why gc should collect r, or "" to keep it. A record whose owner is
// another process that still works is kept whatever else is true of it, its expiry included:
// that process tears down what it made, and gc is safe to run beside it.
func (m *Manager) collectReason(r agentenv.Record, now time.Time) string {
	if !r.Owner.IsZero() && r.Owner != m.cfg.Owner && m.ownerAlive(r.Owner, r.LeaseUntil, now) {
		return ""
	}
	if !r.Expires.IsZero() && now.After(r.Expires) {
		return "expired"
	}
	if r.State == agentenv.StateTerminateFailed {
		return "retry failed terminate"
	}
	if r.State == agentenv.StateAbandoned {
		return "create outcome unknown"
	}
	if r.Owner.IsZero() {
		if r.State == agentenv.StateLive {
			return "" // handed to its expiry
		}
		return "no owner for a " + string(r.State) + " record"
	}
	if m.ownerAlive(r.Owner, r.LeaseUntil, now) {
		return ""
	}
	if r.Owner.Host == m.cfg.Owner.Host {
		return "owner process is dead"
	}
	return "owner lease expired"
}

// orphan says why gc should collect sandbox sb, listed by provider name with no active record
// ("" to leave it), and returns the record to collect it under: this ledger's gone record (a
// leak), or, for a sandbox this ledger has no record of (foreign), one made up from its labels.
func (m *Manager) orphan(ctx context.Context, name string, sb agentenv.Sandbox, now time.Time) (r agentenv.Record, foreign bool, reason string) {
	id := sb.Labels[agentenv.LabelRecord]
	if id == "" {
		return r, false, ""
	}
	if r, err := m.cfg.Ledger.Get(ctx, id); err == nil {
		if r.State != agentenv.StateGone {
			return r, false, ""
		}
		r.State = agentenv.StateTerminateFailed // listed although gone: a leak
		return r, false, "listed but its record is gone"
	}
	if exp, err := time.Parse(time.RFC3339, sb.Labels[agentenv.LabelExpires]); err == nil && now.After(exp) {
		r = agentenv.Record{ID: id, Provider: name, SandboxID: sb.ID, Kind: kindOf(sb), State: agentenv.StateAbandoned, Labels: sb.Labels}
		return r, true, "unrecorded and expired"
	}
	return r, false, ""
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

func kindOf(sb agentenv.Sandbox) agentenv.Kind {
	if sb.Labels[agentenv.LabelRole] == "network" {
		return agentenv.KindNetwork
	}
	return agentenv.KindSandbox
}
