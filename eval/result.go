package eval

import (
	"context"
	"encoding/json"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

// Result is what a group holds: for each slot its latest episode, summarised per task and
// over all of them.
type Result struct {
	Group    Group
	Tasks    []task.Summary // one per eval task
	Overall  task.Summary   // every task's episodes pooled, instances apart
	Lines    []Line         // every slot, in slot order
	CostUSD  float64        // model cost of this Run or Resume's episodes
	Stopped  string         // why it stopped starting episodes early (the cost cap), if it did
	Elapsed  time.Duration
	NotRun   int // slots without an episode (a cost cap, an interruption)
	Replaced int // unfinished episodes a resume ran again
	// Live holds, per task, what this Run or Resume ran as the task runner summarised it
	// (receipts, warnings); the other fields are read back from the ledger.
	Live []task.Summary
}

// MarshalJSON writes r as `agentenv run EVAL --json` prints it: the group's id, name and
// status, the bundle it was run from (if any), the totals, each task's summary and each slot's
// episode (run id and outcome).
func (r Result) MarshalJSON() ([]byte, error) {
	strip := func(s task.Summary) task.Summary { s.Episodes = nil; return s }
	tasks := make([]task.Summary, len(r.Tasks))
	for i, s := range r.Tasks {
		tasks[i] = strip(s)
	}
	return json.Marshal(struct {
		Group    string         `json:"group"`
		Name     string         `json:"name"`
		File     string         `json:"file"`
		Status   string         `json:"status"`
		Bundle   string         `json:"bundle,omitempty"`
		BundleAt string         `json:"bundle_digest,omitempty"`
		Shard    string         `json:"shard,omitempty"`
		Merged   []string       `json:"merged_from,omitempty"`
		Stopped  string         `json:"stopped,omitempty"`
		Totals   task.Summary   `json:"totals"`
		Tasks    []task.Summary `json:"tasks"`
		Episodes []Line         `json:"episodes"`
		NotRun   int            `json:"not_run"`
		Replaced int            `json:"replaced"`
		CostUSD  float64        `json:"cost_usd"`
		Elapsed  time.Duration  `json:"elapsed_ns"`
	}{r.Group.ID, r.Group.Name, r.Group.File, string(r.Group.Status), r.Group.Bundle, r.Group.BundleDigest, r.Group.Shard.String(), r.Group.MergedFrom, r.Stopped, strip(r.Overall), tasks, r.Lines, r.NotRun, r.Replaced, r.CostUSD, r.Elapsed})
}

// Line is one slot of a group: the episode that fills it now.
type Line struct {
	Task     string       `json:"task"`
	TaskN    int          `json:"task_index"`
	Run      string       `json:"run,omitempty"` // empty if it never started
	Instance int          `json:"instance"`
	Attempt  int          `json:"attempt"`
	Outcome  task.Outcome `json:"outcome"`
	Score    *float64     `json:"score,omitempty"`
	Error    string       `json:"error,omitempty"`
}

// Collect reads group g's episodes from the ledger and summarises, for each slot, its latest
// episode; a slot without one counts as cancelled. A shard's summary is of its own slots.
func Collect(ctx context.Context, l agentenv.Ledger, g Group) (Result, error) {
	res := Result{Group: g}
	runs, err := Store{Ledger: l}.Episodes(ctx, g)
	if err != nil {
		return res, err
	}
	latest := Latest(runs)
	for _, r := range runs {
		if r.Attrs[AttrResumedBy] != "" {
			res.Replaced++
		}
	}
	var pooled []task.Episode
	minK := 0
	base := 0
	n := 0 // the slot's number over the whole eval, by which shards are dealt
	for ti, gt := range g.Tasks {
		var eps []task.Episode
		for i := range gt.Instances {
			for a := 1; a <= gt.K; a++ {
				n++
				if !g.Shard.Has(n - 1) {
					continue
				}
				ep := task.Episode{Instance: i, Attempt: a, Outcome: task.OutcomeCancelled}
				if r, ok := latest[SlotKey{ti, i, a}]; ok {
					ep = episodeOf(r)
				} else {
					res.NotRun++
				}
				eps = append(eps, ep)
				res.Lines = append(res.Lines, Line{Task: gt.Task, TaskN: ti, Run: ep.Run, Instance: i, Attempt: a, Outcome: ep.Outcome, Score: ep.Score, Error: ep.Error})
				p := ep
				p.Instance += base
				pooled = append(pooled, p)
			}
		}
		s := task.Summarize(gt.Task, gt.K, eps)
		s.TaskDigest = gt.Digest
		res.Tasks = append(res.Tasks, s)
		base += gt.Instances
		if minK == 0 || gt.K < minK {
			minK = gt.K
		}
	}
	res.Overall = task.Summarize(g.Name, minK, pooled)
	return res, nil
}

// Passed reports whether every slot's episode passed (or completed unscored). A shard's
// tasks with no slot dealt to it are left out, and a shard with no slot at all (more shards
// than slots) passes.
func (r Result) Passed() bool {
	shard := !r.Group.Shard.IsZero()
	n := 0
	for _, s := range r.Tasks {
		if shard && len(s.Episodes) == 0 {
			continue
		}
		if !s.AllPassed() {
			return false
		}
		n++
	}
	return n > 0 || (shard && len(r.Tasks) > 0)
}
