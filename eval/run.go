package eval

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/task"
)

// ErrCostCap is why a group stopped starting episodes: its model cost passed Options.MaxCostUSD.
var ErrCostCap = errors.New("model cost passed --max-cost-usd")

// groupWriteTimeout bounds the last write of a group's document once its context is done.
const groupWriteTimeout = 10 * time.Second

// Runner runs evals as run groups, each task's episodes through a copy of Tasks.
type Runner struct {
	Tasks    *task.Runner    // runs the episodes; its Ledger (or its Manager's) holds the group
	Ledger   agentenv.Ledger // where group documents go; Tasks' ledger if nil
	Logger   *slog.Logger
	Progress func(Status) // receives the group's counts after every change; may be nil
	// LoadTask loads a task named in a group document for Resume (a path, or a built-in name
	// such as "hello"); task.LoadPath if nil.
	LoadTask func(name string) (*task.Task, error)
	// Remote, when set, runs groups on its workers instead of in this process; see Remote.
	Remote Remote
	// Fetch, when set, makes a bundle present on this machine: given a group's bundle pinned
	// to its digest (Group.Bundle, Group.BundleDigest) it returns the folder holding the
	// bundle's files here. A group run from a bundle is then read from that folder, so that a
	// worker on another machine than the submitter's, or a resume after the cache was
	// emptied, runs the same bytes, with the bundle's images pinned (Fetched.Pinned). Without
	// it the group's files are read where they were.
	Fetch func(ctx context.Context, ref, digest string) (Fetched, error)
}

// Fetched is a bundle made present on this machine by Runner.Fetch.
type Fetched struct {
	Tree   string            // the folder holding its files
	Pinned map[string]string // its images pinned by digest (task.Runner.Pinned); nil for none
}

// Options tune one Run or Resume.
type Options struct {
	Concurrency int     // episodes at once over the group; the eval file's if 0
	MaxCostUSD  float64 // stop starting episodes once the summed model cost passes it; no cap if 0
	Keep        bool    // leave what the episodes made running (task.RunOptions.Keep)
	Retries     int     // whole-episode retries after an infrastructure error (task.RunOptions.Retries)
	// Shard runs only the slots dealt to it (see Shard) as a group of its own, which
	// Merge joins with the other shards'; zero runs every slot. Resume takes the group's.
	Shard Shard
	// Detach returns once a Remote has taken the group, with only the Result's Group set.
	Detach bool
	// Bundle and BundleDigest name the bundle the eval's files were unpacked from (agentenv
	// run REF): the reference as given and the manifest digest it resolved to, recorded on
	// the group and each episode (AttrBundle, AttrBundleDigest). BundleTree is the folder it
	// was unpacked in, which the group's file paths start with (see Runner.Fetch). Resume
	// keeps the group's.
	Bundle, BundleDigest, BundleTree string
}

func (r *Runner) ledger() agentenv.Ledger {
	if r.Ledger != nil {
		return r.Ledger
	}
	if r.Tasks != nil && r.Tasks.Ledger != nil {
		return r.Tasks.Ledger
	}
	if r.Tasks != nil && r.Tasks.Manager != nil {
		return r.Tasks.Manager.Ledger()
	}
	return nil
}

func (r *Runner) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Logger
}

// runnerFor returns the task runner of entry e of f: Tasks with e's model overrides, f's
// pinned images and the group's progress.
func (r *Runner) runnerFor(f *File, e Entry, progress func(task.Event)) *task.Runner {
	tr := *r.Tasks
	if f.Pinned != nil {
		tr.Pinned = f.Pinned
	}
	if len(e.Overrides.Model) > 0 {
		tr.Model = modelSource{base: r.Tasks.Model, over: e.Overrides.Model}
	}
	base := r.Tasks.Progress
	tr.Progress = func(ev task.Event) {
		if base != nil {
			base(ev)
		}
		if progress != nil {
			progress(ev)
		}
	}
	return &tr
}

