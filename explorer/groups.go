package explorer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

// A group is the runs of one `agentenv run` invocation (an eval's tasks, or one task, k
// episodes of each instance). Runs since run groups carry attrs.group, the id of the group's
// own document (package eval: a document of the run store with attrs.kind = "group"), and a
// group is exactly its runs, the latest of each slot (runs a resume replaced carry
// attrs.resumed_by and are left out). Older runs carry no group id, so their group is found
// from what they do carry: its id is the run id of its episode 1 (attrs.episode = "1"), and
// its members are the runs of the same task file and digest created from then on, up to the
// next episode 1 of that task or a repeated episode number. Two such invocations of the same
// task file that overlap in time cannot be told apart.

// Attributes of the run groups package eval writes.
const (
	attrGroup     = "group"
	attrKind      = "kind"
	kindGroup     = "group"
	attrResumedBy = "resumed_by"
	attrRunner    = "runner" // on a group handed to workers: which ("temporal")
	// A shard's group merged into another (agentenv runs merge): its episodes carry the
	// merged group's id in attrs.group and the shard's in attrs.shard_group.
	attrMergedInto = "merged_into"
	attrShardGroup = "shard_group"
)

// isGroupDoc reports whether r is a run group's own document, not an episode.
func isGroupDoc(r agentenv.Run) bool { return r.Attrs[attrKind] == kindGroup }

// groupMembers returns the episodes of the group whose document is doc, oldest first, without
// those a resume replaced (a merged shard's: those it ran, now the merged group's).
func (x *Explorer) groupMembers(ctx context.Context, doc agentenv.Run) ([]agentenv.Run, error) {
	field := attrGroup
	if doc.Attrs[attrMergedInto] != "" {
		field = attrShardGroup
	}
	q := agentenv.DocQuery{Fields: map[string]string{"attrs." + field: doc.ID}, Oldest: true, Limit: firstGroupPage}
	var out []agentenv.Run
	for len(out) < maxGroup {
		p, err := x.cfg.Ledger.Runs().Page(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("group %s: %w", doc.ID, err)
		}
		for _, r := range p.Docs {
			if r.Attrs[attrResumedBy] == "" {
				out = append(out, r)
			}
		}
		if p.Next == "" {
			break
		}
		q.Cursor, q.Limit = p.Next, min(q.Limit*4, lastGroupPage)
	}
	return out, nil
}

// exactGroup returns the group whose document is doc, with its runs when withRuns.
func (x *Explorer) exactGroup(ctx context.Context, doc agentenv.Run, now time.Time, withRuns bool) (Group, error) {
	runs, err := x.groupMembers(ctx, doc)
	if err != nil {
		return Group{}, err
	}
	if len(runs) == 0 {
		g := Group{ID: doc.ID, Task: doc.Task, TaskDigest: doc.TaskDigest, File: doc.Attrs["file"], Created: doc.Created,
			Ended: doc.Ended, Running: doc.Status == agentenv.RunRunning, Counts: map[string]int{}, Stats: statsOf(nil, now),
			Workers: doc.Attrs[attrRunner]}
		return g, nil
	}
	g := x.groupFrom(runs, now, withRuns)
	g.ID, g.Task, g.TaskDigest, g.File, g.Created = doc.ID, doc.Task, doc.TaskDigest, doc.Attrs["file"], doc.Created
	g.Live = x.live.progress(doc.ID)
	if g.Workers = doc.Attrs[attrRunner]; g.Workers != "" && doc.Status == agentenv.RunRunning {
		// Workers take its slots in turn: it runs between its episodes too.
		g.Running, g.Ended = true, time.Time{}
	}
	return g, nil
}

// slack is how much earlier than its episode 1 another episode of the same invocation may
// have been created (episodes start concurrently).
const slack = time.Second

// firstGroupPage is how many member runs the first ledger query of a group reads; each
// further query reads four times more, up to lastGroupPage, so that a group of 4 costs one
// small query and a group of 10,000 a few large ones.
const (
	firstGroupPage = 16
	lastGroupPage  = 1024
)

