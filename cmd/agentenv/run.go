package main

import (
	"context"
	"fmt"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv/bundle"
	"github.com/agentenv/agentenv/config"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/eval"
	"github.com/agentenv/agentenv/harbor"
	"github.com/agentenv/agentenv/images"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/task"
	"github.com/agentenv/agentenv/task/toolgate"
)

// runFlags are agentenv run's flags.
type runFlags struct {
	k, concurrency  int
	retries         int
	seeds, provider string
	keep, json      bool
	passEnv         []string
	resume          string
	maxCost         float64
	stateStore      string
	shard           string // --shard I/N
	// Harbor tasks and datasets: the agent, which tasks, and base images mapped for builds.
	agent, command   string
	agentURL         string // --agent-url: the a2a agent of Harbor tasks
	include, exclude []string
	imageMap         []string
	// Where the group runs: --runner, --temporal, --namespace, --task-queue; --detach.
	runner runnerFlags
	detach bool
	// plainHTTP: a registry reference's registry is reached over plain HTTP.
	plainHTTP bool
}

// check refuses counts no run can mean: fewer than one episode, a negative concurrency, retry
// count or cost cap, a shard outside 1..N.
func (f runFlags) check() error {
	var bad []string
	if f.k < 1 {
		bad = append(bad, fmt.Sprintf("--k %d: want 1 or more episodes per instance", f.k))
	}
	if f.concurrency < 0 {
		bad = append(bad, fmt.Sprintf("--concurrency %d: want 1 or more (0: the eval file's, or 1)", f.concurrency))
	}
	if f.retries < 0 {
		bad = append(bad, fmt.Sprintf("--retries %d: want 0 (none) or more", f.retries))
	}
	if f.maxCost < 0 || math.IsNaN(f.maxCost) {
		bad = append(bad, fmt.Sprintf("--max-cost-usd %g: want more than 0 (0: no cap)", f.maxCost))
	}
	if f.shard != "" {
		if _, err := eval.ParseShard(f.shard); err != nil {
			bad = append(bad, fmt.Sprintf("--shard %s: want I/N with 1 ≤ I ≤ N, such as 2/8", f.shard))
		} else if f.resume != "" {
			bad = append(bad, "--shard with --resume: a resumed group keeps the shard it ran")
		}
	}
	if len(bad) > 0 {
		return usageError{strings.Join(bad, "; ")}
	}
	return nil
}

