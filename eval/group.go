package eval

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/task"
)

// Attributes of run documents. A group document is kept in the ledger's run store, told apart
// from episodes by AttrKind = KindGroup; each episode of a group carries AttrGroup and the slot
// it fills.
const (
	AttrKind      = "kind"
	KindGroup     = "group"
	AttrGroup     = "group"
	AttrGroupTask = "group_task" // the index of the eval's task the episode is of
	AttrInstance  = "instance"
	AttrAttempt   = "attempt"
	AttrResumedBy = "resumed_by" // on an unfinished episode: the group resume that replaced it
	// AttrShardGroup is, on an episode a merge re-pointed to the merged group (attrs.group),
	// the shard group it ran in.
	AttrShardGroup = "shard_group"
	// AttrBundle and AttrBundleDigest are, on a group run from a bundle (agentenv run REF) and
	// on each of its episodes, the reference as given and the manifest digest it resolved to.
	AttrBundle       = "bundle"
	AttrBundleDigest = "bundle.digest"
	attrBundleTree   = "bundle.tree" // on a group run from a bundle: the folder it was unpacked in
	attrShard        = "shard"       // "I/N" on a shard's group document
	attrMergedFrom   = "merged_from" // on a merged group: its shards' ids, comma-separated
	attrMergedInto   = "merged_into" // on a merged shard: the group its episodes now belong to
	attrTasks        = "tasks"
	attrOwner        = "owner"
	attrConc         = "concurrency"
	attrMaxCost      = "max_cost_usd"
	attrRunner       = "runner"  // on a group run by a Remote: its name ("temporal")
	attrRetries      = "retries" // the group's --retries, which its remote workers apply
)

// Group is a run group as its ledger document holds it: the eval, its tasks, and how far it
// went. Its ID is the group id episodes carry in attrs.group.
type Group struct {
	ID          string             `json:"id"`
	Name        string             `json:"name"`
	File        string             `json:"file"`             // the eval (or task) file it ran
	Digest      string             `json:"digest,omitempty"` // the eval file's digest; "" for a single task
	Concurrency int                `json:"concurrency"`
	MaxCostUSD  float64            `json:"max_cost_usd,omitempty"`
	Tasks       []GroupTask        `json:"tasks"`
	Status      agentenv.RunStatus `json:"status"` // running, completed (every slot ran), cancelled, failed
	Owner       agentenv.Owner     `json:"owner,omitzero"`
	Created     time.Time          `json:"created"`
	Ended       time.Time          `json:"ended,omitzero"`
	Error       string             `json:"error,omitempty"`
	// Shard is the part of the eval this group ran (--shard I/N); zero for the whole eval.
	Shard Shard `json:"shard,omitzero"`
	// MergedFrom are the shard groups a merge joined into this one, in shard order.
	MergedFrom []string `json:"merged_from,omitempty"`
	// MergedInto is, on a shard, the group a merge moved its episodes to.
	MergedInto string `json:"merged_into,omitempty"`
	// Runner names the Remote that runs the group's episodes ("temporal"); empty for a group
	// run in the process that started it (whose Owner it then records).
	Runner string `json:"runner,omitempty"`
	// Retries is Options.Retries of the group's run, for the workers of a Remote.
	Retries int `json:"retries,omitempty"`
	// Bundle and BundleDigest are the bundle the group's files came from (Options.Bundle),
	// the reference as given and the manifest digest it resolved to; empty for local files.
	Bundle       string `json:"bundle,omitempty"`
	BundleDigest string `json:"bundle_digest,omitempty"`
	// BundleTree is the folder the bundle was unpacked in on the machine that started the
	// group: File and every task's File start with it (Options.BundleTree).
	BundleTree string `json:"-"`
}