// check asks each task's runner whether it would refuse the task and returns the group's
// tasks with their instance counts, or every refusal at once, before anything is deployed.
func (r *Runner) check(f *File) ([]GroupTask, error) {
	var errs []error
	out := make([]GroupTask, len(f.Tasks))
	for i, e := range f.Tasks {
		n, err := r.runnerFor(f, e, nil).Check(e.Task, e.options(nil))
		if err != nil {
			if e.Line > 0 {
				err = fmt.Errorf("%s:%d: tasks[%d]: %w", f.Path, e.Line, i, err)
			}
			errs = append(errs, err)
			continue
		}
		out[i] = GroupTask{Task: e.Task.Name, File: e.Task.File, Digest: e.Task.Digest, K: e.K, Instances: n, Seeds: e.Seeds, Overrides: e.Overrides}
	}
	return out, errors.Join(errs...)
}

// Run runs every episode of f as a new group. Bad input (any task's) is an error wrapping
// agentenv.ErrInvalid before the group is written or anything deployed. The group's document
// is written before its first episode and updated at its end. The error is non-nil for bad
// input, a ledger that cannot take the group, or when ctx was cancelled; how the episodes went
// is in the Result.
func (r *Runner) Run(ctx context.Context, f *File, opts Options) (Result, error) {
	if r.ledger() == nil {
		return Result{}, fmt.Errorf("eval %s: no ledger: %w", f.Name, agentenv.ErrInvalid)
	}
	tasks, err := r.check(f)
	if err != nil {
		return Result{}, err
	}
	g := Group{ID: lifecycle.NewID("group"), Name: f.Name, File: f.Path, Digest: f.Digest, Tasks: tasks,
		Concurrency: f.Concurrency, MaxCostUSD: opts.MaxCostUSD, Shard: opts.Shard, Created: time.Now().UTC(),
		Bundle: opts.Bundle, BundleDigest: opts.BundleDigest, BundleTree: opts.BundleTree}
	if opts.Concurrency > 0 {
		g.Concurrency = opts.Concurrency
	}
	if r.Remote != nil {
		return r.submit(ctx, g, opts)
	}
	slots := make([][]task.Slot, len(tasks))
	for _, k := range g.SlotKeys() {
		slots[k.Task] = append(slots[k.Task], task.Slot{Instance: k.Instance, Attempt: k.Attempt})
	}
	return r.run(ctx, f, g, slots, opts)
}