func newRunCmd(a *app) *cobra.Command {
	var f runFlags
	cmd := &cobra.Command{
		Use:   "run TASK_OR_FOLDER|EVAL.yaml|hello|REF [--k N] [--concurrency C] [--seeds FILE] [--provider P] [--keep] [--shard I/N] | --resume GROUP",
		Short: "Run graded episodes of a task or an eval, then tear down everything they made",
		Long: `run executes a task's steps as a DAG, K times (episodes), scores each with its verifiers,
and always ends by tearing down everything the episodes deployed, printing the receipt.
'agentenv run hello' is built in: it needs no Docker, no model and no config.

An eval file (a top-level 'tasks:' list: name, concurrency, tasks: [{task, k, seeds,
overrides}]) runs all its tasks' episodes as one run group under one concurrency limit, with
a progress line (done, running, queued, pass rate, ETA) and a summary per task and overall
(mean with its 95% interval, pass@k for each k, counts). Every run, of a task or an eval, is
a group in the ledger ('agentenv runs ls --group'); '--resume GROUP' runs only the episodes
of a group that did not finish (cancelled, interrupted, infrastructure errors), after a
crash and 'agentenv gc' too.

'--shard I/N' runs one part of a group, for N processes that share an eval between them
(Slurm arrays, Kubernetes Indexed Jobs: I from $SLURM_ARRAY_TASK_ID or $JOB_COMPLETION_INDEX
+ 1): the eval's slots (task × instance × attempt, in the eval's order, numbered from 0) whose
number is I-1 mod N. Each shard is a group of its own that records I/N and the eval's and
tasks' digests; '--resume' of a shard runs only its slots. 'agentenv runs merge' joins the N
shards' groups into one group with the same summary as the eval run unsharded.

A Harbor task folder (task.toml, instruction.md, environment/, tests/, solution/), or a folder
of them (a dataset; --include/--exclude globs pick tasks by folder name), runs as a group too:
its image built from environment/ (cached; --image-map FROM=TO where no registry answers), the
agent inside its container (--agent oracle, nop, openai, anthropic, command with
--agent-command, a2a with --agent-url), then tests/test.sh scored from its reward file.
'agentenv tasks check DIR' is Harbor's oracle-and-nop check of a dataset.

An episode that ends on an infrastructure error (a deploy, a provider, a model endpoint, a
verifier that could not run) has outcome error: it counts in neither the mean nor pass@k, and
--retries N (or the task's retries: {infra: N}) runs it again from scratch, after tearing down
what it made; every attempt is kept in the run record.

A registry reference (host[:port]/repo[:tag][@sha256:...], as 'agentenv push' printed it)
runs wherever a path does: the bundle is pulled into the local cache (a cached digest with no
network), run from there, and recorded on the group and its episodes (attrs bundle and
bundle.digest); 'run REF@sha256:...' runs exactly those bytes. A local path always wins.

Exit codes: 0 every episode passed, 1 any failed, scored below 1 or error, 2 bad input, 130 or 143
when interrupted (what was made is torn down first).`,
		Example: `  agentenv run hello
  agentenv run examples/notes-task --k 8 --concurrency 4
  agentenv run examples/evals/hello-100.yaml --max-cost-usd 5
  agentenv run terminal-bench/ --agent openai --include 'hello-*' --concurrency 8
  agentenv run ghcr.io/team/notes-task:v1
  agentenv run --resume group-3f2a…
  agentenv run examples/evals/sweep.yaml --shard 2/3   # then: agentenv runs merge G1 G2 G3`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := f.check(); err != nil {
				return err
			}
			a.setStateStore(f.stateStore)
			if err := a.addImageMap(f.imageMap); err != nil {
				return err
			}
			var (
				ef     *eval.File
				single bool
				err    error
				path   string
				from   *bundle.Resolved
			)
			if len(args) > 0 && f.resume == "" {
				if path, from, err = a.localPath(ctx, args[0], f.plainHTTP, bundle.KindTask, bundle.KindEval, bundle.KindHarborTask, bundle.KindHarborDataset); err != nil {
					return err
				}
			}
			switch {
			case f.resume != "" && len(args) > 0:
				return usageError{msg: "--resume takes a group id and no task or eval file"}
			case f.resume != "":
			case len(args) == 0:
				return usageError{msg: "run needs a task, a folder, an eval file, hello or a registry reference (or --resume GROUP)"}
			case isEvalFile(path):
				tasks, err := a.tasks(ctx)
				if err != nil {
					return err
				}
				if ef, err = eval.LoadWith(path, tasks); err != nil {
					return err
				}
				if f.seeds != "" || f.k != 1 {
					return usageError{msg: "--k and --seeds are the eval file's (tasks[].k, tasks[].seeds)"}
				}
			case harbor.IsNative(path):
				var warns []string
				if ef, warns, err = harbor.Group(path, harbor.Selection{Include: f.include, Exclude: f.exclude},
					harbor.Options{Agent: f.agent, Command: f.command, URL: f.agentURL}, f.k, f.concurrency, eval.Overrides{Provider: a.providerFlag(f.provider)}); err != nil {
					return err
				}
				for _, w := range warns {
					fmt.Fprintln(a.stderr, "warning:", w)
				}
				single = len(ef.Tasks) == 1
			case f.agent != "" || f.command != "" || len(f.include) > 0 || len(f.exclude) > 0:
				return usageError{msg: "--agent, --agent-command, --include and --exclude are for Harbor tasks and datasets (folders with task.toml); a task file names its agents"}
			case f.agentURL != "":
				return usageError{msg: "--agent-url is for Harbor tasks and datasets (folders with task.toml); a task file names its agents"}
			default:
				t, err := a.loadTask(ctx, path)
				if err != nil {
					return err
				}
				ef, single = eval.ForTask(t, f.k, f.concurrency, f.seeds, eval.Overrides{Provider: f.provider}), true
			}
			if f.retries == 0 && cmd.Flags().Changed("retries") {
				f.retries = -1 // --retries 0: none, whatever the task says
			}
			return a.runGroup(ctx, f, ef, single, from)
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.passEnv, "pass-env", nil, "let env files' env:NAME references read NAME from this environment (repeatable; adds to env.pass)")
	fl.IntVar(&f.k, "k", 1, "episodes per task instance")
	fl.IntVar(&f.concurrency, "concurrency", 0, "episodes at once (default: the eval file's concurrency, or 1)")
	fl.StringVar(&f.seeds, "seeds", "", "CSV file whose rows fill the task's <placeholders>")
	fl.StringVar(&f.provider, "provider", "", "provider of steps that name none (default: provider.default)")
	fl.BoolVar(&f.keep, "keep", false, "keep what the episodes made until Ctrl-C")
	fl.BoolVar(&f.json, "json", false, "print the summary as JSON")
	fl.StringVar(&f.stateStore, "state-store", "", "PostgreSQL server whose databases are the episodes' service DBs (overrides state.store; see 'agentenv state')")
	fl.IntVar(&f.retries, "retries", 0, "run an episode that ended on an infrastructure error again from scratch, up to N times (default: the task's retries.infra)")
	fl.StringVar(&f.resume, "resume", "", "run the unfinished episodes of this run group")
	fl.StringVar(&f.shard, "shard", "", "run only shard I of N of the group's episodes (I/N, 1 ≤ I ≤ N); 'agentenv runs merge' joins the shards")
	fl.Float64Var(&f.maxCost, "max-cost-usd", 0, "stop starting episodes once the group's model cost (prompt_agent cost_usd) passes this")
	fl.StringVar(&f.agent, "agent", "", "the agent of Harbor tasks: "+strings.Join(harbor.Agents(), ", ")+" (default oracle)")
	fl.StringVar(&f.agentURL, "agent-url", "", "the a2a agent of Harbor tasks: the URL of a running A2A agent, handed the task's container as MCP tools")
	fl.StringVar(&f.command, "agent-command", "", "the command agent of Harbor tasks: a shell command run inside the task's container, the instruction in $AGENTENV_PROMPT_FILE")
	fl.StringArrayVar(&f.include, "include", nil, "run only the dataset's tasks whose folder name matches this glob (repeatable)")
	fl.StringArrayVar(&f.exclude, "exclude", nil, "leave out the dataset's tasks whose folder name matches this glob (repeatable)")
	fl.StringArrayVar(&f.imageMap, "image-map", nil, "build with image TO where a Dockerfile's FROM names FROM: FROM=TO (repeatable; adds to images.map)")
	f.runner.register(fl, false)
	fl.BoolVar(&f.detach, "detach", false, "with --runner temporal: print the group id once the workers have the group, and return")
	plainHTTPFlag(fl, &f.plainHTTP)
	return cmd
}

