package eval

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/task"
)

// Remote runs a group's episodes on workers other than the process that starts the group
// (package temporal), which share its ledger. The group's document is written, running, before
// Submit; the workers run its slots with [Runner.Plan] and [Runner.RunSlot] and write its end
// with [Runner.Finish], so a group outlives the process that submitted it.
type Remote interface {
	// Name names the remote in the group's document and in messages, such as "temporal".
	Name() string
	// Submit hands group g, already in the ledger, to the workers and returns once they have
	// it, before any episode ran. An error means the group was not taken.
	Submit(ctx context.Context, g Group) error
	// Wait blocks until group id has ended. When ctx is done first, it cancels the group, waits
	// (bounded) until its episodes are torn down, and returns ctx's error.
	Wait(ctx context.Context, id string) error
	// Cancel cancels group id and blocks until its workers have torn its episodes down and
	// written its end, or ctx ends; a group that has already ended is left as it is.
	Cancel(ctx context.Context, id string) error
}

// followInterval is how often a submitter reads its group's progress from the ledger.
const followInterval = time.Second

// submit writes g as running on r.Remote, hands it over and, unless o.Detach, follows it to its
// end from the ledger (Progress as a local run reports it) and returns its Result.
func (r *Runner) submit(ctx context.Context, g Group, o Options) (Result, error) {
	if o.Keep {
		return Result{}, fmt.Errorf("group %s: --keep holds what episodes made in the process that ran them, and %s workers end theirs: %w", g.Name, r.Remote.Name(), agentenv.ErrInvalid)
	}
	start := time.Now()
	l := r.ledger()
	st := Store{Ledger: l}
	g.Runner, g.Owner, g.Status, g.Retries = r.Remote.Name(), agentenv.Owner{}, agentenv.RunRunning, o.Retries
	g.File = absPath(g.File)
	for i := range g.Tasks {
		g.Tasks[i].File = absPath(g.Tasks[i].File)
	}
	if err := st.Put(ctx, g); err != nil {
		return Result{}, err
	}
	if err := r.Remote.Submit(ctx, g); err != nil {
		g.Status, g.Error, g.Ended = agentenv.RunFailed, "not submitted: "+err.Error(), time.Now().UTC()
		wctx, cancel := cleanup.Detached(ctx, groupWriteTimeout)
		defer cancel()
		return Result{}, errors.Join(err, st.Put(wctx, g))
	}
	r.logger().Info("group submitted", "group", g.ID, "runner", g.Runner)
	if o.Detach {
		return Result{Group: g}, nil
	}
	done := make(chan struct{})
	followed := make(chan struct{})
	go func() {
		defer close(followed)
		r.follow(ctx, g, start, done)
	}()
	werr := r.Remote.Wait(ctx, g.ID)
	close(done)
	<-followed
	rctx, cancel := cleanup.Detached(ctx, groupWriteTimeout)
	defer cancel()
	if got, err := st.Get(rctx, g.ID); err == nil {
		g = got
	}
	res, rerr := Collect(rctx, l, g)
	res.Elapsed = time.Since(start)
	res.Live = res.Tasks
	for _, s := range res.Tasks {
		for _, ep := range s.Episodes {
			res.CostUSD += episodeCost(ep)
		}
	}
	if g.Error == ErrCostCap.Error() {
		res.Stopped = g.Error
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("group %s: %w", g.ID, errors.Join(err, werr))
	}
	return res, errors.Join(werr, rerr)
}

// follow reports group g's progress from the ledger to r.Progress every followInterval until
// done is closed, and once more then.
func (r *Runner) follow(ctx context.Context, g Group, start time.Time, done <-chan struct{}) {
	if r.Progress == nil {
		return
	}
	st := Store{Ledger: r.ledger()}
	tick := time.NewTicker(followInterval)
	defer tick.Stop()
	last := Status{Done: -1}
	ended := map[string]bool{} // episodes whose end was reported
	report := func(c context.Context) {
		runs, err := st.Episodes(c, g)
		if err != nil {
			return
		}
		s := statusOf(g, runs, start)
		// One report per episode that ended since, as a local run gives, then the counts.
		news := 0
		for k, run := range Latest(runs) {
			if run.Status == agentenv.RunRunning || ended[run.ID] || k.Task >= len(g.Tasks) {
				continue
			}
			ended[run.ID] = true
			ep := episodeOf(run)
			one := s
			one.Last, one.LastTask = &ep, g.Tasks[k.Task].Task
			r.Progress(one)
			news++
		}
		if news == 0 && (s.Done != last.Done || s.Running != last.Running || s.Errors != last.Errors) {
			r.Progress(s)
		}
		last = s
	}
	for {
		select {
		case <-done:
			c, cancel := cleanup.Detached(ctx, groupWriteTimeout)
			report(c)
			cancel()
			return
		case <-tick.C:
			report(ctx)
		}
	}
}