// Resume runs the slots of group id whose latest episode did not finish (see Pending), and
// leaves the finished ones and their records alone. The eval (or task) file must be the one
// the group ran, by digest. A group whose process still runs is refused. Each unfinished
// episode it replaces is marked cancelled (if it was still running) with attrs.resumed_by.
func (r *Runner) Resume(ctx context.Context, id string, opts Options) (Result, error) {
	l := r.ledger()
	if l == nil {
		return Result{}, fmt.Errorf("resume %s: no ledger: %w", id, agentenv.ErrInvalid)
	}
	st := Store{Ledger: l}
	g, err := st.Get(ctx, id)
	if err != nil {
		return Result{}, fmt.Errorf("resume: %w", err)
	}
	switch {
	case g.Runner != "" && r.Remote != nil:
		// Submitted again: the remote refuses a group its workers still run.
	case g.Runner != "" && Alive(g):
		return Result{}, fmt.Errorf("resume %s: the group runs on %s workers (resume it there with --runner %s): %w", id, g.Runner, g.Runner, agentenv.ErrConflict)
	case Alive(g):
		return Result{}, fmt.Errorf("resume %s: the group is still running (process %d): %w", id, g.Owner.PID, agentenv.ErrConflict)
	}
	if g.MergedInto != "" {
		return Result{}, fmt.Errorf("resume %s: the shard was merged into group %s (resume that one): %w", id, g.MergedInto, agentenv.ErrInvalid)
	}
	f, err := r.reload(ctx, g)
	if err != nil {
		return Result{}, fmt.Errorf("resume %s: %w", id, err)
	}
	tasks, err := r.check(f)
	if err != nil {
		return Result{}, fmt.Errorf("resume %s: %w", id, err)
	}
	for i := range tasks {
		if tasks[i].Instances != g.Tasks[i].Instances {
			return Result{}, fmt.Errorf("resume %s: task %s has %d instances now, the group ran %d: %w", id, tasks[i].Task, tasks[i].Instances, g.Tasks[i].Instances, agentenv.ErrInvalid)
		}
	}
	runs, err := st.Episodes(ctx, g)
	if err != nil {
		return Result{}, fmt.Errorf("resume: %w", err)
	}
	pending := Pending(g, runs)
	latest := Latest(runs)
	if r.Remote != nil {
		// The workers replace each unfinished episode as they reach its slot (RunSlot), once
		// the remote has checked that no worker runs the group still.
		latest = nil
	}
	for _, k := range pending {
		old, ok := latest[k]
		if !ok {
			continue
		}
		if old.Attrs == nil {
			old.Attrs = map[string]string{}
		}
		old.Attrs[AttrResumedBy] = id
		if old.Status == agentenv.RunRunning {
			task.SetOutcome(&old, task.OutcomeCancelled)
			old.Error = interruptedMsg
		}
		if err := l.Runs().Put(ctx, old); err != nil {
			return Result{}, fmt.Errorf("resume %s: mark run %s: %w", id, old.ID, err)
		}
	}
	slots := make([][]task.Slot, len(g.Tasks))
	for _, k := range pending {
		slots[k.Task] = append(slots[k.Task], task.Slot{Instance: k.Instance, Attempt: k.Attempt})
	}
	if opts.Concurrency > 0 {
		g.Concurrency = opts.Concurrency
	}
	if opts.MaxCostUSD > 0 {
		g.MaxCostUSD = opts.MaxCostUSD
	}
	g.Error, g.Ended = "", time.Time{}
	r.logger().Info("resuming group", "group", id, "pending", len(pending), "of", g.Slots())
	if r.Remote != nil {
		return r.submit(ctx, g, opts)
	}
	return r.run(ctx, f, g, slots, opts)
}

// reload loads the file group g ran and checks it is the same.
func (r *Runner) reload(ctx context.Context, g Group) (*File, error) {
	var pinned map[string]string
	if g.Bundle != "" && g.BundleTree != "" && r.Fetch != nil {
		got, err := r.Fetch(ctx, g.Bundle, g.BundleDigest)
		if err != nil {
			return nil, fmt.Errorf("the group's bundle %s: %w", g.Bundle, err)
		}
		g, pinned = g.movedTo(got.Tree), got.Pinned
	}
	f, err := r.reloadFile(g)
	if err != nil {
		return nil, err
	}
	f.Pinned = pinned
	return f, nil
}

// reloadFile loads the file group g ran, read where g says, and checks it is the same.
func (r *Runner) reloadFile(g Group) (*File, error) {
	if g.Digest != "" {
		f, err := Load(g.File)
		if err != nil {
			return nil, err
		}
		if f.Digest != g.Digest {
			return nil, fmt.Errorf("eval file %s changed since the group ran (digest %s, now %s): %w", g.File, g.Digest, f.Digest, agentenv.ErrInvalid)
		}
		return f, checkTasks(g, f)
	}
	// A group of one task, or of a dataset's tasks: each is loaded again from its own file.
	load := r.LoadTask
	if load == nil {
		load = task.LoadPath
	}
	f := &File{Name: g.Name, Concurrency: max(g.Concurrency, 1), Path: g.File}
	for _, gt := range g.Tasks {
		t, err := load(gt.File)
		if err != nil {
			return nil, err
		}
		f.Tasks = append(f.Tasks, Entry{Task: t, K: max(gt.K, 1), Seeds: gt.Seeds, Overrides: gt.Overrides})
	}
	return f, checkTasks(g, f)
}

func checkTasks(g Group, f *File) error {
	if len(f.Tasks) != len(g.Tasks) {
		return fmt.Errorf("%s has %d tasks, the group ran %d: %w", f.Path, len(f.Tasks), len(g.Tasks), agentenv.ErrInvalid)
	}
	for i, e := range f.Tasks {
		if e.Task.Digest != g.Tasks[i].Digest {
			return fmt.Errorf("task file %s changed since the group ran: %w", e.Task.File, agentenv.ErrInvalid)
		}
	}
	return nil
}

