package lifecycle

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/agentenv/agentenv"
)

// gcView is what a gc pass looked at: the facts planGC decides from, gathered by
// Manager.observe. It holds no connection to anything, so a plan can be made (and tested) from
// it alone.
type gcView struct {
	Opts GCOptions
	Now  time.Time
	// Self is the owner of the process running gc.
	Self agentenv.Owner
	// CreateTimeout is how long a create may run; a record older than that is not in flight.
	CreateTimeout time.Duration
	// Records are the ledger's records that are not gone, as listed.
	Records []agentenv.Record
	// Alive says, of each owner on Self's host other than Self that a record names, whether its
	// process runs.
	Alive map[agentenv.Owner]bool
	// ByLabel holds, for each record gc would collect whose create may still run
	// (mayBeInFlight), what its provider lists under its agentenv.record label. Such a record
	// with no entry (its provider is not configured) is collected.
	ByLabel map[string]gcListing
	// Listings holds each configured provider's whole listing, by provider name.
	Listings map[string]gcListing
	// Lookups holds the records found by id for the agentenv.record labels of listed sandboxes
	// that name no record in Records. An id that is absent was not found.
	Lookups map[string]agentenv.Record
}

// gcListing is what a provider listed, or why it could not.
type gcListing struct {
	Sandboxes []agentenv.Sandbox
	Err       error
}

// gcPlan is what a gc pass decided: what to collect and why, what to leave in flight, and what
// to report as it is. Manager.carryOut does it.
type gcPlan struct {
	DryRun bool
	// Kept counts the records left alone: owned by a live process, or not expired.
	Kept int
	// InFlight are the records whose create may still be running, in ledger order.
	InFlight []gcInFlight
	// Collect are the records to tear down: this ledger's records, in ledger order, then the
	// leaks (a sandbox listed although its record is gone), in listing order.
	Collect []gcItem
	// Foreign are the sandboxes no record of this ledger names, to terminate by provider id,
	// each under a record made up from its labels.
	Foreign []gcItem
	// Unlisted and Errors are as in GCReport.
	Unlisted []string
	Errors   []string
}

// gcItem is a record gc collects and the reason it does.
type gcItem struct {
	Record agentenv.Record
	Reason string
}

// gcInFlight is a record gc leaves in flight, and what it does to it meanwhile (nothing on a dry
// run).
type gcInFlight struct {
	Record agentenv.Record
	// Remove are what an image build made so far, to terminate now: the engine goes on with the
	// build after its client is gone.
	Remove []agentenv.Sandbox
	// Abandon says the record is creating, to be marked abandoned.
	Abandon bool
}

// planGC decides a gc pass from what v holds, and does nothing else. Each record is kept (see
// collectReason), left in flight (see inFlight) or collected. Then each provider's listing, in
// name order, is searched for sandboxes with no record in v.Records: a leak of this ledger, or
// an unrecorded expired sandbox (see orphan), each collected once. A provider that could not
// list is an error, or, if no record of v.Records is on it and it is unavailable, unlisted.
func planGC(v gcView) gcPlan {
	p := gcPlan{DryRun: v.Opts.DryRun}
	known := map[string]bool{}
	inUse := map[string]bool{}
	for _, r := range v.Records {
		known[r.ID] = true
		inUse[r.Provider] = true
	}
	for _, r := range v.Records {
		reason := v.collectReason(r)
		if reason == "" {
			p.Kept++
			continue
		}
		if f, ok := v.inFlight(r); ok {
			p.InFlight = append(p.InFlight, f)
			continue
		}
		p.Collect = append(p.Collect, gcItem{Record: r, Reason: reason})
	}

	// Sandboxes listed by a provider with no live record behind them: leaks of this ledger
	// (their record is gone) go through Teardown; foreign ones (no record here) by provider id.
	for _, name := range slices.Sorted(maps.Keys(v.Listings)) {
		l := v.Listings[name]
		if l.Err != nil && !inUse[name] && errors.Is(l.Err, agentenv.ErrUnavailable) {
			p.Unlisted = append(p.Unlisted, fmt.Sprintf("%s: %v", name, l.Err))
			continue
		}
		if l.Err != nil {
			p.Errors = append(p.Errors, fmt.Sprintf("list %s: %v", name, l.Err))
			continue
		}
		for _, sb := range l.Sandboxes {
			id := sb.Labels[agentenv.LabelRecord]
			if known[id] {
				continue
			}
			r, isForeign, reason := v.orphan(name, sb)
			if reason == "" {
				continue
			}
			if isForeign {
				p.Foreign = append(p.Foreign, gcItem{Record: r, Reason: reason})
			} else {
				p.Collect = append(p.Collect, gcItem{Record: r, Reason: reason})
			}
			known[id] = true
		}
	}
	return p
}