// statusOf counts group g's slots by their latest episode in runs.
func statusOf(g Group, runs []agentenv.Run, start time.Time) Status {
	s := Status{Group: g.ID, Total: g.Slots(), Elapsed: time.Since(start)}
	for _, run := range Latest(runs) {
		if run.Status == agentenv.RunRunning {
			s.Running++
			continue
		}
		s.add(episodeOf(run))
	}
	s.Queued = max(s.Total-s.Done-s.Running, 0)
	if s.Done > 0 && s.Queued+s.Running > 0 {
		s.ETA = time.Duration(float64(s.Elapsed) / float64(s.Done) * float64(s.Queued+s.Running))
	}
	return s
}

// absPath returns p made absolute when it names a file or folder here, so that workers in
// other folders (sharing this file system) find it; a built-in name such as "hello" is kept.
func absPath(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	if _, err := os.Stat(p); err != nil {
		return p
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}

// Plan returns group id and the slots a worker of its Remote is to run: the pending ones (see
// Pending), in slot order, once the group's files are found unchanged (by digest). An error
// wrapping agentenv.ErrInvalid or ErrNotFound means the group can run nowhere.
func (r *Runner) Plan(ctx context.Context, id string) (Group, []SlotKey, error) {
	st := Store{Ledger: r.ledger()}
	g, err := st.Get(ctx, id)
	if err != nil {
		return Group{}, nil, fmt.Errorf("plan: %w", err)
	}
	if _, err := r.reload(ctx, g); err != nil {
		return g, nil, fmt.Errorf("plan %s: %w", id, err)
	}
	runs, err := st.Episodes(ctx, g)
	if err != nil {
		return g, nil, fmt.Errorf("plan: %w", err)
	}
	return g, Pending(g, runs), nil
}

// SlotResult is what a worker reports of one slot's episode: small, and free of secrets, as it
// travels through the remote's history.
type SlotResult struct {
	Run     string       `json:"run"`
	Outcome task.Outcome `json:"outcome"`
	Score   *float64     `json:"score,omitempty"`
	CostUSD float64      `json:"cost_usd,omitempty"`
}

// workerLostMsg is the error of an episode whose worker died while it ran.
const workerLostMsg = "its worker was lost mid-episode; what it made was torn down and the slot ran again"

// RunSlot runs slot k of group id on a worker of the group's Remote, and is safe to call again
// for the same slot after a worker died: a slot whose latest episode finished is not run again
// (its result is returned), and an episode of the slot left running by a lost worker is torn
// down first (the receipt verified), marked replaced, and recorded as the first attempts of the
// new episode's run document, which alone then fills the slot. The error is non-nil for bad
// input, a teardown that failed (what was left must not be forgotten: the caller retries) or
// when ctx ended; how the episode went is in the result.
func (r *Runner) RunSlot(ctx context.Context, id string, k SlotKey) (SlotResult, error) {
	st := Store{Ledger: r.ledger()}
	g, err := st.Get(ctx, id)
	if err != nil {
		return SlotResult{}, fmt.Errorf("slot %s: %w", k, err)
	}
	f, err := r.reload(ctx, g)
	if err != nil {
		return SlotResult{}, fmt.Errorf("group %s: %w", id, err)
	}
	if k.Task < 0 || k.Task >= len(f.Tasks) {
		return SlotResult{}, fmt.Errorf("group %s: %s: no such task: %w", id, k, agentenv.ErrInvalid)
	}
	runs, err := st.Episodes(ctx, g)
	if err != nil {
		return SlotResult{}, err
	}
	runs = ofSlot(runs, k)
	if latest, ok := Latest(runs)[k]; ok && Finished(latest) {
		return slotResult(latest), nil
	}
	prior, err := r.endLost(ctx, id, runs, true)
	if err != nil {
		return SlotResult{}, fmt.Errorf("group %s: %s: %w", id, k, err)
	}
	e := f.Tasks[k.Task]
	opts := e.options([]task.Slot{{Instance: k.Instance, Attempt: k.Attempt}})
	opts.Retries, opts.Prior = g.Retries, prior
	opts.Attrs = g.episodeAttrs(k.Task)
	sum, err := r.runnerFor(f, e, nil).Run(ctx, e.Task, opts)
	if len(sum.Episodes) != 1 {
		return SlotResult{}, fmt.Errorf("group %s: %s: %w", id, k, err)
	}
	ep := sum.Episodes[0]
	return SlotResult{Run: ep.Run, Outcome: ep.Outcome, Score: ep.Score, CostUSD: episodeCost(ep)}, err
}

// endLost tears down each episode of runs (one slot's) still marked running, which only a lost
// worker can have left, ends it as an infrastructure error (with replaced, as replaced by a new
// episode of group id), and returns its attempts (those it carried, then itself) for the new
// episode's record.
func (r *Runner) endLost(ctx context.Context, id string, runs []agentenv.Run, replaced bool) ([]agentenv.RunAttempt, error) {
	var prior []agentenv.RunAttempt
	for _, old := range runs {
		if old.Status != agentenv.RunRunning {
			continue
		}
		rc, err := r.Tasks.Teardown(ctx, old.ID)
		if err != nil {
			return nil, fmt.Errorf("tear down run %s of a lost worker: %w", old.ID, err)
		}
		now := time.Now().UTC()
		prior = append(prior, old.Attempts...)
		prior = append(prior, agentenv.RunAttempt{Attempt: len(prior) + 1, Error: workerLostMsg, ErrorKind: agentenv.StepErrorInfra,
			Started: old.Created, Elapsed: now.Sub(old.Created), Receipt: &rc})
		if old.Attrs == nil {
			old.Attrs = map[string]string{}
		}
		if replaced {
			old.Attrs[AttrResumedBy] = id
		}
		old.Receipt, old.Error, old.Ended = &rc, workerLostMsg, now
		task.SetOutcome(&old, task.OutcomeError)
		if err := r.ledger().Runs().Put(ctx, old); err != nil {
			return nil, fmt.Errorf("mark run %s replaced: %w", old.ID, err)
		}
		r.logger().Warn("episode of a lost worker torn down; running its slot again", "group", id, "run", old.ID)
	}
	return prior, nil
}

// ofSlot returns the episodes of runs that fill slot k.
func ofSlot(runs []agentenv.Run, k SlotKey) []agentenv.Run {
	return slices.DeleteFunc(runs, func(x agentenv.Run) bool { s, ok := slotOf(x); return !ok || s != k })
}

func slotResult(run agentenv.Run) SlotResult {
	ep := episodeOf(run)
	return SlotResult{Run: run.ID, Outcome: ep.Outcome, Score: ep.Score, CostUSD: episodeCost(ep)}
}

// Finish writes group id's end as its Remote saw it: cancelled (with why: "cancelled", or the
// cost cap) when stopped is not empty, else completed.
func (r *Runner) Finish(ctx context.Context, id, stopped string) error {
	st := Store{Ledger: r.ledger()}
	g, err := st.Get(ctx, id)
	if err != nil {
		return fmt.Errorf("finish: %w", err)
	}
	g.Status, g.Error, g.Ended = agentenv.RunCompleted, "", time.Now().UTC()
	if stopped != "" {
		g.Status, g.Error = agentenv.RunCancelled, stopped
	}
	return st.Put(ctx, g)
}

// TeardownSlot tears down whatever episodes of slot k of group id still hold in the ledger
// (records not gone, deployments live): nothing when each episode ended as it should. It is the
// teardown a remote runs whatever ended the slot's worker, on a context of its own.
func (r *Runner) TeardownSlot(ctx context.Context, id string, k SlotKey) (agentenv.Receipt, error) {
	st := Store{Ledger: r.ledger()}
	g, err := st.Get(ctx, id)
	if err != nil {
		return agentenv.Receipt{}, fmt.Errorf("teardown slot: %w", err)
	}
	runs, err := st.Episodes(ctx, g)
	if err != nil {
		return agentenv.Receipt{}, err
	}
	runs = ofSlot(runs, k)
	if _, err := r.endLost(ctx, id, runs, false); err != nil {
		return agentenv.Receipt{}, fmt.Errorf("group %s: %s: %w", id, k, err)
	}
	rc := agentenv.Receipt{Started: time.Now().UTC()}
	var errs []error
	for _, run := range runs {
		live, err := r.ledger().List(ctx, agentenv.Filter{Run: run.ID})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !slices.ContainsFunc(live, func(x agentenv.Record) bool { return x.State != agentenv.StateGone }) {
			continue
		}
		one, err := r.Tasks.Teardown(ctx, run.ID)
		rc.Items = append(rc.Items, one.Items...)
		errs = append(errs, err)
	}
	rc.Finished = time.Now().UTC()
	return rc, errors.Join(errs...)
}
