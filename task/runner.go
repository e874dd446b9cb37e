package task

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/lifecycle"
	"gopkg.in/yaml.v3"
)

// ModelSource resolves the [model] settings (model.base_url, model.name, model.api_key,
// model.input_price, model.output_price) at
// the moment an agent needs them; *config.Config implements it. Values are never recorded.
type ModelSource interface {
	Get(key string) (string, error)
}

// Runner runs tasks as graded episodes. Every sandbox goes through Manager and is written to
// the ledger before it is created; every episode ends with the teardown of everything it made
// unless RunOptions.Keep. A Runner is safe for concurrent use once configured.
type Runner struct {
	Manager  *lifecycle.Manager
	Ledger   agentenv.Ledger // run documents and records; Manager.Ledger() if nil
	Deployer EnvDeployer     // deploys env files for deploy_env; those steps fail if nil
	Tools    ToolServer      // serves a sandbox's tools for serve_tools (task/toolgate); those steps fail if nil
	Logger   *slog.Logger    // nil means discard
	Workdir  string          // run folders (trajectories) go to Workdir/runs/<run id>; os.TempDir() if empty
	Progress func(Event)     // receives every step, episode and teardown event; may be nil
	Model    ModelSource     // settings of the built-in model agent; its steps fail if nil

	// HTTPClient is used for gateways and the model endpoint; a fresh client per call if nil.
	HTTPClient *http.Client
	// DrainTimeout bounds how long a stopping episode waits for its steps in flight.
	DrainTimeout time.Duration
	// TeardownTimeout bounds an episode's final teardown.
	TeardownTimeout time.Duration
	// ImageMap maps an image a Dockerfile's FROM names to the image to build from instead
	// (agentenv.Build.BaseMap), for deploy_sandbox's build, and a deploy_sandbox image to the
	// image to run: the images.map setting and the --image-map flags, so that tasks need no
	// registry.
	ImageMap map[string]string
	// Pinned maps an image a deploy_sandbox step or a deploy_env step's env names to the same
	// image pinned by digest in a registry (a bundle pushed with its images): the sandbox or
	// component is created with it as SandboxSpec.Pinned, which providers that can pull run
	// from there.
	Pinned map[string]string
	// Logins gives the login that pulls a pinned image (SandboxSpec.PullAuth); nil pulls
	// anonymously.
	Logins agentenv.Logins
}

// RunOptions tune one Run call.
type RunOptions struct {
	K               int    // episodes per task instance; 1 if 0
	Concurrency     int    // episodes at once; 1 if 0
	StepConcurrency int    // steps at once within an episode; DefaultStepConcurrency if 0
	Seeds           string // CSV file: a header of placeholder names, one task instance per row
	Provider        string // provider (or comma chain) of steps that name none
	Keep            bool   // leave what episodes made running; see Runner.Teardown

	// Retries is how many times an episode that ended on an infrastructure error runs again
	// from scratch: the task's retries.infra if 0, none if negative. Never with Keep.
	Retries int

	// Group fields, for a caller running several Run calls as one group (package eval).
	Slots        []Slot            // the episodes to run; every instance × K if empty
	Attrs        map[string]string // added to every run document's attrs (such as "group")
	Placeholders map[string]string // fill these placeholders in every instance, over the seeds row
	// Admit, when set, replaces Concurrency: it is called before each episode starts and
	// returns once the episode may start, with the release to call when it has ended; an
	// error leaves the episode (and every later one) not started, outcome cancelled.
	Admit func(ctx context.Context) (release func(), err error)
	// Done, when set, receives each episode's line as it ends (from the episode's goroutine).
	Done func(Episode)
	// Prior are attempts of the episode made before this Run call and lost with the process
	// that ran them (a worker killed mid-episode, torn down since): they open every run
	// document's Attempts, so the record keeps them while the episode counts once.
	Prior []agentenv.RunAttempt
}

// Slot names one episode of a Run call: the 0-based task instance (seeds row) and the 1-based
// attempt within it (1..K). Each run document carries both as attrs.instance and attrs.attempt.
type Slot struct {
	Instance int `json:"instance"`
	Attempt  int `json:"attempt"`
}