// maxGroup bounds how many runs one group holds (an eval of many tasks × k is the evals
// issue's to record; this bounds a page, not the ledger).
const maxGroup = 100_000

// groupOf returns the id of the group run r belongs to: the run of its episode 1.
func (x *Explorer) groupOf(ctx context.Context, r agentenv.Run) (string, error) {
	if g := r.Attrs[attrGroup]; g != "" {
		return g, nil
	}
	if r.Attrs["episode"] == "1" || r.Attrs["episode"] == "" {
		return r.ID, nil
	}
	p, err := x.cfg.Ledger.Runs().Page(ctx, agentenv.DocQuery{
		Fields: map[string]string{"task_digest": r.TaskDigest, "attrs.file": r.Attrs["file"], "attrs.episode": "1"},
		To:     r.Created.Add(slack), Limit: 1,
	})
	if err != nil {
		return "", fmt.Errorf("group of %s: %w", r.ID, err)
	}
	if len(p.Docs) == 0 {
		return r.ID, nil
	}
	return p.Docs[0].ID, nil
}

// members returns the runs of the group whose episode 1 is head, in episode order.
func (x *Explorer) members(ctx context.Context, head agentenv.Run) ([]agentenv.Run, error) {
	if head.Attrs["episode"] != "1" {
		return []agentenv.Run{head}, nil
	}
	q := agentenv.DocQuery{
		Fields: map[string]string{"task_digest": head.TaskDigest, "attrs.file": head.Attrs["file"]},
		From:   head.Created.Add(-slack), Oldest: true, Limit: firstGroupPage,
	}
	byEpisode := map[int]agentenv.Run{}
	maxEp := 0
	for len(byEpisode) < maxGroup {
		p, err := x.cfg.Ledger.Runs().Page(ctx, q)
		if err != nil {
			return nil, fmt.Errorf("group %s: %w", head.ID, err)
		}
		for _, r := range p.Docs {
			if r.Attrs[attrGroup] != "" {
				continue // a run of an exact group
			}
			n, err := strconv.Atoi(r.Attrs["episode"])
			if err != nil || n < 1 {
				continue
			}
			if r.ID == head.ID {
				byEpisode[1] = r
				continue
			}
			if r.Created.Before(head.Created) && n == 1 {
				continue // an earlier invocation's episode 1
			}
			if n == 1 || byEpisode[n].ID != "" {
				if r.Created.After(head.Created) {
					return ordered(byEpisode, maxEp), nil // the next invocation began
				}
				continue
			}
			byEpisode[n] = r
			maxEp = max(maxEp, n)
		}
		if p.Next == "" {
			break
		}
		q.Cursor, q.Limit = p.Next, min(q.Limit*4, lastGroupPage)
	}
	return ordered(byEpisode, maxEp), nil
}

func ordered(byEpisode map[int]agentenv.Run, maxEp int) []agentenv.Run {
	out := make([]agentenv.Run, 0, len(byEpisode))
	for n := 1; n <= max(maxEp, 1); n++ {
		if r, ok := byEpisode[n]; ok {
			out = append(out, r)
		}
	}
	return out
}

// Group is one agentenv run invocation with its statistics.
type Group struct {
	ID         string         `json:"id"` // the run id of its episode 1
	Task       string         `json:"task"`
	TaskDigest string         `json:"task_digest"`
	File       string         `json:"file,omitempty"`
	Created    time.Time      `json:"created"`
	Ended      time.Time      `json:"ended,omitzero"`
	Running    bool           `json:"running"`
	Episodes   int            `json:"episodes"`  // recorded so far
	Instances  int            `json:"instances"` // seeds rows
	Counts     map[string]int `json:"counts"`    // by outcome
	Stats      Stats          `json:"stats"`
	Live       *Progress      `json:"live,omitempty"`    // when this explorer started it
	Workers    string         `json:"workers,omitempty"` // who runs it, for a group handed to workers ("temporal")
	Runs       []Episode      `json:"runs,omitempty"`    // on the group's own page
}