// isEvalFile reports whether path is an eval file (a top-level tasks: list), not a task.
func isEvalFile(path string) bool {
	if fi, err := os.Stat(path); err != nil || fi.IsDir() {
		return false
	}
	data, err := os.ReadFile(path)
	return err == nil && eval.IsEval(data)
}

// runGroup runs ef (or, with f.resume, the group's unfinished episodes) as one run group and
// prints its summary; single says ef is one task from the command line, printed as before.
// from is the bundle ef was unpacked from, if any, recorded on the group.
func (a *app) runGroup(ctx context.Context, f runFlags, ef *eval.File, single bool, from *bundle.Resolved) error {
	mgr, err := a.manager(ctx)
	if err != nil {
		return err
	}
	if f.resume != "" {
		g, err := eval.Store{Ledger: mgr.Ledger()}.Get(ctx, f.resume)
		if err != nil {
			return unknownID("group", f.resume, "runs ls --group", err)
		}
		single = g.Digest == "" && len(g.Tasks) == 1
	}
	var taskEvents func(task.Event)
	if single && !f.json {
		taskEvents = func(e task.Event) { fmt.Fprintln(a.stderr, e) }
	}
	er, err := a.evalRunner(ctx, f.provider, f.passEnv, from.Pins(), taskEvents)
	if err != nil {
		return err
	}
	if !single && !f.json {
		er.Progress = newProgressPrinter(a.stderr)
	}
	remote, closeRemote, err := a.remote(ctx, f.runner)
	if err != nil {
		return err
	}
	defer closeRemote()
	switch {
	case remote == nil && f.detach:
		return usageError{"--detach is for --runner temporal: a local run lives in this process"}
	case remote != nil && f.keep:
		return usageError{"--keep with --runner temporal: workers tear down what their episodes made; run locally to keep it"}
	case remote != nil:
		er.Remote = remote
		if single && !f.json {
			er.Progress = newProgressPrinter(a.stderr) // a worker's task events do not reach this process
		}
	}
	opts := eval.Options{Concurrency: f.concurrency, MaxCostUSD: f.maxCost, Keep: f.keep, Retries: f.retries, Detach: f.detach}
	fromBundle(&opts, from)
	if f.shard != "" {
		if opts.Shard, err = eval.ParseShard(f.shard); err != nil {
			return usageError{"--shard: " + err.Error()}
		}
	}
	var res eval.Result
	if f.resume != "" {
		res, err = er.Resume(ctx, f.resume, opts)
	} else {
		res, err = er.Run(ctx, ef, opts)
	}
	if err != nil && res.Group.ID == "" {
		return err
	}
	if f.detach {
		if f.json {
			return printJSON(a.stdout, struct {
				Group  string `json:"group"`
				Runner string `json:"runner"`
			}{res.Group.ID, res.Group.Runner})
		}
		fmt.Fprintf(a.stderr, "submitted to %s workers; follow with 'agentenv runs get %s'\n", res.Group.Runner, res.Group.ID)
		fmt.Fprintf(a.stdout, "group %s\n", res.Group.ID)
		return nil
	}
	if err != nil && ctx.Err() == nil {
		a.log.Warn("run group", "group", res.Group.ID, "err", err)
	}
	if f.keep && ctx.Err() == nil {
		fmt.Fprintln(a.stderr, "kept: the episodes' sandboxes stay up until you press Ctrl-C")
		for _, sum := range res.Live {
			for _, ep := range sum.Episodes {
				fmt.Fprintf(a.stderr, "  run %s\n", ep.Run)
			}
		}
		if err := er.HoldKept(ctx, &res); err != nil {
			a.log.Warn("kept episodes", "group", res.Group.ID, "err", err)
		}
	}
	if single && f.resume == "" && len(res.Live) == 1 {
		sum := res.Live[0]
		if f.json {
			if err := printJSON(a.stdout, struct {
				Group string `json:"group"`
				task.Summary
			}{res.Group.ID, sum}); err != nil {
				return err
			}
		} else if sh := res.Group.Shard; sh.N > 0 && len(sum.Episodes) == 0 {
			fmt.Fprintf(a.stdout, "shard %s: no episode is dealt to this shard (%d shards, fewer slots)\ngroup %s\n", sh, sh.N, res.Group.ID)
		} else {
			printSummary(a, sum)
			fmt.Fprintf(a.stdout, "group %s\n", res.Group.ID)
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if !sum.AllPassed() && !(res.Group.Shard.N > 0 && len(sum.Episodes) == 0) { // a shard dealt no slot
			return exitError{code: exitFailed}
		}
		return nil
	}
	if f.json {
		if err := printJSON(a.stdout, res); err != nil {
			return err
		}
	} else {
		for _, sum := range res.Live {
			for _, ep := range sum.Episodes {
				if ep.Receipt != nil && !ep.Receipt.Clean() {
					fmt.Fprintf(a.stdout, "run %s ", ep.Run)
					printReceipt(a.stdout, *ep.Receipt)
				}
			}
		}
		printGroup(a.stdout, res, false)
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	if !res.Passed() {
		return exitError{code: exitFailed}
	}
	return nil
}

func printSummary(a *app, sum task.Summary) {
	rows := make([][]string, 0, len(sum.Episodes))
	for _, ep := range sum.Episodes {
		rows = append(rows, []string{ep.Run, string(ep.Outcome), score(ep.Score), ep.Elapsed.Round(time.Millisecond).String(), ep.Error})
	}
	table(a.stdout, []string{"RUN", "OUTCOME", "SCORE", "TIME", "ERROR"}, rows)
	for _, ep := range sum.Episodes {
		if ep.Receipt != nil && len(ep.Receipt.Items) > 0 {
			fmt.Fprintf(a.stdout, "run %s ", ep.Run)
			printReceipt(a.stdout, *ep.Receipt)
		}
	}
	verdict := "passed"
	if !sum.AllPassed() {
		verdict = "not passed"
	}
	fmt.Fprintf(a.stdout, "%s: %d passed, %d scored below 1, %d failed, %d error, %d cancelled; mean score %.3g [%.3g, %.3g]; pass@1 %.3g; %s\n",
		verdict, sum.Passed, sum.ScoredBelow, sum.Failed, sum.Errors, sum.Cancelled, sum.MeanScore, sum.MeanCI95[0], sum.MeanCI95[1], sum.PassAt["1"], sum.Elapsed.Round(time.Millisecond))
}

// addImageMap adds the --image-map FROM=TO flags to images.map, over what it says of the same
// images.
func (a *app) addImageMap(flags []string) error {
	if len(flags) == 0 {
		return nil
	}
	add, err := config.ParseImageMap(strings.Join(flags, ","))
	if err != nil {
		return usageError{"--image-map: " + err.Error()}
	}
	cur, err := a.cfg.Get(config.ImageMapKey)
	if err != nil {
		return err
	}
	m, err := config.ParseImageMap(cur)
	if err != nil {
		return err
	}
	maps.Copy(m, add)
	pairs := make([]string, 0, len(m))
	for _, from := range slices.Sorted(maps.Keys(m)) {
		pairs = append(pairs, from+"="+m[from])
	}
	return a.cfg.Set(config.ImageMapKey, strings.Join(pairs, ","), "--image-map")
}

// evalRunner returns the runner of run groups that 'agentenv run' and 'agentenv tasks check'
// use: episodes deployed through the manager on provider (the configured default if empty),
// recorded in the state folder, each episode's events to taskEvents (nil: none), the images
// of pins (a bundle's, pinned by digest) run from their registry where the provider pulls.
func (a *app) evalRunner(ctx context.Context, provider string, passEnv []string, pins map[string]string, taskEvents func(task.Event)) (*eval.Runner, error) {
	mgr, err := a.manager(ctx)
	if err != nil {
		return nil, err
	}
	if provider != "" {
		if _, err := mgr.ParseChain(provider); err != nil {
			return nil, fmt.Errorf("--provider: %w", err)
		}
	}
	sd, err := stateDir()
	if err != nil {
		return nil, err
	}
	tr, err := a.taskRunner(ctx, mgr, sd, provider, passEnv, pins, taskEvents)
	if err != nil {
		return nil, err
	}
	return &eval.Runner{Tasks: tr, Logger: a.log, LoadTask: func(name string) (*task.Task, error) { return a.loadTask(ctx, name) },
		Fetch: a.fetchBundle}, nil
}

// loadTask returns the task named on a command line: "hello", a task file or a folder with one
// (loaded with a.tasks' checks).
func (a *app) loadTask(ctx context.Context, name string) (*task.Task, error) {
	if name == "hello" {
		return task.Hello(), nil
	}
	if harbor.IsNative(name) {
		return harbor.LoadNative(name, harbor.Options{})
	}
	tasks, err := a.tasks(ctx)
	if err != nil {
		return nil, err
	}
	return tasks.LoadPath(name)
}

// tasks returns the loader of the task files a command runs: a step's provider is checked
// against the configured ones with the rest of the file, so every error comes in one answer.
func (a *app) tasks(ctx context.Context) (task.Loader, error) {
	mgr, err := a.manager(ctx)
	if err != nil {
		return task.Loader{}, err
	}
	return task.Loader{Provider: func(chain string) error {
		_, err := mgr.ParseChain(chain)
		return err
	}}, nil
}

// taskRunner returns the runner that 'agentenv run' (and the explorer's start button) runs
// tasks with: deploys through mgr on provider (the configured default if empty), records in
// workdir, progress to progress.
func (a *app) taskRunner(ctx context.Context, mgr *lifecycle.Manager, workdir, provider string, passEnv []string, pins map[string]string, progress func(task.Event)) (*task.Runner, error) {
	ttl, err := a.cfg.Duration("lifecycle.ttl")
	if err != nil {
		return nil, err
	}
	conns, sessions, err := a.gatewayCaps()
	if err != nil {
		return nil, err
	}
	logins, err := a.logins()
	if err != nil {
		return nil, err
	}
	store, err := a.store(ctx)
	if err != nil {
		return nil, err
	}
	im, err := a.cfg.Get(config.ImageMapKey)
	if err != nil {
		return nil, err
	}
	imageMap, err := config.ParseImageMap(im)
	if err != nil {
		return nil, err
	}
	// A step of agentenv's own (a Harbor task's egress proxy) names agentenv:dev; images.runtime
	// says which image that is, unless the image map says it.
	rt, err := a.cfg.Get("images.runtime")
	if err != nil {
		return nil, err
	}
	if _, mapped := imageMap[images.RuntimeTag]; !mapped && rt != "" && rt != images.RuntimeTag {
		imageMap[images.RuntimeTag] = rt
	}
	return &task.Runner{
		Manager: mgr, Logger: a.log, Workdir: workdir, Model: a.cfg, Progress: progress, ImageMap: imageMap,
		Tools: toolgate.Server{}, Pinned: pins, Logins: logins,
		Deployer: eval.EnvDeployer{Deployer: deploy.New(mgr, a.log), Defaults: deploy.Options{
			Provider: a.providerFlag(provider), TTL: ttl, PassEnv: a.passEnv(passEnv),
			GatewayMaxConns: conns, GatewayMaxSessions: sessions, Store: store,
		}},
	}, nil
}