// run writes g as running, runs slots (per task) under one limit, and writes g's end.
func (r *Runner) run(ctx context.Context, f *File, g Group, slots [][]task.Slot, o Options) (Result, error) {
	start := time.Now()
	l := r.ledger()
	st := Store{Ledger: l}
	owner, err := lifecycle.CurrentOwner()
	if err != nil {
		return Result{}, err
	}
	g.Owner, g.Status = owner, agentenv.RunRunning
	if err := st.Put(ctx, g); err != nil {
		return Result{}, err
	}
	tr := newTracker(g, slots, r.Progress)
	admit := tr.admitter(ctx, max(g.Concurrency, 1), g.MaxCostUSD)
	var wg sync.WaitGroup
	runErrs := make([]error, len(f.Tasks))
	live := make([]task.Summary, len(f.Tasks))
	for ti, e := range f.Tasks {
		if len(slots[ti]) == 0 {
			continue
		}
		opts := e.options(slots[ti])
		opts.Keep, opts.Retries = o.Keep, o.Retries
		opts.Attrs = g.episodeAttrs(ti)
		opts.Admit = admit
		opts.Done = func(ep task.Episode) { tr.done(ti, ep) }
		tr.tick()
		wg.Add(1)
		go func() {
			defer wg.Done()
			live[ti], runErrs[ti] = r.runnerFor(f, e, tr.event).Run(ctx, e.Task, opts)
		}()
	}
	wg.Wait()

	g.Ended = time.Now().UTC()
	g.Owner = agentenv.Owner{}
	switch {
	case ctx.Err() != nil:
		g.Status, g.Error = agentenv.RunCancelled, "cancelled"
	case tr.capped():
		g.Status, g.Error = agentenv.RunCancelled, ErrCostCap.Error()
	default:
		g.Status = agentenv.RunCompleted
	}
	// On its own bound even after a hard stop, like an episode's last write: a group left
	// "running" would be resumed as if its runner still worked on it.
	wctx, cancel := cleanup.Detached(ctx, groupWriteTimeout)
	defer cancel()
	werr := st.Put(wctx, g)
	res, rerr := Collect(wctx, l, g)
	res.Elapsed = time.Since(start)
	res.Live = live
	res.CostUSD = tr.cost()
	if g.Status == agentenv.RunCancelled && g.Error == ErrCostCap.Error() {
		res.Stopped = g.Error
	}
	if err := ctx.Err(); err != nil {
		return res, fmt.Errorf("group %s: %w", g.ID, err)
	}
	return res, errors.Join(werr, rerr, errors.Join(runErrs...))
}

// episodeCost is the model cost an episode's prompt_agent steps report (output cost_usd).
func episodeCost(ep task.Episode) float64 {
	var c float64
	for _, s := range ep.Steps {
		if v, err := strconv.ParseFloat(s.Outputs["cost_usd"], 64); err == nil && v > 0 {
			c += v
		}
	}
	return c
}

// keptTeardownTimeout bounds the teardown of one kept episode, and the write of its receipt.
const keptTeardownTimeout = 5 * time.Minute

// HoldKept holds what the episodes of res kept (a Run with Options.Keep) until ctx is done
// (the user's Ctrl-C), then tears it down and records each episode's receipt, in res.Live and
// in its run document. Each teardown runs on a cleanup context of its own (bounded, and
// stopped by a second Ctrl-C), since ctx has ended by then.
func (r *Runner) HoldKept(ctx context.Context, res *Result) error {
	<-ctx.Done()
	var errs []error
	for _, sum := range res.Live {
		for i, ep := range sum.Episodes {
			cctx, cancel := cleanup.Context(ctx, keptTeardownTimeout)
			rc, err := r.Tasks.Teardown(cctx, ep.Run)
			cancel()
			sum.Episodes[i].Receipt = &rc
			if err != nil {
				errs = append(errs, fmt.Errorf("tear down kept run %s: %w", ep.Run, err))
			}
		}
	}
	return errors.Join(errs...)
}