// movedTo returns g with its files read from tree, the same bundle's folder on this machine,
// in place of BundleTree.
func (g Group) movedTo(tree string) Group {
	move := func(p string) string {
		if rest, ok := strings.CutPrefix(p, g.BundleTree); ok {
			return tree + rest
		}
		return p
	}
	g.File = move(g.File)
	g.Tasks = slices.Clone(g.Tasks)
	for i := range g.Tasks {
		g.Tasks[i].File = move(g.Tasks[i].File)
	}
	g.BundleTree = tree
	return g
}

// episodeAttrs returns the attributes an episode of task ti of g carries.
func (g Group) episodeAttrs(ti int) map[string]string {
	attrs := map[string]string{AttrGroup: g.ID, AttrGroupTask: strconv.Itoa(ti)}
	if g.Bundle != "" {
		attrs[AttrBundle], attrs[AttrBundleDigest] = g.Bundle, g.BundleDigest
	}
	return attrs
}

// GroupTask is one task of a group.
type GroupTask struct {
	Task      string    `json:"task"`
	File      string    `json:"file"`
	Digest    string    `json:"digest"`
	K         int       `json:"k"`
	Instances int       `json:"instances"`
	Seeds     string    `json:"seeds,omitempty"`
	Overrides Overrides `json:"overrides,omitzero"`
}

// Slots is how many episodes the group has in all (a shard: its share).
func (g Group) Slots() int {
	n := 0
	for _, t := range g.Tasks {
		n += t.K * t.Instances
	}
	if g.Shard.N > 1 {
		// Slots numbered I-1, I-1+N, … below n.
		return (n - g.Shard.I + g.Shard.N) / g.Shard.N
	}
	return n
}

// doc returns g as the run document that stores it.
func (g Group) doc() (agentenv.Run, error) {
	tasks, err := json.Marshal(g.Tasks)
	if err != nil {
		return agentenv.Run{}, fmt.Errorf("group %s: %w", g.ID, err)
	}
	attrs := map[string]string{AttrKind: KindGroup, "file": g.File, attrTasks: string(tasks),
		attrOwner: g.Owner.String(), attrConc: strconv.Itoa(g.Concurrency)}
	if g.MaxCostUSD > 0 {
		attrs[attrMaxCost] = strconv.FormatFloat(g.MaxCostUSD, 'g', -1, 64)
	}
	if !g.Shard.IsZero() {
		attrs[attrShard] = g.Shard.String()
	}
	if len(g.MergedFrom) > 0 {
		attrs[attrMergedFrom] = strings.Join(g.MergedFrom, ",")
	}
	if g.MergedInto != "" {
		attrs[attrMergedInto] = g.MergedInto
	}
	if g.Runner != "" {
		attrs[attrRunner] = g.Runner
	}
	if g.Retries != 0 {
		attrs[attrRetries] = strconv.Itoa(g.Retries)
	}
	if g.Bundle != "" {
		attrs[AttrBundle], attrs[AttrBundleDigest], attrs[attrBundleTree] = g.Bundle, g.BundleDigest, g.BundleTree
	}
	return agentenv.Run{ID: g.ID, Task: g.Name, TaskDigest: g.Digest, Status: g.Status, Error: g.Error,
		Attrs: attrs, Created: g.Created, Ended: g.Ended}, nil
}

// IsGroup reports whether run document r is a group's document rather than an episode's.
func IsGroup(r agentenv.Run) bool { return r.Attrs[AttrKind] == KindGroup }