// infraRetries is the number of whole-episode retries of t under opts.
func (opts RunOptions) infraRetries(t *Task) int {
	switch {
	case opts.Keep || opts.Retries < 0:
		return 0
	case opts.Retries > 0:
		return opts.Retries
	}
	return t.InfraRetries
}

func (r *Runner) logger() *slog.Logger {
	if r.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return r.Logger
}

func (r *Runner) ledger() agentenv.Ledger {
	if r.Ledger != nil {
		return r.Ledger
	}
	if r.Manager != nil {
		return r.Manager.Ledger()
	}
	return nil
}

func (r *Runner) runs() agentenv.DocStore[agentenv.Run] {
	if l := r.ledger(); l != nil {
		return l.Runs()
	}
	return nil
}

func (r *Runner) drainTimeout() time.Duration {
	if r.DrainTimeout > 0 {
		return r.DrainTimeout
	}
	return DefaultDrainTimeout
}

func (r *Runner) teardownTimeout() time.Duration {
	if r.TeardownTimeout > 0 {
		return r.TeardownTimeout
	}
	return DefaultTeardownTimeout
}

func (r *Runner) httpClient() *http.Client {
	if r.HTTPClient != nil {
		return r.HTTPClient
	}
	return &http.Client{}
}

// instance is one seeds row of a task: every step's fields with placeholders filled.
type instance struct {
	seed   map[string]string
	fields map[string]*yaml.Node
}

// instances fills the task's placeholders from each seeds row and checks every step again, so
// that a missing placeholder or a bad value is an error before anything runs.
func (r *Runner) instances(t *Task, seeds string, fixed map[string]string) ([]instance, error) {
	rows := []map[string]string{nil}
	if seeds != "" {
		var err error
		if rows, err = readSeeds(seeds); err != nil {
			return nil, fmt.Errorf("%w: %w", err, agentenv.ErrInvalid)
		}
	}
	if len(fixed) > 0 {
		for i, row := range rows {
			merged := maps.Clone(row)
			if merged == nil {
				merged = map[string]string{}
			}
			maps.Copy(merged, fixed)
			rows[i] = merged
		}
	}
	var out []instance
	for i, row := range rows {
		in := instance{seed: row, fields: map[string]*yaml.Node{}}
		var errs []error
		for _, s := range t.Steps {
			f, err := fillPlaceholders(s.Type, s.fields, row)
			if err == nil {
				_, err = t.decodeFields(s, f)
			}
			if err != nil {
				where := fmt.Sprintf("%s:%d: %s (%s)", t.File, s.Line, s.path, s.ID)
				if seeds == "" {
					errs = append(errs, fmt.Errorf("%s: %w: give a seeds file with a column of that name: %w", where, err, agentenv.ErrInvalid))
				} else {
					errs = append(errs, fmt.Errorf("%s: seeds row %d: %w: %w", where, i+1, err, agentenv.ErrInvalid))
				}
				continue
			}
			in.fields[s.ID] = f
			// A step's provider is checked here, with the rest of the file, not when the step runs.
			if p := providerField(f); p != nil && r.Manager != nil {
				if _, err := r.Manager.ParseChain(p.Value); err != nil {
					errs = append(errs, fmt.Errorf("%s:%d: %s (%s).provider: %w", t.File, s.Line, s.path, s.ID, err))
				}
			}
		}
		if len(errs) > 0 {
			return nil, errors.Join(errs...)
		}
		out = append(out, in)
	}
	return out, nil
}

