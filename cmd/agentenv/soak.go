package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/provider/pgstore"
	"github.com/agentenv/agentenv/soak"
)

func newSoakCmd(a *app) *cobra.Command {
	var f struct {
		episodes, rounds    int
		kinds, provider     string
		binary, image, dir  string
		roundTimeout        time.Duration
		seed                uint64
		json, keepLeftovers bool
		stateStore          string
	}
	cmd := &cobra.Command{
		Use:   "soak [--episodes N] [--rounds R] [--round-kinds steady,kill,interrupt,crash] [--provider P] [--json]",
		Short: "Run rounds of concurrent episodes, some disturbed on purpose, and count what is left",
		Long: `soak runs rounds of N concurrent episodes of a built-in task (the notes env deployed
behind its gateway, a scripted agent making tool calls, verifiers, teardown) in a child
'agentenv run' process, with a ledger and state folder of its own. Round kinds, used in turn:

  steady     nothing injected; every episode must pass
  kill       a random quarter of the episodes lose a container (docker kill or rm -f) mid-round
  interrupt  the runner process receives SIGINT mid-round
  crash      the runner process receives SIGKILL mid-round, then 'agentenv gc' runs

After every round it counts, from the engine and the file system (never from the ledger), the
containers, networks and volumes carrying the runner's agentenv.owner label, the databases
on the state store (with --state-store or state.store) carrying it but for templates, which a
deploy keeps on purpose until they expire, work folders, and host ports of the round's
containers that still listen; and it checks every "was not
terminated" and "may still be up" line the processes logged against the engine (true: the
engine still lists the sandbox; false: it does not). It then removes what was left (unless
--keep-leftovers), prints a table per round, and exits 1 on any leftover, false warning or
problem (an undisturbed episode that failed, a wait past its deadline). Every wait is bounded.`,
		Example: `  agentenv soak --episodes 32 --rounds 4
  agentenv soak --episodes 64 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			kinds, err := soak.ParseKinds(f.kinds)
			if err != nil {
				return usageError{err.Error()}
			}
			if !cmd.Flags().Changed("rounds") {
				f.rounds = len(kinds) // one round of each kind asked for
			}
			if f.rounds < 1 {
				return usageError{"--rounds must be at least 1"}
			}
			if f.binary == "" {
				if f.binary, err = os.Executable(); err != nil {
					return fmt.Errorf("soak: %w", err)
				}
			}
			if f.dir == "" {
				sd, err := stateDir()
				if err != nil {
					return err
				}
				f.dir = filepath.Join(sd, "soak", time.Now().UTC().Format("20060102T150405Z"))
			}
			if err := os.MkdirAll(f.dir, 0o700); err != nil {
				return fmt.Errorf("soak: %w", err)
			}
			host, err := a.cfg.Get("provider.docker.host")
			if err != nil {
				return err
			}
			docker, err := soak.NewDocker(host)
			if err != nil {
				return err
			}
			defer docker.Close()
			var eng soak.Engine = docker
			a.setStateStore(f.stateStore)
			dsn, err := a.cfg.Get("state.store")
			if err != nil {
				return err
			}
			// The runner is a child process: the config file and the store reach it as its
			// environment.
			var extra []string
			if a.flags.config != "" {
				extra = append(extra, "AGENTENV_CONFIG="+a.flags.config)
			}
			if dsn != "" {
				extra = append(extra, "AGENTENV_STATE_STORE="+dsn)
			}
			var childEnv []string // nil: the soak's own environment
			if len(extra) > 0 {
				childEnv = append(os.Environ(), extra...)
			}
			if dsn != "" {
				// The store's databases are counted with the engine's containers after every round.
				store, err := pgstore.New(pgstore.Config{Name: deploy.StoreProvider, DSN: dsn}, a.log)
				if err != nil {
					return err
				}
				defer store.Close()
				eng = soak.WithStore(docker, store)
			}
			fmt.Fprintf(a.stderr, "soak: %d rounds of %d episodes; logs, ledger and state in %s\n", f.rounds, f.episodes, f.dir)
			rep, err := soak.Run(cmd.Context(), soak.Config{
				Env:    childEnv,
				Binary: f.binary, Dir: f.dir, Engine: eng, Episodes: f.episodes, Rounds: f.rounds,
				Kinds: kinds, Provider: a.providerFlag(f.provider), Image: f.image,
				RoundTimeout: f.roundTimeout, Seed: f.seed, KeepLeftovers: f.keepLeftovers, Logger: a.log,
				Progress: func(r soak.Round) {
					if !f.json {
						fmt.Fprintf(a.stderr, "round %d (%s) done: %s\n", r.Number, r.Kind, roundVerdict(r))
					}
				},
			})
			if err != nil {
				return err
			}
			if f.json {
				err = printJSON(a.stdout, rep)
			} else {
				err = soak.WriteText(a.stdout, rep)
			}
			if err != nil {
				return err
			}
			if !rep.Holds {
				return exitError{code: exitFailed}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.IntVar(&f.episodes, "episodes", soak.DefaultEpisodes, "concurrent episodes per round")
	fl.IntVar(&f.rounds, "rounds", 0, "rounds, the kinds used in turn (default: one of each kind in --round-kinds)")
	fl.StringVar(&f.kinds, "round-kinds", "steady,kill,interrupt,crash", "round kinds, used in turn")
	fl.StringVar(&f.provider, "provider", "", "provider of the episodes (default: provider.default)")
	fl.StringVar(&f.image, "image", "", "image to run agentenv's own components from (default: agentenv:dev)")
	fl.StringVar(&f.binary, "binary", "", "agentenv binary that runs the episodes (default: this one)")
	fl.StringVar(&f.dir, "dir", "", "folder for the soak's ledger, state and logs (default: $XDG_STATE_HOME/agentenv/soak/TIME)")
	fl.DurationVar(&f.roundTimeout, "round-timeout", soak.DefaultRoundTimeout, "bound on one round")
	fl.Uint64Var(&f.seed, "seed", 0, "seed of the kill rounds' choice of victims (default: drawn)")
	fl.BoolVar(&f.keepLeftovers, "keep-leftovers", false, "leave what a round left, for inspection")
	fl.BoolVar(&f.json, "json", false, "print the report as JSON")
	fl.StringVar(&f.stateStore, "state-store", "", "PostgreSQL server whose databases are the episodes' service DBs (overrides state.store; see 'agentenv state')")
	return cmd
}

func roundVerdict(r soak.Round) string {
	if r.Holds() {
		return fmt.Sprintf("ok, %d passed, nothing left (%s)", r.Passed, r.Elapsed.Round(100*time.Millisecond))
	}
	return r.Failure()
}
