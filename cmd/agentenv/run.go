package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/spec"
	"github.com/agentenv/agentenv/task"
)

func newRunCmd(a *app) *cobra.Command {
	var f struct {
		k, concurrency  int
		seeds, provider string
		keep, json      bool
		passEnv         []string
		stateStore      string
	}
	cmd := &cobra.Command{
		Use:   "run TASK_OR_FOLDER|hello [--k N] [--concurrency C] [--seeds FILE] [--provider P] [--keep]",
		Short: "Run graded episodes of a task, then tear down everything they made",
		Long: `run executes a task's steps as a DAG, K times (episodes), scores each with its verifiers,
and always ends by tearing down everything the episodes deployed, printing the receipt.
'agentenv run hello' is built in: it needs no Docker, no model and no config.

Exit codes: 0 every episode passed, 1 any failed or scored below 1, 2 bad input, 130 or 143
when interrupted (what was made is torn down first).`,
		Example: `  agentenv run hello
  agentenv run examples/notes-task --k 8 --concurrency 4`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			t, err := loadTask(args[0])
			if err != nil {
				return err
			}
			a.setStateStore(f.stateStore)
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			sd, err := stateDir()
			if err != nil {
				return err
			}
			r, err := a.taskRunner(ctx, mgr, sd, f.provider, f.passEnv, func(e task.Event) {
				if !f.json {
					fmt.Fprintln(a.stderr, e)
				}
			})
			if err != nil {
				return err
			}
			sum, err := r.Run(ctx, t, task.RunOptions{K: f.k, Concurrency: f.concurrency, Seeds: f.seeds, Provider: f.provider, Keep: f.keep})
			if err != nil && len(sum.Episodes) == 0 {
				return err
			}
			if f.keep && ctx.Err() == nil {
				fmt.Fprintln(a.stderr, "kept: the episodes' sandboxes stay up until you press Ctrl-C")
				for _, ep := range sum.Episodes {
					fmt.Fprintf(a.stderr, "  run %s\n", ep.Run)
				}
				<-ctx.Done()
				for _, ep := range sum.Episodes {
					rc, _ := r.Teardown(ctx, ep.Run)
					ep.Receipt = &rc
				}
			}
			if f.json {
				if err := printJSON(a.stdout, sum); err != nil {
					return err
				}
			} else {
				printSummary(a, sum)
			}
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			if !sum.AllPassed() {
				return exitError{code: exitFailed}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringArrayVar(&f.passEnv, "pass-env", nil, "let env files' env:NAME references read NAME from this environment (repeatable; adds to env.pass)")
	fl.IntVar(&f.k, "k", 1, "episodes per task instance")
	fl.IntVar(&f.concurrency, "concurrency", 1, "episodes at once")
	fl.StringVar(&f.seeds, "seeds", "", "CSV file whose rows fill the task's <placeholders>")
	fl.StringVar(&f.provider, "provider", "", "provider of steps that name none (default: provider.default)")
	fl.BoolVar(&f.keep, "keep", false, "keep what the episodes made until Ctrl-C")
	fl.BoolVar(&f.json, "json", false, "print the summary as JSON")
	fl.StringVar(&f.stateStore, "state-store", "", "PostgreSQL server whose databases are the episodes' service DBs (overrides state.store; see 'agentenv state')")
	return cmd
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
	fmt.Fprintf(a.stdout, "%s: %d passed, %d scored below 1, %d failed, %d cancelled; mean score %.3g; pass@1 %.3g; %s\n",
		verdict, sum.Passed, sum.ScoredBelow, sum.Failed, sum.Cancelled, sum.MeanScore, sum.PassAt["1"], sum.Elapsed.Round(time.Millisecond))
}

// taskDeployer lets task steps deploy env files through the deploy package. The deployment
// stays owned by the running process: the run tears it down, or gc does if the process dies.
type taskDeployer struct {
	d        *deploy.Deployer
	provider string
	ttl      time.Duration
	passEnv  []string // env:NAME references env files may resolve
	store    *deploy.Store
}

func (t taskDeployer) Deploy(ctx context.Context, envFile string, o task.DeployOptions) (task.DeployedEnv, error) {
	env, err := spec.Load(envFile)
	if err != nil {
		return task.DeployedEnv{}, err
	}
	if o.Provider == "" {
		o.Provider = t.provider
	}
	if o.TTL == 0 {
		o.TTL = t.ttl
	}
	res, err := t.d.Deploy(ctx, env, deploy.Options{Provider: o.Provider, Run: o.Run, TTL: o.TTL, Own: true, PassEnv: t.passEnv, Store: t.store})
	if err != nil {
		return task.DeployedEnv{}, err
	}
	return task.DeployedEnv{ID: res.Doc.ID, GatewayURL: res.GatewayURL, Token: res.Token, Tokens: res.Tokens, DatabaseURL: res.DatabaseURL, Records: res.Records, Queued: res.Queued, Ready: res.Ready}, nil
}

func (t taskDeployer) Teardown(ctx context.Context, id string) (agentenv.Receipt, error) {
	return t.d.Teardown(ctx, id)
}

func newRunsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "runs", Short: "Inspect recorded runs"}
	var f struct {
		json  bool
		limit int
	}
	ls := &cobra.Command{
		Use:   "ls [--json]",
		Short: "List runs, newest first",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			runs, err := mgr.Ledger().Runs().List(ctx, nil, f.limit)
			if err != nil {
				return err
			}
			if f.json {
				if runs == nil {
					runs = []agentenv.Run{}
				}
				return printJSON(a.stdout, runs)
			}
			rows := make([][]string, 0, len(runs))
			for _, r := range runs {
				rows = append(rows, []string{r.ID, r.Task, string(r.Status), score(r.Score), ago(r.Created), r.Error})
			}
			table(a.stdout, []string{"RUN", "TASK", "STATUS", "SCORE", "STARTED", "ERROR"}, rows)
			return nil
		},
	}
	ls.Flags().BoolVar(&f.json, "json", false, "print JSON")
	ls.Flags().IntVar(&f.limit, "limit", 50, "at most this many (0: all)")
	get := &cobra.Command{
		Use:   "get RUN_ID [--json]",
		Short: "Show a run: its steps, score, trajectory files and teardown receipt",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			r, err := mgr.Ledger().Runs().Get(ctx, args[0])
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(a.stdout, r)
			}
			fmt.Fprintf(a.stdout, "run %s  task %s  status %s  score %s  started %s\n", r.ID, r.Task, r.Status, score(r.Score), r.Created.Format(time.RFC3339))
			if r.Error != "" {
				fmt.Fprintf(a.stdout, "error: %s\n", r.Error)
			}
			rows := make([][]string, 0, len(r.Steps))
			for _, s := range r.Steps {
				sc := ""
				if s.Score != nil {
					sc = fmt.Sprintf("%.3g", *s.Score)
				}
				rows = append(rows, []string{s.ID, s.Type, string(s.Status), sc, s.Ended.Sub(s.Started).Round(time.Millisecond).String(), s.Error})
			}
			table(a.stdout, []string{"STEP", "TYPE", "STATUS", "SCORE", "TIME", "ERROR"}, rows)
			for _, s := range r.Steps {
				if p := s.Outputs["trajectory"]; p != "" {
					fmt.Fprintf(a.stdout, "trajectory of %s: %s\n", s.ID, filepath.Clean(p))
					if _, err := os.Stat(p); err != nil {
						fmt.Fprintf(a.stdout, "  (%v)\n", err)
					}
				}
			}
			if r.Receipt != nil {
				printReceipt(a.stdout, *r.Receipt)
			}
			return nil
		},
	}
	get.Flags().BoolVar(&f.json, "json", false, "print JSON")
	cmd.AddCommand(ls, get)
	return cmd
}

// loadTask returns the task named on a command line: "hello", a task file or a folder with one.
func loadTask(name string) (*task.Task, error) {
	if name == "hello" {
		return task.Hello(), nil
	}
	return task.LoadPath(name)
}

// taskRunner returns the runner that 'agentenv run' (and the explorer's start button) runs
// tasks with: deploys through mgr on provider (the configured default if empty), records in
// workdir, progress to progress.
func (a *app) taskRunner(ctx context.Context, mgr *lifecycle.Manager, workdir, provider string, passEnv []string, progress func(task.Event)) (*task.Runner, error) {
	ttl, err := a.cfg.Duration("lifecycle.ttl")
	if err != nil {
		return nil, err
	}
	store, err := a.store(ctx)
	if err != nil {
		return nil, err
	}
	return &task.Runner{
		Manager: mgr, Logger: a.log, Workdir: workdir, Model: a.cfg, Progress: progress,
		Deployer: taskDeployer{d: deploy.New(mgr, a.log), provider: a.providerFlag(provider), ttl: ttl, passEnv: a.passEnv(passEnv), store: store},
	}, nil
}