// FromDoc reads the group a run document stores; an error wrapping agentenv.ErrInvalid if it
// is not a group's.
func FromDoc(r agentenv.Run) (Group, error) {
	if !IsGroup(r) {
		return Group{}, fmt.Errorf("run %s is an episode, not a group: %w", r.ID, agentenv.ErrInvalid)
	}
	g := Group{ID: r.ID, Name: r.Task, File: r.Attrs["file"], Digest: r.TaskDigest, Status: r.Status,
		Error: r.Error, Created: r.Created, Ended: r.Ended}
	if err := json.Unmarshal([]byte(r.Attrs[attrTasks]), &g.Tasks); err != nil {
		return Group{}, fmt.Errorf("group %s: tasks: %w", r.ID, err)
	}
	g.Owner, _ = agentenv.ParseOwner(r.Attrs[attrOwner])
	g.Concurrency, _ = strconv.Atoi(r.Attrs[attrConc])
	g.MaxCostUSD, _ = strconv.ParseFloat(r.Attrs[attrMaxCost], 64)
	if v := r.Attrs[attrShard]; v != "" {
		sh, err := ParseShard(v)
		if err != nil {
			return Group{}, fmt.Errorf("group %s: %w", r.ID, err)
		}
		g.Shard = sh
	}
	if v := r.Attrs[attrMergedFrom]; v != "" {
		g.MergedFrom = strings.Split(v, ",")
	}
	g.MergedInto = r.Attrs[attrMergedInto]
	g.Runner = r.Attrs[attrRunner]
	g.Retries, _ = strconv.Atoi(r.Attrs[attrRetries])
	g.Bundle, g.BundleDigest, g.BundleTree = r.Attrs[AttrBundle], r.Attrs[AttrBundleDigest], r.Attrs[attrBundleTree]
	return g, nil
}

// Store reads and writes groups and their episodes in a ledger.
type Store struct{ Ledger agentenv.Ledger }

// Put writes g's document.
func (s Store) Put(ctx context.Context, g Group) error {
	d, err := g.doc()
	if err != nil {
		return err
	}
	if err := s.Ledger.Runs().Put(ctx, d); err != nil {
		return fmt.Errorf("write group %s: %w", g.ID, err)
	}
	return nil
}

// Get returns the group with id, or an error wrapping agentenv.ErrNotFound (or ErrInvalid when
// id names an episode).
func (s Store) Get(ctx context.Context, id string) (Group, error) {
	r, err := s.Ledger.Runs().Get(ctx, id)
	if err != nil {
		return Group{}, fmt.Errorf("group %s: %w", id, err)
	}
	return FromDoc(r)
}

// List returns up to limit groups (all when limit <= 0), newest first.
func (s Store) List(ctx context.Context, limit int) ([]Group, error) {
	return s.list(ctx, nil, limit)
}

// list is List of the groups in one of states (any when none).
func (s Store) list(ctx context.Context, states []agentenv.RunStatus, limit int) ([]Group, error) {
	q := agentenv.DocQuery{Fields: map[string]string{"attrs." + AttrKind: KindGroup}, Limit: 100}
	for _, st := range states {
		q.States = append(q.States, string(st))
	}
	var out []Group
	for {
		p, err := s.Ledger.Runs().Page(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("list groups: %w", err)
		}
		for _, r := range p.Docs {
			if g, err := FromDoc(r); err == nil {
				out = append(out, g)
			}
			if limit > 0 && len(out) >= limit {
				return out, nil
			}
		}
		if p.Next == "" {
			return out, nil
		}
		q.Cursor = p.Next
	}
}

// Episodes returns every episode run document of group g, oldest first, resumed-over ones
// included. A shard merged into another group finds its episodes by attrs.shard_group.
func (s Store) Episodes(ctx context.Context, g Group) ([]agentenv.Run, error) {
	return s.episodes(ctx, g.ID, g.MergedInto != "")
}

// episodes returns the episodes whose attrs.group is id, or with merged, whose
// attrs.shard_group is.
func (s Store) episodes(ctx context.Context, id string, merged bool) ([]agentenv.Run, error) {
	field := AttrGroup
	if merged {
		field = AttrShardGroup
	}
	q := agentenv.DocQuery{Fields: map[string]string{"attrs." + field: id}, Oldest: true, Limit: 500}
	var out []agentenv.Run
	for {
		p, err := s.Ledger.Runs().Page(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("episodes of group %s: %w", id, err)
		}
		out = append(out, p.Docs...)
		if p.Next == "" {
			return out, nil
		}
		q.Cursor = p.Next
	}
}

