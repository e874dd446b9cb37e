package main

import (
	"context"
	"fmt"
	"strconv"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/agentenv/agentenv/eval"
	"github.com/agentenv/agentenv/temporal"
)

// runnerFlags are the flags that say where run groups run, shared by run and worker; each
// sets the runner.* key of its name.
type runnerFlags struct {
	backend, address, namespace, taskQueue string
	slots                                  int
}

func (f *runnerFlags) register(fl *pflag.FlagSet, worker bool) {
	if !worker {
		fl.StringVar(&f.backend, "runner", "", "where the group runs: local (this process) or temporal (on 'agentenv worker' processes; overrides runner.backend)")
	}
	fl.StringVar(&f.address, "temporal", "", "Temporal server HOST:PORT (overrides runner.temporal)")
	fl.StringVar(&f.namespace, "namespace", "", "Temporal namespace (overrides runner.namespace; default \"default\")")
	fl.StringVar(&f.taskQueue, "task-queue", "", "Temporal task queue of run groups (overrides runner.task_queue; default \"agentenv\")")
	if worker {
		fl.IntVar(&f.slots, "slots", 0, "episodes at once on this worker (overrides runner.slots; default 4)")
	}
}

// temporalConfig applies f to the runner.* keys and returns the temporal runner's settings, or
// ok false when groups run in this process (runner.backend local).
func (a *app) temporalConfig(f runnerFlags) (cfg temporal.Config, ok bool, err error) {
	for _, s := range []struct{ flag, key, v string }{
		{"runner", "runner.backend", f.backend}, {"temporal", "runner.temporal", f.address},
		{"namespace", "runner.namespace", f.namespace}, {"task-queue", "runner.task_queue", f.taskQueue},
	} {
		if s.v != "" {
			if err := a.cfg.Set(s.key, s.v, "--"+s.flag); err != nil {
				return cfg, false, err
			}
		}
	}
	if f.slots < 0 {
		return cfg, false, usageError{fmt.Sprintf("--slots %d: want 1 or more episodes at once", f.slots)}
	}
	if f.slots > 0 {
		if err := a.cfg.Set("runner.slots", strconv.Itoa(f.slots), "--slots"); err != nil {
			return cfg, false, err
		}
	}
	switch b := a.cfg.Raw("runner.backend"); b {
	case "", "local":
		return cfg, false, nil
	case "temporal":
	default:
		return cfg, false, usageError{fmt.Sprintf("runner.backend %q (%s): want local or temporal", b, source(a.cfg, "runner.backend"))}
	}
	slots, err := strconv.Atoi(a.cfg.Raw("runner.slots"))
	if err != nil || slots < 1 {
		return cfg, false, usageError{fmt.Sprintf("runner.slots %q (%s): want 1 or more", a.cfg.Raw("runner.slots"), source(a.cfg, "runner.slots"))}
	}
	cfg = temporal.Config{Address: a.cfg.Raw("runner.temporal"), Namespace: a.cfg.Raw("runner.namespace"),
		TaskQueue: a.cfg.Raw("runner.task_queue"), Slots: slots}
	if err := temporal.CheckLedger(a.cfg.Raw("ledger.dsn")); err != nil {
		return cfg, false, err
	}
	return cfg, true, nil
}

// remote returns the temporal runner's eval.Remote when runner.backend says temporal (nil
// otherwise), with what closes its connection.
func (a *app) remote(ctx context.Context, f runnerFlags) (eval.Remote, func(), error) {
	cfg, ok, err := a.temporalConfig(f)
	if err != nil || !ok {
		return nil, func() {}, err
	}
	c, err := temporal.Dial(ctx, cfg, a.log)
	if err != nil {
		return nil, func() {}, err
	}
	return temporal.NewRemote(c, cfg), c.Close, nil
}

func newWorkerCmd(a *app) *cobra.Command {
	var f runnerFlags
	cmd := &cobra.Command{
		Use:   "worker --temporal HOST:PORT [--namespace N] [--task-queue Q] [--slots N]",
		Short: "Run the episodes of groups submitted to Temporal ('run --runner temporal'), until Ctrl-C",
		Long: `worker takes run groups from a Temporal task queue and runs their episodes, at most --slots at
once, as 'agentenv run' would: deployed through this machine's providers, recorded in the
ledger every worker and submitter shares (a postgres:// ledger.dsn; a file ledger is refused).

Any number of workers on any number of machines share a queue. A worker that dies in the middle
of an episode loses nothing: Temporal hands the slot to another worker after its heartbeat stops
(30 s), which tears down what the lost episode made, records it as a lost attempt of the slot and
runs the slot again; 'agentenv gc' from any machine collects what remains once its owner's lease
has passed. Ctrl-C stops taking work and lets the episodes under way tear down first; their
slots then run on another worker.

Every setting is also a key: runner.temporal, runner.namespace, runner.task_queue, runner.slots
(AGENTENV_RUNNER_TEMPORAL and so on).`,
		Example: `  AGENTENV_LEDGER_DSN=postgres://… agentenv worker --temporal 127.0.0.1:7233 --slots 8`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if err := a.cfg.Set("runner.backend", "temporal", "agentenv worker"); err != nil {
				return err
			}
			cfg, _, err := a.temporalConfig(f)
			if err != nil {
				return err
			}
			c, err := temporal.Dial(ctx, cfg, a.log)
			if err != nil {
				return err
			}
			defer c.Close()
			er, err := a.evalRunner(ctx, "", nil, nil, nil)
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "worker: taking groups from %s namespace %s queue %s; Ctrl-C stops it\n", cfg.Address, orDefault(cfg.Namespace, temporal.DefaultNamespace), orDefault(cfg.TaskQueue, temporal.DefaultTaskQueue))
			return temporal.Work(ctx, c, cfg, er, a.log)
		},
	}
	f.register(cmd.Flags(), true)
	return cmd
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
