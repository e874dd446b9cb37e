package main

import (
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv/eval"
	"github.com/agentenv/agentenv/lifecycle"
)

func newGCCmd(a *app) *cobra.Command {
	var f struct{ dryRun, json bool }
	cmd := &cobra.Command{
		Use:   "gc [--dry-run] [--json]",
		Short: "Remove what nobody owns any more: dead owners, expired sandboxes, failed teardowns, leaks",
		Long: `gc joins the ledger with each provider's listing. It terminates sandboxes whose owner
process is dead or whose lease or expiry has passed, retries failed terminations, resolves
creates whose outcome is unknown by listing their labels, and removes leaked sandboxes and
work folders. Records owned by a live process are never touched, so gc is safe to run at any
time, also while other runs are live. Run groups (and their episodes) a dead process left
"running" are marked cancelled, "interrupted: its process died"; --resume runs them again.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			rep, err := mgr.GC(ctx, lifecycle.GCOptions{DryRun: f.dryRun})
			if err != nil {
				return err
			}
			var settled []string
			if !f.dryRun {
				var serr error
				if settled, serr = eval.Settle(ctx, mgr.Ledger(), time.Now().UTC()); serr != nil {
					rep.Errors = append(rep.Errors, serr.Error())
				}
			}
			if f.json {
				if err := printJSON(a.stdout, struct {
					lifecycle.GCReport
					Settled []string `json:"settled,omitempty"` // runs and groups a dead process left running, now cancelled
				}{rep, settled}); err != nil {
					return err
				}
			} else {
				rows := make([][]string, 0, len(rep.Actions))
				for _, act := range rep.Actions {
					out := string(act.Outcome)
					if f.dryRun {
						out = "would terminate"
					}
					rows = append(rows, []string{act.Record, act.Provider, act.Reason, out, act.Detail})
				}
				if len(rows) > 0 {
					table(a.stdout, []string{"RECORD", "PROVIDER", "REASON", "OUTCOME", "DETAIL"}, rows)
				}
				fmt.Fprintf(a.stdout, "gc: %d collected, %d kept\n", len(rep.Actions), rep.Kept)
				if len(settled) > 0 {
					fmt.Fprintf(a.stdout, "gc: %d run(s) and group(s) a dead process left running marked cancelled: %s\n", len(settled), strings.Join(settled, ", "))
				}
				if n := len(rep.InFlight); n > 0 {
					fmt.Fprintf(a.stdout, "gc: %d create(s) of dead processes may still be running in their backend; run gc again in a minute to collect what they make\n", n)
				}
				for _, e := range rep.Errors {
					fmt.Fprintln(a.stderr, "gc:", e)
				}
				if len(rep.Unlisted) > 0 {
					var names []string
					for _, u := range rep.Unlisted {
						name, _, _ := strings.Cut(u, ":")
						names = append(names, name)
						a.log.Debug("gc: provider not listed", "why", u)
					}
					fmt.Fprintf(a.stderr, "gc: could not list %s; nothing of this ledger is up there (--log-level debug says why)\n", strings.Join(names, ", "))
				}
			}
			if !rep.Clean() {
				return exitError{code: exitFailed}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&f.dryRun, "dry-run", false, "report what would be removed, remove nothing")
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON")
	return cmd
}
