package main

import (
	"context"
	"fmt"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/lifecycle"
)

func newSandboxCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{Use: "sandbox", Short: "Create, list and remove bare sandboxes"}
	cmd.AddCommand(newSandboxCreateCmd(a), newSandboxLsCmd(a), newSandboxRmCmd(a))
	return cmd
}

func newSandboxCreateCmd(a *app) *cobra.Command {
	var f struct {
		image, provider string
		ttl             time.Duration
		labels          []string
		ports           []int
		command         []string
		json            bool
	}
	cmd := &cobra.Command{
		Use:   "create --image IMG [--provider P] [--ttl D] [--label k=v]... [-- CMD ARGS...]",
		Short: "Create one sandbox; it outlives this command until its TTL passes",
		Example: `  agentenv sandbox create --image agentenv:dev --ttl 30m --label team=evals
  agentenv sandbox create --provider process -- sleep 600`,
		Args: func(cmd *cobra.Command, args []string) error {
			if dash := cmd.ArgsLenAtDash(); (dash < 0 && len(args) > 0) || dash > 0 {
				return usageError{fmt.Sprintf("sandbox create takes its command after --, got %q", args)}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			labels := map[string]string{}
			for _, l := range f.labels {
				k, v, err := agentenv.ParseLabel(l)
				if err != nil {
					return err
				}
				labels[k] = v
			}
			if f.ttl == 0 {
				d, err := a.cfg.Duration("lifecycle.ttl")
				if err != nil {
					return err
				}
				f.ttl = d
			}
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			members, err := mgr.ParseChain(a.providerFlag(f.provider))
			if err != nil {
				return err
			}
			rec, sb, err := mgr.CreateChain(ctx, members, lifecycle.CreateRequest{
				Spec: agentenv.SandboxSpec{Image: f.image, Command: args, Labels: labels, Ports: f.ports},
				TTL:  f.ttl,
			})
			if err != nil {
				return err
			}
			// Created and recorded: from here on it belongs to its expiry, not to this process.
			// Unless the user interrupted us meanwhile: then what was made is torn down.
			if ctx.Err() == nil {
				err = mgr.Release(ctx, time.Time{}, rec.ID)
			}
			if ctx.Err() != nil || err != nil {
				rc, _ := mgr.TeardownIDs(ctx, rec.ID)
				printReceipt(a.stderr, rc)
				if err == nil {
					err = context.Cause(ctx)
				}
				return err
			}
			if f.json {
				return printJSON(a.stdout, map[string]any{
					"record": rec.ID, "sandbox_id": sb.ID, "provider": rec.Provider,
					"expires": rec.Expires, "endpoints": sb.Endpoints,
				})
			}
			fmt.Fprintf(a.stdout, "record %s\nsandbox %s\nprovider %s\nexpires %s\n", rec.ID, sb.ID, rec.Provider, rec.Expires.Format(time.RFC3339))
			for port, addr := range sb.Endpoints {
				fmt.Fprintf(a.stdout, "port %s -> %s\n", port, addr)
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.image, "image", "", "image to run (docker); empty or \"host\" for the process provider")
	fl.StringVar(&f.provider, "provider", "", "provider or comma chain, e.g. docker or docker,process (default: provider.default)")
	fl.DurationVar(&f.ttl, "ttl", 0, "lifetime after which gc removes it (default: lifecycle.ttl, 3h)")
	fl.StringArrayVar(&f.labels, "label", nil, "label key=value (repeatable)")
	fl.IntSliceVar(&f.ports, "port", nil, "container port to publish on 127.0.0.1 (repeatable)")
	fl.BoolVar(&f.json, "json", false, "print one JSON object")
	return cmd
}

// sandboxRow is one line of `sandbox ls`: a record joined with what its provider lists.
type sandboxRow struct {
	Record     string         `json:"record"`
	Provider   string         `json:"provider"`
	Kind       agentenv.Kind  `json:"kind"`
	State      agentenv.State `json:"state"`  // the ledger's
	Status     string         `json:"status"` // live, exited, leaked, missing, gone
	SandboxID  string         `json:"sandbox_id,omitempty"`
	Deployment string         `json:"deployment,omitempty"`
	Run        string         `json:"run,omitempty"`
	Expires    time.Time      `json:"expires"`
	Owner      string         `json:"owner,omitempty"`
	Image      string         `json:"image,omitempty"`
	Error      string         `json:"error,omitempty"`
}

func newSandboxLsCmd(a *app) *cobra.Command {
	var f struct{ all, json bool }
	cmd := &cobra.Command{
		Use:   "ls [--all] [--json]",
		Short: "List sandboxes: the ledger joined with what each provider lists (live, leaked, gone)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			rows, err := joinSandboxes(cmd, mgr, f.all)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(a.stdout, rows)
			}
			out := make([][]string, 0, len(rows))
			for _, r := range rows {
				out = append(out, []string{r.Record, r.Provider, string(r.Kind), r.Status, string(r.State), ago(r.Expires), r.Image})
			}
			table(a.stdout, []string{"RECORD", "PROVIDER", "KIND", "STATUS", "LEDGER", "EXPIRES", "IMAGE"}, out)
			return nil
		},
	}
	cmd.Flags().BoolVar(&f.all, "all", false, "include gone records")
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON")
	return cmd
}

// joinSandboxes is the manager's inventory (the ledger joined with what the providers list,
// docker and process always among them) as rows. A provider that cannot be listed is skipped
// with a warning.
func joinSandboxes(cmd *cobra.Command, mgr *lifecycle.Manager, all bool) ([]sandboxRow, error) {
	listed, warnings, err := mgr.Inventory(cmd.Context(), all, "docker", "process")
	if err != nil {
		return nil, err
	}
	for _, w := range warnings {
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", w)
	}
	rows := make([]sandboxRow, 0, len(listed))
	for _, l := range listed {
		r := l.Record
		row := sandboxRow{Record: r.ID, Provider: r.Provider, Kind: r.Kind, State: r.State, SandboxID: r.SandboxID,
			Deployment: r.Deployment, Run: r.Run, Expires: r.Expires, Owner: r.Owner.String(), Image: r.Image, Error: r.Error, Status: l.Status}
		if sb := l.Sandbox; sb != nil && r.ID == "" {
			row.Record, row.Provider, row.SandboxID = sb.Labels[agentenv.LabelRecord], sb.Provider, sb.ID
		}
		if l.Status == "leaked" && l.Sandbox != nil {
			row.SandboxID, row.Provider = l.Sandbox.ID, l.Sandbox.Provider
		}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].Record < rows[j].Record })
	return rows, nil
}

func newSandboxRmCmd(a *app) *cobra.Command {
	var f struct{ json bool }
	cmd := &cobra.Command{
		Use:   "rm RECORD_ID...",
		Short: "Tear sandboxes down by record id and print the verified receipt",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			rc, terr := mgr.TeardownIDs(ctx, args...)
			if terr != nil && len(rc.Items) == 0 {
				return terr
			}
			if f.json {
				if err := printJSON(a.stdout, rc); err != nil {
					return err
				}
			} else {
				printReceipt(a.stdout, rc)
			}
			if !rc.Clean() {
				return exitError{code: exitFailed}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&f.json, "json", false, "print the receipt as JSON")
	return cmd
}
