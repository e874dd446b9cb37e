package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/bundle"
	"github.com/agentenv/agentenv/eval"
)

func newRunsPushCmd(a *app) *cobra.Command {
	var f struct{ plainHTTP, json bool }
	cmd := &cobra.Command{
		Use:   "push GROUP REF [--plain-http] [--json]",
		Short: "Publish a finished run group (documents, trajectories, artifacts) to an OCI registry",
		Long: `push packs a finished run group as one bundle of kind runs: the group's document, each
episode's run document, and each episode's run folder (trajectories and their images, gateway
trajectories, collected artifacts), deterministically (the same group makes the same digest),
and pushes it to REF, host[:port]/repo[:tag] (oci:// optional; tag latest if none). It prints
the pinned reference, which 'agentenv runs pull' brings into another ledger. A group still
running, interrupted, or merged into another is refused.`,
		Example: `  agentenv runs push group-3f2a9c1b0d4e ghcr.io/team/runs/notes-sweep:2026-12-06
  agentenv runs pull ghcr.io/team/runs/notes-sweep:2026-12-06`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			ref, err := bundle.ParseRef(args[1])
			if err != nil {
				return err
			}
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			sd, err := stateDir()
			if err != nil {
				return err
			}
			tmp, err := os.MkdirTemp("", "agentenv-runs-push-")
			if err != nil {
				return fmt.Errorf("runs push: %w", err)
			}
			defer os.RemoveAll(tmp)
			files, err := eval.SaveGroup(ctx, mgr.Ledger(), args[0], filepath.Join(sd, "runs"), tmp)
			if err != nil {
				return unknownID("group", args[0], "runs ls --group", err)
			}
			c, err := a.bundleClient(f.plainHTTP)
			if err != nil {
				return err
			}
			start := time.Now()
			p, err := c.Push(ctx, bundle.Source{Kind: bundle.KindRuns, Name: args[0], Entry: filepath.Join(tmp, eval.GroupFile), Files: files}, ref)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(a.stdout, struct {
					Ref    string `json:"ref"`
					Digest string `json:"digest"`
					Group  string `json:"group"`
					Files  int    `json:"files"`
					Size   int64  `json:"size"`
				}{p.Ref.String(), p.Digest, args[0], len(p.Config.Files), p.Size})
			}
			fmt.Fprintf(a.stderr, "pushed group %s (%d files, %s compressed) in %s\n", args[0], len(p.Config.Files), bytesText(p.Size), time.Since(start).Round(time.Millisecond))
			fmt.Fprintln(a.stdout, p.Ref.String())
			return nil
		},
	}
	plainHTTPFlag(cmd.Flags(), &f.plainHTTP)
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON")
	return cmd
}

func newRunsPullCmd(a *app) *cobra.Command {
	var f struct{ plainHTTP, json bool }
	cmd := &cobra.Command{
		Use:   "pull REF [--plain-http] [--json]",
		Short: "Bring a run group 'runs push' published into this ledger",
		Long: `pull fetches the runs bundle REF names (verified as every bundle is) and brings its group
into the current ledger: each episode's files into this machine's state folder (runs/RUN), the
paths in its documents rewritten to them, then the episodes' and the group's documents. After
it 'runs get GROUP' and the explorer show the group as it was where it ran. Pulling the same
group again changes nothing; a different group (or run) with the same id in this ledger is
refused before anything is written.`,
		Example: `  agentenv runs pull ghcr.io/team/runs/notes-sweep:2026-12-06
  agentenv runs get group-3f2a9c1b0d4e`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			ref, err := bundle.ParseRef(args[0])
			if err != nil {
				return err
			}
			r, err := a.pull(ctx, ref, f.plainHTTP)
			if err != nil {
				return err
			}
			if r.Config.Kind != bundle.KindRuns {
				return fmt.Errorf("%s is a bundle of kind %s, not a run group (kind %s): 'agentenv pull' or 'run' takes it: %w", ref, r.Config.Kind, bundle.KindRuns, agentenv.ErrInvalid)
			}
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			sd, err := stateDir()
			if err != nil {
				return err
			}
			g, already, err := eval.RestoreGroup(ctx, mgr.Ledger(), r.Tree, filepath.Join(sd, "runs"), eval.Origin{Ref: ref.String(), Digest: r.Digest})
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(a.stdout, struct {
					Group   string `json:"group"`
					Digest  string `json:"digest"`
					Already bool   `json:"already"`
				}{g.ID, r.Digest, already})
			}
			if already {
				fmt.Fprintf(a.stderr, "group %s is in the ledger already: nothing to do\n", g.ID)
			} else {
				fmt.Fprintf(a.stderr, "pulled group %s (%s, %d files) from %s@%s\n", g.ID, g.Name, len(r.Config.Files), ref.Name(), r.Digest)
			}
			fmt.Fprintln(a.stdout, g.ID)
			return nil
		},
	}
	plainHTTPFlag(cmd.Flags(), &f.plainHTTP)
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON")
	return cmd
}