// Run runs t: K episodes of each task instance (one per seeds row, or one), Concurrency at a
// time. Bad input (seeds, placeholders, options) is an error wrapping agentenv.ErrInvalid
// before anything is deployed. Each episode is a run document in the ledger and ends with the
// teardown of everything it made, on a detached bounded context, even when ctx is cancelled,
// unless opts.Keep. The error is non-nil only for bad input or when ctx was cancelled; how the
// episodes went is in the Summary.
func (r *Runner) Run(ctx context.Context, t *Task, opts RunOptions) (Summary, error) {
	start := time.Now()
	if opts.K <= 0 {
		opts.K = 1
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 1
	}
	sum := Summary{Task: t.Name, TaskDigest: t.Digest, K: opts.K}
	if r.runs() == nil {
		return sum, fmt.Errorf("run %s: no ledger: %w", t.Name, agentenv.ErrInvalid)
	}
	insts, err := r.check(t, opts)
	if err != nil {
		return sum, err
	}
	sum.Instances = len(insts)
	total := len(insts) * opts.K
	slots := opts.Slots
	if len(slots) == 0 {
		for n := range total {
			slots = append(slots, Slot{Instance: n / opts.K, Attempt: n%opts.K + 1})
		}
	}
	for _, sl := range slots {
		if sl.Instance < 0 || sl.Instance >= len(insts) || sl.Attempt < 1 || sl.Attempt > opts.K {
			return sum, fmt.Errorf("run %s: slot instance %d attempt %d: outside %d instances × k=%d: %w", t.Name, sl.Instance, sl.Attempt, len(insts), opts.K, agentenv.ErrInvalid)
		}
	}
	sum.Episodes = make([]Episode, len(slots))
	admit := opts.Admit
	if admit == nil {
		sem := make(chan struct{}, opts.Concurrency)
		admit = func(ctx context.Context) (func(), error) {
			select {
			case sem <- struct{}{}:
				return func() { <-sem }, nil
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
	}

	var progressMu sync.Mutex
	emit := func(ev Event) {
		if r.Progress != nil {
			progressMu.Lock()
			defer progressMu.Unlock()
			r.Progress(ev)
		}
	}
	var wg sync.WaitGroup
	stopped := false
	for n, sl := range slots {
		in := insts[sl.Instance]
		sum.Episodes[n] = Episode{Instance: sl.Instance, Attempt: sl.Attempt, Seed: in.seed, Outcome: OutcomeCancelled}
		if stopped {
			continue
		}
		release, err := admit(ctx)
		if err != nil {
			stopped = true
			continue
		}
		if ctx.Err() != nil {
			release()
			stopped = true
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer release()
			e := r.newEpisode(t, opts, in, sl, sl.Instance*opts.K+sl.Attempt, total, emit)
			res := e.run(ctx)
			res.Instance, res.Attempt, res.Seed = sl.Instance, sl.Attempt, in.seed
			sum.Episodes[n] = res
			if opts.Done != nil {
				opts.Done(res)
			}
		}()
	}
	wg.Wait()
	eps := sum.Episodes
	sum = Summarize(t.Name, opts.K, eps)
	sum.TaskDigest = t.Digest
	sum.Elapsed = time.Since(start)
	if err := ctx.Err(); err != nil {
		return sum, fmt.Errorf("run %s: %w", t.Name, err)
	}
	return sum, nil
}

// Check reports what Run would refuse before anything is deployed (options, seeds,
// placeholders, files the task names), without running t, and how many instances (seeds
// rows) Run would run.
func (r *Runner) Check(t *Task, opts RunOptions) (instances int, err error) {
	insts, err := r.check(t, opts)
	return len(insts), err
}

func (r *Runner) check(t *Task, opts RunOptions) ([]instance, error) {
	if err := errors.Join(t.preflight(opts), r.preflightJudges(t)); err != nil {
		return nil, err
	}
	return r.instances(t, opts.Seeds, opts.Placeholders)
}

// Teardown tears down everything run runID left (after a Run with Keep, or after a crash): its
// deployments, through the Deployer, and every lifecycle record carrying the run's id.
func (r *Runner) Teardown(ctx context.Context, runID string) (agentenv.Receipt, error) {
	rc, err := r.teardownRun(ctx, runID, nil)
	if runs := r.runs(); runs != nil {
		if doc, gerr := runs.Get(ctx, runID); gerr == nil {
			doc.Receipt = &rc
			if perr := putRun(ctx, runs, doc); perr != nil {
				err = errors.Join(err, fmt.Errorf("write run record: %w", perr))
			}
		}
	}
	return rc, err
}
