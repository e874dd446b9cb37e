package main

import (
	"context"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv/bundle"
	"github.com/agentenv/agentenv/eval"
	"github.com/agentenv/agentenv/harbor"
)

func newTasksCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "tasks", Short: "Check Harbor task folders and datasets"}
	var f struct {
		concurrency      int
		include, exclude []string
		provider         string
		imageMap         []string
		json             bool
		plainHTTP        bool
	}
	check := &cobra.Command{
		Use:   "check DIR|REF [--concurrency C] [--include GLOB] [--exclude GLOB] [--json]",
		Short: "Run every task of a Harbor dataset with the oracle and with nop: the oracle must score 1, nop below 1",
		Long: `check is Harbor's sanity check for task authors. Every selected task of DIR (a task folder,
or a dataset: a folder of them) runs once with the oracle agent (its solution/solve.sh) and once
with nop (nothing), in one run group, C episodes at once. A table says which task fails which
check and why: a build error, a verifier error (no reward, a timeout), the oracle below 1, nop
passing. Exit code 0 when every task passes, 1 when any fails, 2 for bad input.`,
		Example: `  agentenv tasks check harbor/testdata/corpus --concurrency 4`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if f.concurrency < 0 {
				return usageError{fmt.Sprintf("--concurrency %d: want 1 or more", f.concurrency)}
			}
			dir, from, err := a.localPath(ctx, args[0], f.plainHTTP, bundle.KindHarborTask, bundle.KindHarborDataset)
			if err != nil {
				return err
			}
			if !harbor.IsNative(dir) {
				return usageError{fmt.Sprintf("%s: not a Harbor task folder or dataset (no task.toml in it or in its folders)", args[0])}
			}
			if err := a.addImageMap(f.imageMap); err != nil {
				return err
			}
			er, err := a.evalRunner(ctx, f.provider, nil, nil, nil)
			if err != nil {
				return err
			}
			opts := eval.Options{Concurrency: f.concurrency}
			fromBundle(&opts, from)
			res, err := harbor.Check(ctx, er, dir, harbor.Selection{Include: f.include, Exclude: f.exclude},
				opts, eval.Overrides{Provider: a.providerFlag(f.provider)},
				func(w string) { fmt.Fprintln(a.stderr, "warning:", w) })
			if len(res.Rows) == 0 && err != nil {
				return err
			}
			if f.json {
				if err := printJSON(a.stdout, res); err != nil {
					return err
				}
			} else {
				rows := make([][]string, 0, len(res.Rows))
				bad := 0
				for _, r := range res.Rows {
					verdict := "ok"
					if !r.OK() {
						verdict, bad = "FAIL", bad+1
					}
					rows = append(rows, []string{r.Task, verdict, score(r.Oracle), score(r.Nop), r.Problem})
				}
				table(a.stdout, []string{"TASK", "CHECK", "ORACLE", "NOP", "PROBLEM"}, rows)
				fmt.Fprintf(a.stdout, "%d of %d tasks pass; group %s\n", len(res.Rows)-bad, len(res.Rows), res.Group)
			}
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			for _, r := range res.Rows {
				if !r.OK() {
					return exitError{code: exitFailed}
				}
			}
			return err
		},
	}
	fl := check.Flags()
	fl.IntVar(&f.concurrency, "concurrency", 4, "episodes at once")
	fl.StringArrayVar(&f.include, "include", nil, "check only the tasks whose folder name matches this glob (repeatable)")
	fl.StringArrayVar(&f.exclude, "exclude", nil, "leave out the tasks whose folder name matches this glob (repeatable)")
	fl.StringVar(&f.provider, "provider", "", "provider of the task containers (default: provider.default)")
	fl.StringArrayVar(&f.imageMap, "image-map", nil, "build with image TO where a Dockerfile's FROM names FROM: FROM=TO (repeatable; adds to images.map)")
	fl.BoolVar(&f.json, "json", false, "print the rows as JSON")
	plainHTTPFlag(fl, &f.plainHTTP)
	cmd.AddCommand(check)
	return cmd
}
