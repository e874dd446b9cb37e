package lifecycle

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
)

// planGC's decisions, from views built by hand: which records it keeps, leaves in flight or
// collects, which listed sandboxes it collects, and why.
func TestPlanGC(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	const host = "box@aaaaaaaaaaaa"
	self := agentenv.Owner{Host: host, PID: 1, Start: 1}
	liveProc := agentenv.Owner{Host: host, PID: 2, Start: 2}
	deadProc := agentenv.Owner{Host: host, PID: 3, Start: 3}
	elsewhere := agentenv.Owner{Host: "other@bbbbbbbbbbbb", PID: 2, Start: 2}
	past, future := now.Add(-time.Minute), now.Add(time.Minute)
	old := now.Add(-time.Hour) // older than the create timeout

	rec := func(id string, state agentenv.State, o agentenv.Owner, mod ...func(*agentenv.Record)) agentenv.Record {
		r := agentenv.Record{ID: id, Provider: "fake", Kind: agentenv.KindSandbox, State: state, Owner: o, Created: old}
		for _, f := range mod {
			f(&r)
		}
		return r
	}
	expires := func(at time.Time) func(*agentenv.Record) { return func(r *agentenv.Record) { r.Expires = at } }
	lease := func(until time.Time) func(*agentenv.Record) { return func(r *agentenv.Record) { r.LeaseUntil = until } }
	young := func(r *agentenv.Record) { r.Created = now.Add(-time.Second) }
	kind := func(k agentenv.Kind) func(*agentenv.Record) { return func(r *agentenv.Record) { r.Kind = k } }
	attr := func(k, v string) func(*agentenv.Record) {
		return func(r *agentenv.Record) { r.Attrs = map[string]string{k: v} }
	}
	sb := func(id, record string, labels ...string) agentenv.Sandbox {
		s := agentenv.Sandbox{ID: id, Labels: map[string]string{}}
		if record != "" {
			s.Labels[agentenv.LabelRecord] = record
		}
		for i := 0; i+1 < len(labels); i += 2 {
			s.Labels[labels[i]] = labels[i+1]
		}
		return s
	}
	listed := func(sbs ...agentenv.Sandbox) map[string]gcListing {
		return map[string]gcListing{"fake": {Sandboxes: sbs}}
	}
	expired := []string{agentenv.LabelExpires, past.Format(time.RFC3339)}
	notExpired := []string{agentenv.LabelExpires, future.Format(time.RFC3339)}

	cases := []struct {
		name     string
		records  []agentenv.Record
		byLabel  map[string]gcListing
		listings map[string]gcListing
		lookups  map[string]agentenv.Record
		dryRun   bool
		// want: kept count, "id: reason" of Collect and Foreign, ids in flight, counts of
		// unlisted providers and errors.
		kept                    int
		collect, foreign, inFly []string
		unlisted, errs          int
		check                   func(t *testing.T, p gcPlan)
	}{
		{
			name:    "a record owned by a live process and not expired is kept",
			records: []agentenv.Record{rec("a", agentenv.StateLive, liveProc)},
			kept:    1,
		},
		{
			name:    "a record owned by a live process is kept even once expired",
			records: []agentenv.Record{rec("a", agentenv.StateLive, liveProc, expires(past))},
			kept:    1,
		},
		{
			name: "a record owned by a live process is kept in any state",
			records: []agentenv.Record{
				rec("a", agentenv.StateTerminateFailed, liveProc), rec("b", agentenv.StateAbandoned, liveProc),
				rec("c", agentenv.StateCreating, liveProc),
			},
			kept: 3,
		},
		{
			name:    "a record owned by this process is kept",
			records: []agentenv.Record{rec("a", agentenv.StateLive, self)},
			kept:    1,
		},
		{
			name:    "a record of this process that expired is collected",
			records: []agentenv.Record{rec("a", agentenv.StateLive, self, expires(past))},
			collect: []string{"a: expired"},
		},
		{
			name:    "an expired record is collected",
			records: []agentenv.Record{rec("a", agentenv.StateLive, agentenv.Owner{}, expires(past)), rec("b", agentenv.StateLive, deadProc, expires(past))},
			collect: []string{"a: expired", "b: expired"},
		},
		{
			name:    "a record handed to its expiry is kept until then",
			records: []agentenv.Record{rec("a", agentenv.StateLive, agentenv.Owner{}, expires(future))},
			kept:    1,
		},
		{
			name:    "a record of a dead process on this host is collected",
			records: []agentenv.Record{rec("a", agentenv.StateLive, deadProc, expires(future))},
			collect: []string{"a: owner process is dead"},
		},
		{
			name:    "a record of an owner on another host is judged by its lease",
			records: []agentenv.Record{rec("a", agentenv.StateLive, elsewhere, lease(future)), rec("b", agentenv.StateLive, elsewhere, lease(past))},
			kept:    1,
			collect: []string{"b: owner lease expired"},
		},
		{
			name: "failed terminates are retried, unknown creates and ownerless records collected",
			records: []agentenv.Record{
				rec("a", agentenv.StateTerminateFailed, agentenv.Owner{}), rec("b", agentenv.StateAbandoned, deadProc),
				rec("c", agentenv.StateTerminating, agentenv.Owner{}),
			},
			collect: []string{"a: retry failed terminate", "b: create outcome unknown", "c: no owner for a terminating record"},
		},
		{
			name:    "a young creating record of a dead creator with nothing under its label is in flight",
			records: []agentenv.Record{rec("a", agentenv.StateCreating, deadProc, young)},
			byLabel: map[string]gcListing{"a": {}},
			inFly:   []string{"a"},
			check: func(t *testing.T, p gcPlan) {
				if f := p.InFlight[0]; !f.Abandon || len(f.Remove) != 0 {
					t.Errorf("in flight = %+v, want marked abandoned, nothing removed", f)
				}
			},
		},
		{
			name:    "an abandoned record in flight is not marked again",
			records: []agentenv.Record{rec("a", agentenv.StateAbandoned, deadProc, young)},
			byLabel: map[string]gcListing{"a": {}},
			inFly:   []string{"a"},
			check: func(t *testing.T, p gcPlan) {
				if f := p.InFlight[0]; f.Abandon {
					t.Errorf("in flight = %+v, want not marked", f)
				}
			},
		},
		{
			name:    "a young creating record with a sandbox under its label is collected",
			records: []agentenv.Record{rec("a", agentenv.StateCreating, deadProc, young)},
			byLabel: map[string]gcListing{"a": {Sandboxes: []agentenv.Sandbox{sb("s1", "a")}}},
			collect: []string{"a: owner process is dead"},
		},
		{
			name:    "a young creating record whose label could not be listed is collected",
			records: []agentenv.Record{rec("a", agentenv.StateCreating, deadProc, young)},
			byLabel: map[string]gcListing{"a": {Err: errors.New("boom")}},
			collect: []string{"a: owner process is dead"},
		},
		{
			name:    "a young creating record on a provider not configured is collected",
			records: []agentenv.Record{rec("a", agentenv.StateCreating, deadProc, young)},
			collect: []string{"a: owner process is dead"},
		},
		{
			name: "a creating record past the create timeout or its expiry is collected",
			records: []agentenv.Record{
				rec("a", agentenv.StateCreating, deadProc),
				rec("b", agentenv.StateCreating, agentenv.Owner{}, young, expires(past)),
			},
			byLabel: map[string]gcListing{"a": {}, "b": {}},
			collect: []string{"a: owner process is dead", "b: expired"},
		},
		{
			name:    "a container in a VM is never in flight",
			records: []agentenv.Record{rec("a", agentenv.StateCreating, deadProc, young, kind(agentenv.KindInVM))},
			byLabel: map[string]gcListing{"a": {}},
			collect: []string{"a: owner process is dead"},
		},
		{
			name:    "an image build in flight has what it made removed",
			records: []agentenv.Record{rec("img", agentenv.StateCreating, deadProc, young, kind(agentenv.KindImage))},
			byLabel: map[string]gcListing{"img": {Sandboxes: []agentenv.Sandbox{sb("layer1", "img")}}},
			inFly:   []string{"img"},
			check: func(t *testing.T, p gcPlan) {
				if f := p.InFlight[0]; !f.Abandon || len(f.Remove) != 1 || f.Remove[0].ID != "layer1" {
					t.Errorf("in flight = %+v, want layer1 removed and the record marked abandoned", f)
				}
			},
		},
		{
			name: "a build's own create bound, longer or shorter than the manager's, says how long it may be in flight",
			records: []agentenv.Record{
				rec("long", agentenv.StateCreating, deadProc, kind(agentenv.KindImage), attr(agentenv.AttrCreateTimeout, "2h")),
				rec("short", agentenv.StateCreating, deadProc, young, kind(agentenv.KindImage), attr(agentenv.AttrCreateTimeout, "1ms")),
			},
			byLabel: map[string]gcListing{"long": {}, "short": {}},
			inFly:   []string{"long"},
			collect: []string{"short: owner process is dead"},
		},
		{
			name:    "a dry run changes nothing in flight",
			records: []agentenv.Record{rec("img", agentenv.StateCreating, deadProc, young, kind(agentenv.KindImage))},
			byLabel: map[string]gcListing{"img": {Sandboxes: []agentenv.Sandbox{sb("layer1", "img")}}},
			dryRun:  true,
			inFly:   []string{"img"},
			check: func(t *testing.T, p gcPlan) {
				if f := p.InFlight[0]; f.Abandon || len(f.Remove) != 0 || !p.DryRun {
					t.Errorf("plan = %+v, want a dry run with nothing to do in flight", p)
				}
			},
		},
		{
			name:     "a labelled sandbox with no record is collected once its expiry label has passed",
			listings: listed(sb("s1", "x", expired...), sb("s2", "y", notExpired...), sb("s3", "z"), sb("s4", "n", append([]string{agentenv.LabelRole, "network"}, expired...)...)),
			foreign:  []string{"x: unrecorded and expired", "n: unrecorded and expired"},
			check: func(t *testing.T, p gcPlan) {
				want := agentenv.Record{ID: "x", Provider: "fake", SandboxID: "s1", Kind: agentenv.KindSandbox, State: agentenv.StateAbandoned}
				if got := p.Foreign[0].Record; got.ID != want.ID || got.Provider != want.Provider || got.SandboxID != want.SandboxID || got.Kind != want.Kind || got.State != want.State {
					t.Errorf("foreign record = %+v, want %+v", got, want)
				}
				if got := p.Foreign[1].Record.Kind; got != agentenv.KindNetwork {
					t.Errorf("foreign network's kind = %s", got)
				}
			},
		},
		{
			name:     "a sandbox without a record label is left alone",
			listings: listed(sb("s1", "", expired...)),
		},
		{
			name:     "a sandbox of a listed record is left to its record",
			records:  []agentenv.Record{rec("a", agentenv.StateLive, liveProc)},
			listings: listed(sb("s1", "a", expired...)),
			kept:     1,
		},
		{
			name:     "a sandbox listed although its record is gone is a leak",
			listings: listed(sb("s1", "a", notExpired...)),
			lookups:  map[string]agentenv.Record{"a": rec("a", agentenv.StateGone, deadProc)},
			collect:  []string{"a: listed but its record is gone"},
			check: func(t *testing.T, p gcPlan) {
				if got := p.Collect[0].Record.State; got != agentenv.StateTerminateFailed {
					t.Errorf("leak's record state = %s, want terminate_failed", got)
				}
			},
		},
		{
			name:     "a sandbox whose record came back up after the listing is left alone",
			listings: listed(sb("s1", "a", expired...)),
			lookups:  map[string]agentenv.Record{"a": rec("a", agentenv.StateLive, deadProc)},
		},
		{
			name:     "a record's sandboxes are collected once",
			listings: map[string]gcListing{"fake": {Sandboxes: []agentenv.Sandbox{sb("s1", "x", expired...), sb("s2", "x", expired...)}}, "other": {Sandboxes: []agentenv.Sandbox{sb("s3", "x", expired...)}}},
			foreign:  []string{"x: unrecorded and expired"},
		},
		{
			name:    "a provider that cannot list is unlisted when unavailable and unused, else an error",
			records: []agentenv.Record{rec("a", agentenv.StateLive, liveProc, func(r *agentenv.Record) { r.Provider = "used" })},
			listings: map[string]gcListing{
				"down":  {Err: fmt.Errorf("engine: %w", agentenv.ErrUnavailable)},
				"used":  {Err: fmt.Errorf("engine: %w", agentenv.ErrUnavailable)},
				"other": {Err: errors.New("boom")},
			},
			kept: 1, unlisted: 1, errs: 2,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := gcView{
				Opts: GCOptions{DryRun: c.dryRun}, Now: now, Self: self, CreateTimeout: time.Minute,
				Records: c.records, Alive: map[agentenv.Owner]bool{liveProc: true, deadProc: false},
				ByLabel: c.byLabel, Listings: c.listings, Lookups: c.lookups,
			}
			p := planGC(v)
			items := func(its []gcItem) []string {
				var out []string
				for _, it := range its {
					out = append(out, it.Record.ID+": "+it.Reason)
				}
				return out
			}
			var inFly []string
			for _, f := range p.InFlight {
				inFly = append(inFly, f.Record.ID)
			}
			if p.Kept != c.kept {
				t.Errorf("kept = %d, want %d", p.Kept, c.kept)
			}
			if got := items(p.Collect); !slices.Equal(got, c.collect) {
				t.Errorf("collect = %q, want %q", got, c.collect)
			}
			if got := items(p.Foreign); !slices.Equal(got, c.foreign) {
				t.Errorf("foreign = %q, want %q", got, c.foreign)
			}
			if !slices.Equal(inFly, c.inFly) {
				t.Errorf("in flight = %q, want %q", inFly, c.inFly)
			}
			if len(p.Unlisted) != c.unlisted || len(p.Errors) != c.errs {
				t.Errorf("unlisted = %q, errors = %q; want %d and %d", p.Unlisted, p.Errors, c.unlisted, c.errs)
			}
			if c.check != nil && !t.Failed() {
				c.check(t, p)
			}
		})
	}
}

// planGC is a function of its view: the same view, the same plan, and the view unchanged.
func TestPlanGCLeavesItsViewAlone(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	gone := agentenv.Record{ID: "a", Provider: "fake", State: agentenv.StateGone}
	v := gcView{
		Now: now, Self: agentenv.Owner{Host: "h", PID: 1, Start: 1},
		Listings: map[string]gcListing{"fake": {Sandboxes: []agentenv.Sandbox{{ID: "s1", Labels: map[string]string{agentenv.LabelRecord: "a"}}}}},
		Lookups:  map[string]agentenv.Record{"a": gone},
	}
	first, second := planGC(v), planGC(v)
	if len(first.Collect) != 1 || fmt.Sprint(first) != fmt.Sprint(second) {
		t.Errorf("plans = %+v and %+v, want one leak, twice", first, second)
	}
	if v.Lookups["a"].State != agentenv.StateGone {
		t.Errorf("the view's record became %s", v.Lookups["a"].State)
	}
}