// groupFrom builds a group from its member runs (episode 1 first).
func (x *Explorer) groupFrom(runs []agentenv.Run, now time.Time, withRuns bool) Group {
	head := runs[0]
	g := Group{ID: head.ID, Task: head.Task, TaskDigest: head.TaskDigest, File: head.Attrs["file"], Created: head.Created,
		Episodes: len(runs), Counts: map[string]int{}}
	instances := map[string]bool{}
	for _, r := range runs {
		e := episodeOf(r, now)
		g.Counts[e.Outcome]++
		if e.Outcome == string(task.OutcomeRunning) {
			g.Running = true
		}
		if r.Ended.After(g.Ended) {
			g.Ended = r.Ended
		}
		instances[instanceKey(r)] = true
		if withRuns {
			g.Runs = append(g.Runs, e)
		}
	}
	g.Instances = len(instances)
	g.Live = x.live.progress(head.ID)
	if g.Live != nil && !g.Live.Done {
		g.Running = true
	}
	if g.Running {
		g.Ended = time.Time{}
	}
	g.Stats = statsOf(runs, now)
	return g
}

// otherGroup is the error of asking for a group by the id of one of its later episodes: the
// handlers redirect to the group's own id.
type otherGroup string

func (g otherGroup) Error() string { return "run " + string(g) + " is episode 1 of this group" }

// redirect writes a redirect to the group when err is an otherGroup, under prefix (/groups/
// or /api/v1/groups/), and reports whether it did.
func redirect(w http.ResponseWriter, r *http.Request, err error, prefix string) bool {
	var g otherGroup
	if !errors.As(err, &g) {
		return false
	}
	http.Redirect(w, r, prefix+url.PathEscape(string(g)), http.StatusPermanentRedirect)
	return true
}

// group returns the group whose episode 1 is run id, with its runs.
func (x *Explorer) group(ctx context.Context, id string) (Group, error) {
	head, err := x.cfg.Ledger.Runs().Get(ctx, id)
	if err != nil {
		return Group{}, err
	}
	if isGroupDoc(head) {
		return x.exactGroup(ctx, head, time.Now(), true)
	}
	if gid, err := x.groupOf(ctx, head); err != nil {
		return Group{}, err
	} else if gid != id {
		return Group{}, otherGroup(gid)
	}
	runs, err := x.members(ctx, head)
	if err != nil {
		return Group{}, err
	}
	return x.groupFrom(runs, time.Now(), true), nil
}

// groups returns a page of groups, newest first.
func (x *Explorer) groups(ctx context.Context, cursor string, limit int) ([]Group, string, error) {
	p, err := x.cfg.Ledger.Runs().Page(ctx, agentenv.DocQuery{Fields: map[string]string{"attrs.episode": "1"}, Cursor: cursor, Limit: limit})
	if err != nil {
		return nil, "", err
	}
	now := time.Now()
	out := make([]Group, 0, len(p.Docs))
	seen := map[string]bool{}
	for _, head := range p.Docs {
		if gid := head.Attrs[attrGroup]; gid != "" {
			// An exact group: listed once, at its newest episode 1 on this page.
			if seen[gid] || head.Attrs[attrResumedBy] != "" {
				continue
			}
			seen[gid] = true
			doc, err := x.cfg.Ledger.Runs().Get(ctx, gid)
			if err != nil {
				continue // its document is not written (yet): not a group to show
			}
			g, err := x.exactGroup(ctx, doc, now, false)
			if err != nil {
				return nil, "", err
			}
			out = append(out, g)
			continue
		}
		runs, err := x.members(ctx, head)
		if err != nil {
			return nil, "", err
		}
		out = append(out, x.groupFrom(runs, now, false))
	}
	return out, p.Next, nil
}
