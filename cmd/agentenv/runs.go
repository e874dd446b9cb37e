package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/config"
	"github.com/agentenv/agentenv/eval"
	"github.com/agentenv/agentenv/internal/atomicfile"
	"github.com/agentenv/agentenv/task"
)

func newRunsCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "runs", Short: "Inspect recorded runs and run groups, export them"}
	var f struct {
		json, group bool
		limit       int
	}
	ls := &cobra.Command{
		Use:   "ls [--group] [--json]",
		Short: "List runs (or, with --group, run groups), newest first",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			if f.group {
				return listGroups(ctx, a, mgr.Ledger(), f.limit, f.json)
			}
			runs, err := mgr.Ledger().Runs().List(ctx, nil, 0)
			if err != nil {
				return err
			}
			out := make([]agentenv.Run, 0, len(runs))
			for _, r := range runs {
				if !eval.IsGroup(r) && (f.limit <= 0 || len(out) < f.limit) {
					out = append(out, r)
				}
			}
			if f.json {
				return printJSON(a.stdout, out)
			}
			rows := make([][]string, 0, len(out))
			for _, r := range out {
				rows = append(rows, []string{r.ID, r.Task, string(task.OutcomeOf(r)), score(r.Score), r.Attrs[eval.AttrGroup], ago(r.Created), r.Error})
			}
			table(a.stdout, []string{"RUN", "TASK", "OUTCOME", "SCORE", "GROUP", "STARTED", "ERROR"}, rows)
			return nil
		},
	}
	ls.Flags().BoolVar(&f.json, "json", false, "print JSON")
	ls.Flags().BoolVar(&f.group, "group", false, "list run groups (one per agentenv run) with their totals")
	ls.Flags().IntVar(&f.limit, "limit", 50, "at most this many (0: all)")
	get := &cobra.Command{
		Use:   "get RUN_OR_GROUP_ID [--json]",
		Short: "Show a run (steps, score, trajectory files, receipt) or a group (its totals and episodes)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			r, err := mgr.Ledger().Runs().Get(ctx, args[0])
			if err != nil {
				return unknownID("run or group", args[0], "runs ls", err)
			}
			if eval.IsGroup(r) {
				g, err := eval.FromDoc(r)
				if err != nil {
					return err
				}
				res, err := eval.Collect(ctx, mgr.Ledger(), g)
				if err != nil {
					return err
				}
				if f.json {
					return printJSON(a.stdout, res)
				}
				printGroup(a.stdout, res, true)
				return nil
			}
			if f.json {
				return printJSON(a.stdout, r)
			}
			fmt.Fprintf(a.stdout, "run %s  task %s  %s  score %s  started %s\n", r.ID, r.Task, task.OutcomeOf(r), score(r.Score), r.Created.Format(time.RFC3339))
			if g := r.Attrs[eval.AttrGroup]; g != "" {
				fmt.Fprintf(a.stdout, "group %s  instance %s  attempt %s\n", g, r.Attrs[eval.AttrInstance], r.Attrs[eval.AttrAttempt])
			}
			if b := r.Attrs[eval.AttrBundle]; b != "" {
				fmt.Fprintf(a.stdout, "bundle %s  digest %s\n", b, r.Attrs[eval.AttrBundleDigest])
			}
			if r.Error != "" {
				fmt.Fprintf(a.stdout, "error: %s\n", r.Error)
			}
			rows := make([][]string, 0, len(r.Steps))
			for _, s := range r.Steps {
				sc := ""
				if s.Score != nil {
					sc = fmt.Sprintf("%.3g", *s.Score)
				}
				rows = append(rows, []string{s.ID, s.Type, string(s.Status), sc, s.Ended.Sub(s.Started).Round(time.Millisecond).String(), string(s.ErrorKind), s.Error})
			}
			table(a.stdout, []string{"STEP", "TYPE", "STATUS", "SCORE", "TIME", "KIND", "ERROR"}, rows)
			for _, at := range r.Attempts {
				what := "episode"
				if at.Span != "" {
					what = "span " + at.Span
				}
				down := 0
				if at.Receipt != nil {
					down = at.Receipt.Count(agentenv.OutcomeTerminated) + at.Receipt.Count(agentenv.OutcomeAlreadyGone)
				}
				fmt.Fprintf(a.stdout, "retried: %s attempt %d (%s, %s error, %d torn down): %s\n", what, at.Attempt, at.Elapsed.Round(time.Millisecond), at.ErrorKind, down, at.Error)
			}
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
	cmd.AddCommand(ls, get, newRunsExportCmd(a), newRunsMergeCmd(a), newRunsPushCmd(a), newRunsPullCmd(a), newRunsCancelCmd(a))
	return cmd
}