// ownerAlive reports whether owner o still works, as v saw it: the process running gc does; on
// its host, o by its process (v.Alive); elsewhere, by its lease, which runs until leaseUntil.
func (v *gcView) ownerAlive(o agentenv.Owner, leaseUntil time.Time) bool {
	if o == v.Self {
		return true
	}
	if o.Host == v.Self.Host {
		return v.Alive[o]
	}
	return v.Now.Before(leaseUntil)
}

// collectReason says why gc should collect r, or "" to keep it. A record whose owner is
// another process that still works is kept whatever else is true of it, its expiry included:
// that process tears down what it made, and gc is safe to run beside it.
func (v *gcView) collectReason(r agentenv.Record) string {
	if !r.Owner.IsZero() && r.Owner != v.Self && v.ownerAlive(r.Owner, r.LeaseUntil) {
		return ""
	}
	if !r.Expires.IsZero() && v.Now.After(r.Expires) {
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
	if v.ownerAlive(r.Owner, r.LeaseUntil) {
		return ""
	}
	if r.Owner.Host == v.Self.Host {
		return "owner process is dead"
	}
	return "owner lease expired"
}

// mayBeInFlight reports whether, by its record alone, r's create may still be running in the
// backend after its creator died: r never became live, is not a container in a VM and is
// neither older than its create's bound (AttrCreateTimeout, else createTimeout) nor expired at
// now. What its provider lists under its label
// tells the rest (inFlight).
func mayBeInFlight(r agentenv.Record, now time.Time, createTimeout time.Duration) bool {
	if r.State != agentenv.StateCreating && r.State != agentenv.StateAbandoned {
		return false
	}
	if r.Kind == agentenv.KindInVM {
		// Not listed by label (it carries its VM's); its start ran in its creator's process,
		// which is gone, and the removal by name takes whatever that start made.
		return false
	}
	if d, err := time.ParseDuration(r.Attrs[agentenv.AttrCreateTimeout]); err == nil && d > 0 {
		createTimeout = d // the create's own bound (a build's), not the manager's
	}
	return now.Sub(r.Created) <= createTimeout && (r.Expires.IsZero() || !now.After(r.Expires))
}

// inFlight reports whether r, which gc would collect, is to be left in flight instead, and what
// to do to it meanwhile: its create may still be running (mayBeInFlight) and nothing is listed
// under its label yet, or it is an image. Collecting it now would close a record whose sandbox
// may appear a moment later. An image build goes on in the backend after its client is gone (an
// engine ends the step it is in, which makes one more image): what it made so far is removed
// now, and the record is watched until its create timeout. A creating record is marked
// abandoned. A dry run does neither.
func (v *gcView) inFlight(r agentenv.Record) (gcInFlight, bool) {
	if !mayBeInFlight(r, v.Now, v.CreateTimeout) {
		return gcInFlight{}, false
	}
	l, ok := v.ByLabel[r.ID]
	if !ok || l.Err != nil || len(l.Sandboxes) > 0 && r.Kind != agentenv.KindImage {
		return gcInFlight{}, false
	}
	f := gcInFlight{Record: r}
	if !v.Opts.DryRun {
		f.Remove = l.Sandboxes
		f.Abandon = r.State == agentenv.StateCreating
	}
	return f, true
}

// orphan says why gc should collect sandbox sb, listed by provider name with no record in
// v.Records ("" to leave it), and returns the record to collect it under: this ledger's gone
// record (a leak), or, for a sandbox this ledger has no record of (foreign), one made up from
// its labels, once its expiry label has passed.
func (v *gcView) orphan(name string, sb agentenv.Sandbox) (r agentenv.Record, foreign bool, reason string) {
	id := sb.Labels[agentenv.LabelRecord]
	if id == "" {
		return r, false, ""
	}
	if r, ok := v.Lookups[id]; ok {
		if r.State != agentenv.StateGone {
			return r, false, ""
		}
		r.State = agentenv.StateTerminateFailed // listed although gone: a leak
		return r, false, "listed but its record is gone"
	}
	if exp, err := time.Parse(time.RFC3339, sb.Labels[agentenv.LabelExpires]); err == nil && v.Now.After(exp) {
		r = agentenv.Record{ID: id, Provider: name, SandboxID: sb.ID, Kind: kindOf(sb), State: agentenv.StateAbandoned, Labels: sb.Labels}
		return r, true, "unrecorded and expired"
	}
	return r, false, ""
}

// kindOf is the kind of the record gc makes up for an unrecorded sandbox sb, by its role label.
func kindOf(sb agentenv.Sandbox) agentenv.Kind {
	if sb.Labels[agentenv.LabelRole] == "network" {
		return agentenv.KindNetwork
	}
	return agentenv.KindSandbox
}
