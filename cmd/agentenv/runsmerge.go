package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/eval"
	"github.com/agentenv/agentenv/ledger"
)

func newRunsMergeCmd(a *app) *cobra.Command {
	var f struct {
		json bool
		from []string
	}
	cmd := &cobra.Command{
		Use:   "merge GROUP... [--from DSN]... [--json]",
		Short: "Join the groups of an eval's shards (run --shard I/N) into one group, summarised as the eval run unsharded",
		Long: `merge joins the groups that 'agentenv run EVAL --shard I/N' made, one per shard, into one
group of this ledger, and prints its summary (per task and overall: counts, mean, pass@k),
the summary of the eval run unsharded. 'runs get', 'runs ls --group', 'runs export' and the
explorer show the merged group as any other.

The groups must be every shard 1/N … N/N of one eval (the same eval and task digests, k and
instances), each finished (a shard that was interrupted or cancelled: finish it with
'agentenv run --resume GROUP' first); otherwise nothing is written and every reason is
printed, the missing shards listed (exit 2).

No sandbox or record is copied: each shard's episodes are re-pointed to the merged group (the
shard's id kept in attrs.shard_group) and the shard's group is marked merged into it ('runs get
SHARD' still shows its own episodes). Shards that ran on machines with ledgers of their own
(each its own state folder) are read with --from DSN, one per ledger (a bolt file's path, or
postgres://…); their run documents are written into this ledger, and theirs are only read.
Their trajectory files stay where they ran: copy them to the same paths before exporting.

Merging is idempotent: the merged group's id follows from the shards' ids, so merging the
same shards again prints the same group and writes nothing, and a merge cut short is finished
by running it again. A shard already merged with other shards is refused.`,
		Example: `  agentenv runs merge group-1a… group-2b… group-3c…
  agentenv runs merge group-1a… group-2b… --from /mnt/node2/agentenv/ledger.bolt --json`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			dst := mgr.Ledger()
			ledgers := []agentenv.Ledger{dst}
			for _, dsn := range f.from {
				l, err := ledger.Open(ctx, dsn, a.log)
				if err != nil {
					return fmt.Errorf("--from: %w", err)
				}
				defer l.Close()
				ledgers = append(ledgers, l)
			}
			srcs, err := findGroups(ctx, ledgers, args)
			if err != nil {
				return err
			}
			g, already, err := eval.Merge(ctx, dst, srcs)
			if err != nil {
				return err
			}
			res, err := eval.Collect(ctx, dst, g)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(a.stdout, res)
			}
			if already {
				fmt.Fprintf(a.stderr, "these shards were merged already: group %s\n", g.ID)
			} else {
				fmt.Fprintf(a.stderr, "merged %d shards into group %s\n", len(srcs), g.ID)
			}
			printGroup(a.stdout, res, false)
			return nil
		},
	}
	cmd.Flags().BoolVar(&f.json, "json", false, "print the merged group's summary as JSON (as 'agentenv run EVAL --json')")
	cmd.Flags().StringArrayVar(&f.from, "from", nil, "also look for the groups in this ledger (DSN: a bolt file or postgres://…; repeatable)")
	return cmd
}

// findGroups finds each group id in the first of ledgers that has it; an id none has, or
// one given twice, is bad input naming it.
func findGroups(ctx context.Context, ledgers []agentenv.Ledger, ids []string) ([]eval.Source, error) {
	var out []eval.Source
	var errs []error
	seen := map[string]bool{}
	for _, id := range ids {
		if seen[id] {
			errs = append(errs, fmt.Errorf("group %s is given twice: %w", id, agentenv.ErrInvalid))
			continue
		}
		seen[id] = true
		found := false
		for _, l := range ledgers {
			g, err := eval.Store{Ledger: l}.Get(ctx, id)
			if errors.Is(err, agentenv.ErrNotFound) {
				continue
			}
			if err != nil {
				errs = append(errs, err)
			} else {
				out = append(out, eval.Source{Group: g, Ledger: l})
			}
			found = true
			break
		}
		if !found {
			where := "the ledger"
			if len(ledgers) > 1 {
				where = "the ledger or any --from ledger"
			}
			errs = append(errs, fmt.Errorf("no group %s in %s (agentenv runs ls --group lists them): %w", id, where, agentenv.ErrInvalid))
		}
	}
	return out, errors.Join(errs...)
}