func newRunsExportCmd(a *app) *cobra.Command {
	var f struct{ format, out string }
	cmd := &cobra.Command{
		Use:   "export GROUP --format chat-jsonl|csv|atif [--out FILE]",
		Short: "Export a group's finished episodes: conversations in the OpenAI chat format, scores, or ATIF trajectories",
		Long: `export writes the finished episodes of a run group (the latest of each slot; cancelled,
interrupted and infrastructure-error episodes are left out).

chat-jsonl: one JSON object per line: "messages" (the prompt_agent steps' conversation in the
OpenAI chat format: system, user, assistant with tool_calls, tool with tool_call_id), "score",
"outcome", "verifiers" (each scoring step with its score) and "metadata" (group, run, task,
instance, attempt, seed, model, agent). csv: a header, then one row of scores per episode.
atif: one ATIF-v1.7 trajectory (Harbor's Agent Trajectory Interchange Format) per line, one for
each prompt_agent step of each episode: session_id the run, trajectory_id RUN/STEP, the
episode's score and outcome in extra.episode. Secrets are redacted: the configured secret
settings' values, gateway tokens and bearer credentials.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if err := eval.CheckFormat(f.format); err != nil {
				return err
			}
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			g, err := eval.Store{Ledger: mgr.Ledger()}.Get(ctx, args[0])
			if err != nil {
				return unknownID("group", args[0], "runs ls --group", err)
			}
			red := eval.Redactor{Values: secretValues(a.cfg)}
			var n int
			if f.out == "" || f.out == "-" {
				n, err = eval.Export(ctx, mgr.Ledger(), g, f.format, a.stdout, red)
			} else {
				// The file is replaced only by a whole export: a failed one leaves it as it was.
				err = atomicfile.Write(f.out, 0o644, func(w io.Writer) (err error) {
					n, err = eval.Export(ctx, mgr.Ledger(), g, f.format, w, red)
					return err
				})
			}
			if err != nil {
				return err
			}
			fmt.Fprintf(a.stderr, "exported %d episodes of group %s (%s)\n", n, g.ID, f.format)
			return nil
		},
	}
	cmd.Flags().StringVar(&f.format, "format", eval.FormatChatJSONL, "chat-jsonl, csv or atif")
	cmd.Flags().StringVarP(&f.out, "out", "o", "", "write to this file (default: standard output)")
	return cmd
}

// secretValues returns the resolved values of the settings marked secret, for redaction.
func secretValues(cfg *config.Config) []string {
	var out []string
	for _, k := range config.Keys {
		if !k.Secret {
			continue
		}
		if v, err := cfg.Get(k.Name); err == nil && len(v) >= 4 {
			out = append(out, v)
		}
	}
	return out
}

func listGroups(ctx context.Context, a *app, l agentenv.Ledger, limit int, asJSON bool) error {
	groups, err := eval.Store{Ledger: l}.List(ctx, limit)
	if err != nil {
		return err
	}
	if asJSON {
		if groups == nil {
			groups = []eval.Group{}
		}
		return printJSON(a.stdout, groups)
	}
	rows := make([][]string, 0, len(groups))
	for _, g := range groups {
		names := make([]string, 0, len(g.Tasks))
		for _, t := range g.Tasks {
			names = append(names, fmt.Sprintf("%s×%d", t.Task, t.K*t.Instances))
		}
		status := string(g.Status)
		if g.Status == agentenv.RunRunning && !eval.Alive(g) {
			status = "interrupted"
		}
		if !g.Shard.IsZero() {
			status += " (shard " + g.Shard.String() + ")"
		}
		if g.MergedInto != "" {
			status += " merged into " + g.MergedInto
		}
		rows = append(rows, []string{g.ID, g.Name, status, strconv.Itoa(g.Slots()), strings.Join(names, " "), ago(g.Created), g.Error})
	}
	table(a.stdout, []string{"GROUP", "NAME", "STATUS", "EPISODES", "TASKS", "STARTED", "ERROR"}, rows)
	return nil
}

// printGroup prints a group's summary: one row per task, the totals, and (with episodes)
// every slot's episode.
func printGroup(w io.Writer, res eval.Result, episodes bool) {
	g := res.Group
	status := string(g.Status)
	if g.Status == agentenv.RunRunning && !eval.Alive(g) {
		status = "interrupted (resume with agentenv run --resume " + g.ID + ")"
	}
	fmt.Fprintf(w, "group %s  %s  %s  status %s  started %s\n", g.ID, g.Name, g.File, status, g.Created.Format(time.RFC3339))
	if g.Bundle != "" {
		fmt.Fprintf(w, "bundle %s  digest %s\n", g.Bundle, g.BundleDigest)
	}
	switch {
	case g.MergedInto != "":
		fmt.Fprintf(w, "shard %s, merged into group %s\n", g.Shard, g.MergedInto)
	case !g.Shard.IsZero():
		fmt.Fprintf(w, "shard %s of the eval's episodes (agentenv runs merge joins the shards)\n", g.Shard)
	case len(g.MergedFrom) > 0:
		fmt.Fprintf(w, "merged from shards %s\n", strings.Join(g.MergedFrom, " "))
	}
	if episodes {
		rows := make([][]string, 0, len(res.Lines))
		for _, l := range res.Lines {
			run := l.Run
			if run == "" {
				run = "(not run)"
			}
			rows = append(rows, []string{l.Task, strconv.Itoa(l.Instance), strconv.Itoa(l.Attempt), run, string(l.Outcome), score(l.Score), l.Error})
		}
		table(w, []string{"TASK", "INSTANCE", "ATTEMPT", "RUN", "OUTCOME", "SCORE", "ERROR"}, rows)
	}
	rows := make([][]string, 0, len(res.Tasks)+1)
	for _, s := range res.Tasks {
		rows = append(rows, summaryRow(s.Task, s.K, s))
	}
	if len(res.Tasks) > 1 {
		rows = append(rows, summaryRow("(all)", res.Overall.K, res.Overall))
	}
	table(w, []string{"TASK", "EPISODES", "PASSED", "SCORED BELOW 1", "FAILED", "ERROR", "CANCELLED", "MEAN [95% CI]", "PASS@K"}, rows)
	var extra []string
	if res.NotRun > 0 {
		extra = append(extra, fmt.Sprintf("%d not run", res.NotRun))
	}
	if res.Replaced > 0 {
		extra = append(extra, fmt.Sprintf("%d unfinished episodes run again by a resume", res.Replaced))
	}
	if res.CostUSD > 0 {
		extra = append(extra, fmt.Sprintf("model cost $%.4f", res.CostUSD))
	}
	if res.Stopped != "" {
		extra = append(extra, "stopped: "+res.Stopped)
	}
	if res.Elapsed > 0 {
		extra = append(extra, res.Elapsed.Round(time.Millisecond).String())
	}
	if len(extra) > 0 {
		fmt.Fprintln(w, strings.Join(extra, "; "))
	}
}

func summaryRow(name string, k int, s task.Summary) []string {
	// pass@k for k = 1, 2, 4, … below K, and K (--json has every k).
	var pk []string
	ks := []int{}
	for i := 1; i < k; i *= 2 {
		ks = append(ks, i)
	}
	for _, i := range append(ks, k) {
		if v, ok := s.PassAt[strconv.Itoa(i)]; ok {
			pk = append(pk, fmt.Sprintf("@%d %.3g", i, v))
		}
	}
	mean := "-"
	if s.Scored > 0 {
		mean = fmt.Sprintf("%.3g [%.3g, %.3g]", s.MeanScore, s.MeanCI95[0], s.MeanCI95[1])
	}
	return []string{name, strconv.Itoa(len(s.Episodes)), strconv.Itoa(s.Passed), strconv.Itoa(s.ScoredBelow), strconv.Itoa(s.Failed),
		strconv.Itoa(s.Errors), strconv.Itoa(s.Cancelled), mean, strings.Join(pk, " ")}
}

// unknownID makes a lookup that found nothing for an id the user typed bad input (exit 2),
// saying which command lists the ids there are; other errors pass as they are.
func unknownID(what, id, lister string, err error) error {
	if errors.Is(err, agentenv.ErrNotFound) {
		return fmt.Errorf("no %s %s in the ledger (agentenv %s lists them): %w", what, id, lister, agentenv.ErrInvalid)
	}
	return err
}