// SlotKey names one episode slot of a group.
type SlotKey struct {
	Task     int // index into Group.Tasks
	Instance int
	Attempt  int
}

func (k SlotKey) String() string {
	return fmt.Sprintf("task %d instance %d attempt %d", k.Task, k.Instance, k.Attempt)
}

// slotOf returns the slot run document r fills, if it names one.
func slotOf(r agentenv.Run) (SlotKey, bool) {
	t, err1 := strconv.Atoi(r.Attrs[AttrGroupTask])
	i, err2 := strconv.Atoi(r.Attrs[AttrInstance])
	a, err3 := strconv.Atoi(r.Attrs[AttrAttempt])
	return SlotKey{t, i, a}, err1 == nil && err2 == nil && err3 == nil
}

// Latest returns, per slot, the newest episode run document of runs (the one a resume made,
// when there are several).
func Latest(runs []agentenv.Run) map[SlotKey]agentenv.Run {
	out := map[SlotKey]agentenv.Run{}
	for _, r := range runs {
		k, ok := slotOf(r)
		if !ok {
			continue
		}
		if old, ok := out[k]; !ok || r.Created.After(old.Created) || (r.Created.Equal(old.Created) && r.ID > old.ID) {
			out[k] = r
		}
	}
	return out
}

// Finished reports whether an episode's run document is a sample that a resume keeps: it
// completed, or failed on the agent's account. Cancelled, still running (the group's owner
// is dead by then) and error (an infrastructure error after its retries) are not.
func Finished(r agentenv.Run) bool {
	return r.Status == agentenv.RunCompleted || r.Status == agentenv.RunFailed
}

// Pending returns the slots of g that a resume runs: those without an episode, or whose latest
// episode did not finish (see Finished), in slot order.
func Pending(g Group, runs []agentenv.Run) []SlotKey {
	latest := Latest(runs)
	var out []SlotKey
	for _, k := range g.SlotKeys() {
		if r, ok := latest[k]; !ok || !Finished(r) {
			out = append(out, k)
		}
	}
	return out
}

// Alive reports whether the process that owns g still runs (on this host; a group owned from
// another host counts as alive while it is running, as its process cannot be checked here). A
// group run by a Remote is alive while it is running: its workers come and go.
func Alive(g Group) bool {
	if g.Status == agentenv.RunRunning && g.Runner != "" {
		return true
	}
	if g.Status != agentenv.RunRunning || g.Owner.IsZero() {
		return false
	}
	me, err := lifecycle.CurrentOwner()
	if err != nil || me.Host != g.Owner.Host {
		return true
	}
	return lifecycle.ProcessAlive(g.Owner)
}

// episodeOf reads an episode line back from its run document.
func episodeOf(r agentenv.Run) task.Episode {
	k, _ := slotOf(r)
	ep := task.Episode{Run: r.ID, Instance: k.Instance, Attempt: k.Attempt, Score: r.Score, Error: r.Error, Steps: r.Steps, Receipt: r.Receipt}
	for key, v := range r.Attrs {
		if len(key) > 5 && key[:5] == "seed." {
			if ep.Seed == nil {
				ep.Seed = map[string]string{}
			}
			ep.Seed[key[5:]] = v
		}
	}
	if !r.Ended.IsZero() {
		ep.Elapsed = r.Ended.Sub(r.Created)
	}
	ep.Outcome = task.OutcomeOf(r)
	return ep
}

// sortSlots orders keys by task, instance, attempt.
func sortSlots(keys []SlotKey) {
	slices.SortFunc(keys, func(a, b SlotKey) int {
		if a.Task != b.Task {
			return a.Task - b.Task
		}
		if a.Instance != b.Instance {
			return a.Instance - b.Instance
		}
		return a.Attempt - b.Attempt
	})
}
