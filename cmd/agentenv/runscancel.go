package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv/eval"
)

func newRunsCancelCmd(a *app) *cobra.Command {
	var f struct {
		runner runnerFlags
		json   bool
	}
	cmd := &cobra.Command{
		Use:   "cancel GROUP [--runner temporal] [--temporal HOST:PORT] [--json]",
		Short: "Cancel a run group on Temporal workers (one started with --detach, or from the explorer)",
		Long: `cancel cancels a run group that Temporal workers run ('agentenv run --runner temporal',
detached or not, or a start from the explorer with runner.backend temporal): the workers stop
its episodes, tear down what they made, and write the group as cancelled. It returns once they
have (at most 10 minutes), from any machine that shares the ledger and reaches the server
(runner.temporal, runner.namespace; --runner temporal when runner.backend is not set to it).

A group that has ended is left as it is (exit 0). A group run by an 'agentenv run' process is
cancelled there, with Ctrl-C (exit 1 here, naming the process); one whose process died is
ended by 'agentenv gc'. An unknown group is bad input (exit 2).`,
		Example: `  agentenv runs cancel group-1a2b3c4d5e6f --runner temporal --temporal 127.0.0.1:7233`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			remote, closeRemote, err := a.remote(ctx, f.runner)
			if err != nil {
				return err
			}
			defer closeRemote()
			g, ended, err := (&eval.Runner{Ledger: mgr.Ledger(), Remote: remote, Logger: a.log}).Cancel(ctx, args[0])
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(a.stdout, map[string]any{"group": g.ID, "status": g.Status, "ended_before": ended})
			}
			if ended {
				fmt.Fprintf(a.stdout, "group %s had ended (%s): nothing to cancel\n", g.ID, g.Status)
			} else {
				fmt.Fprintf(a.stdout, "group %s %s\n", g.ID, g.Status)
			}
			return nil
		},
	}
	f.runner.register(cmd.Flags(), false)
	cmd.Flags().BoolVar(&f.json, "json", false, "print the group's id and status as JSON")
	return cmd
}
