package main

import (
	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv"
)

func newLedgerCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "ledger", Short: "Inspect the ledger"}
	var f struct{ all, json bool }
	ls := &cobra.Command{
		Use:   "ls [--all] [--json]",
		Short: "List ledger records (all but gone ones, unless --all)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			var flt agentenv.Filter
			if !f.all {
				flt.States = agentenv.NotGone()
			}
			recs, err := mgr.Ledger().List(ctx, flt)
			if err != nil {
				return err
			}
			if f.json {
				if recs == nil {
					recs = []agentenv.Record{}
				}
				return printJSON(a.stdout, recs)
			}
			rows := make([][]string, 0, len(recs))
			for _, r := range recs {
				rows = append(rows, []string{r.ID, string(r.Kind), r.Provider, string(r.State), r.Deployment, r.Run, r.Owner.String(), ago(r.Expires), r.Error})
			}
			table(a.stdout, []string{"RECORD", "KIND", "PROVIDER", "STATE", "DEPLOYMENT", "RUN", "OWNER", "EXPIRES", "ERROR"}, rows)
			return nil
		},
	}
	ls.Flags().BoolVar(&f.all, "all", false, "include gone records")
	ls.Flags().BoolVar(&f.json, "json", false, "print JSON")
	cmd.AddCommand(ls)
	return cmd
}
