package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/bundle"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/spec"
)

func newEnvDeployCmd(a *app) *cobra.Command {
	var f struct {
		provider, mode, name, into string
		maxConns, maxSessions      string
		ttl, budget                time.Duration
		json                       bool
		passEnv                    []string
		stateStore                 string
		plainHTTP                  bool
	}
	cmd := &cobra.Command{
		Use:   "deploy FILE|REF [--provider P|A,B] [--mode vm|container] [--ttl D] [--name ID]",
		Short: "Deploy an env behind its gateway; prints the gateway URL and token",
		Long: `deploy starts every component of the env (service DB first, then the MCP servers and
sidecars in parallel, then the gateway), waits until each answers, and prints the gateway's
MCP URL and bearer tokens: "token" is the admin's (every route; may name any role with the
AgentEnv-Role header), "tokens" maps each role of gateway.roles and "default" to a token bound
to that role (tool calls through /mcp and /step only; hand an agent its role's). The
deployment outlives this command until its TTL passes; tear it
down with 'agentenv env teardown ID'. A failure or Ctrl-C tears down everything it made.`,
		Example: `  agentenv env deploy examples/notes/env.yaml
  agentenv env deploy examples/kv/env.yaml --mode vm --ttl 30m --json`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			path, from, err := a.localPath(ctx, args[0], f.plainHTTP, bundle.KindEnv)
			if err != nil {
				return err
			}
			env, err := spec.Load(path)
			if err != nil {
				return err
			}
			if f.ttl == 0 {
				if f.ttl, err = a.cfg.Duration("lifecycle.ttl"); err != nil {
					return err
				}
			}
			a.setStateStore(f.stateStore)
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			store, err := a.store(ctx)
			if err != nil {
				return err
			}
			progress := func(e deploy.Event) {
				if !f.json {
					fmt.Fprintln(a.stderr, e)
				}
			}
			if f.maxConns != "" {
				_ = a.cfg.Set("gateway.max_conns", f.maxConns, "--max-conns")
			}
			if f.maxSessions != "" {
				_ = a.cfg.Set("gateway.max_sessions", f.maxSessions, "--max-sessions")
			}
			conns, sessions, err := a.gatewayCaps()
			if err != nil {
				return err
			}
			logins, err := a.logins()
			if err != nil {
				return err
			}
			res, err := deploy.New(mgr, a.log).Deploy(ctx, env, deploy.Options{
				Provider: a.providerFlag(f.provider), Mode: f.mode, TTL: f.ttl, Name: f.name,
				Into: f.into, Budget: f.budget, Progress: progress, PassEnv: a.passEnv(f.passEnv), Store: store,
				GatewayMaxConns: conns, GatewayMaxSessions: sessions, Pinned: from.Pins(), Logins: logins,
			})
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(a.stdout, map[string]any{
					"id": res.Doc.ID, "gateway_url": res.GatewayURL, "token": res.Token,
					"tokens": res.Tokens,
					"env":    res.Doc.Env, "provider": res.Doc.Winner, "mode": res.Doc.Mode,
					"servers": res.Doc.Servers, "tools": res.Doc.Tools, "urls": res.Doc.URLs,
					"database_url": res.DatabaseURL, "expires": res.Doc.Expires, "records": res.Records,
				})
			}
			if res.GatewayURL == "" {
				// gateway.enabled: false: the servers are reached directly, without a token.
				fmt.Fprintf(a.stdout, "deployment  %s\ngateway     none (gateway.enabled: false)\n", res.Doc.ID)
				for _, name := range slices.Sorted(maps.Keys(res.Doc.URLs)) {
					if s := env.Server(name); s != nil {
						path := s.Path
						if s.URL != "" {
							path = ""
						}
						fmt.Fprintf(a.stdout, "server      %s %s%s\n", name, res.Doc.URLs[name], path)
					}
				}
				printWebsites(a, env, res.Doc.URLs)
				fmt.Fprintf(a.stdout, "provider    %s, %s mode\nexpires     %s\ntear down:  agentenv env teardown %s\n",
					res.Doc.Winner, res.Doc.Mode, res.Doc.Expires.Format(time.RFC3339), res.Doc.ID)
				return nil
			}
			fmt.Fprintf(a.stdout, "deployment  %s\ngateway     %s\ntoken       %s\nservers     %s (%d tools)\nprovider    %s, %s mode\nexpires     %s\n",
				res.Doc.ID, res.GatewayURL, res.Token, strings.Join(res.Doc.Servers, ", "), res.Doc.Tools,
				res.Doc.Winner, res.Doc.Mode, res.Doc.Expires.Format(time.RFC3339))
			for _, role := range slices.Sorted(maps.Keys(res.Tokens)) {
				fmt.Fprintf(a.stdout, "role token  %s %s\n", role, res.Tokens[role])
			}
			printWebsites(a, env, res.Doc.URLs)
			if u := res.Doc.URLs["db-web"]; u != "" {
				fmt.Fprintf(a.stdout, "db web UI   %s\n", u)
			}
			if u := res.Doc.URLs[spec.BrowserVNCService]; u != "" {
				fmt.Fprintf(a.stdout, "browser vnc %s (admin token)\n", u)
			}
			fmt.Fprintf(a.stdout, "tear down:  agentenv env teardown %s\n", res.Doc.ID)
			return nil
		},
	}
	fl := cmd.Flags()
	plainHTTPFlag(fl, &f.plainHTTP)
	fl.StringArrayVar(&f.passEnv, "pass-env", nil, "let the env file's env:NAME references read NAME from this environment (repeatable; adds to env.pass)")
	fl.StringVar(&f.provider, "provider", "", "provider or comma chain (default: provider.default)")
	fl.StringVar(&f.mode, "mode", "", "container or vm (default: container where the provider supports it)")
	fl.DurationVar(&f.ttl, "ttl", 0, "lifetime after which gc removes it (default: lifecycle.ttl, 3h)")
	fl.StringVar(&f.name, "name", "", "deployment id (default: drawn)")
	fl.StringVar(&f.into, "into", "", "VM mode: deploy into this existing VM record (it is never torn down by the deploy)")
	fl.DurationVar(&f.budget, "budget", 0, "wall-clock bound on the whole deploy (default 5m)")
	fl.BoolVar(&f.json, "json", false, "print one JSON object (id, gateway_url, token, tokens, ...)")
	fl.StringVar(&f.maxConns, "max-conns", "", "cap on the gateway's open connections, over the env file's (config gateway.max_conns)")
	fl.StringVar(&f.maxSessions, "max-sessions", "", "cap on the gateway's MCP sessions, over the env file's (config gateway.max_sessions)")
	fl.StringVar(&f.stateStore, "state-store", "", "PostgreSQL server whose database is the service DB (overrides state.store; see 'agentenv state')")
	return cmd
}

func newEnvLsCmd(a *app) *cobra.Command {
	var f struct{ all, json bool }
	cmd := &cobra.Command{
		Use:   "ls [--all] [--json]",
		Short: "List deployments (live and deploying, or all with --all)",
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			states := agentenv.DocStates(agentenv.DeploymentLive, agentenv.DeploymentDeploying)
			if f.all {
				states = nil
			}
			docs, err := mgr.Ledger().Deployments().List(ctx, states, 0)
			if err != nil {
				return err
			}
			if f.json {
				if docs == nil {
					docs = []agentenv.Deployment{}
				}
				return printJSON(a.stdout, docs)
			}
			rows := make([][]string, 0, len(docs))
			for _, d := range docs {
				rows = append(rows, []string{d.ID, d.Env, string(d.State), d.Winner, d.Mode, d.GatewayURL, ago(d.Expires)})
			}
			table(a.stdout, []string{"ID", "ENV", "STATE", "PROVIDER", "MODE", "GATEWAY", "EXPIRES"}, rows)
			return nil
		},
	}
	cmd.Flags().BoolVar(&f.all, "all", false, "include failed and torn-down deployments")
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON")
	return cmd
}

func newEnvGetCmd(a *app) *cobra.Command {
	var f struct{ json bool }
	cmd := &cobra.Command{
		Use:   "get ID [--json]",
		Short: "Show a deployment: its record, its sandboxes and their health",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			in, err := deploy.New(mgr, a.log).Inspect(ctx, args[0])
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(a.stdout, in)
			}
			doc, re := in.Deployment, in.Reattach
			fmt.Fprintf(a.stdout, "deployment %s  env %s  state %s  provider %s (%s)  expires %s\n", doc.ID, doc.Env, doc.State, doc.Winner, doc.Mode, ago(doc.Expires))
			if doc.GatewayURL != "" {
				fmt.Fprintf(a.stdout, "gateway %s  servers %s  tools %d\n", doc.GatewayURL, strings.Join(doc.Servers, ","), doc.Tools)
			}
			if doc.Error != "" {
				fmt.Fprintf(a.stdout, "error: %s\n", doc.Error)
			}
			if re != nil {
				verdict := "usable"
				if !re.OK {
					verdict = "not usable: " + re.Error
				}
				fmt.Fprintf(a.stdout, "reattach: %s\n", verdict)
				for _, w := range re.Warnings {
					fmt.Fprintf(a.stdout, "warning: %s\n", w)
				}
			}
			rows := make([][]string, 0, len(in.Sandboxes))
			for _, s := range in.Sandboxes {
				rows = append(rows, []string{s.Record, string(s.Role), string(s.State), s.Health})
			}
			table(a.stdout, []string{"RECORD", "ROLE", "LEDGER", "HEALTH"}, rows)
			if doc.Receipt != nil {
				printReceipt(a.stdout, *doc.Receipt)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON")
	return cmd
}

func newEnvTeardownCmd(a *app) *cobra.Command {
	var f struct{ json bool }
	cmd := &cobra.Command{
		Use:   "teardown ID...",
		Short: "Tear deployments down and print the verified receipt",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			d := deploy.New(mgr, a.log)
			clean := true
			for _, id := range args {
				rc, err := d.Teardown(ctx, id)
				if err != nil && len(rc.Items) == 0 {
					return err
				}
				clean = clean && rc.Clean()
				if f.json {
					if err := printJSON(a.stdout, map[string]any{"deployment": id, "receipt": rc}); err != nil {
						return err
					}
					continue
				}
				fmt.Fprintf(a.stdout, "deployment %s\n", id)
				printReceipt(a.stdout, rc)
			}
			if !clean {
				return exitError{code: exitFailed}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&f.json, "json", false, "print the receipts as JSON")
	return cmd
}

// printWebsites prints each website of env with its URL: through the gateway (the admin token
// or a role token), or its own port without a gateway.
func printWebsites(a *app, env *spec.Env, urls map[string]string) {
	for _, w := range env.Websites {
		if u := urls[w.Name]; u != "" {
			fmt.Fprintf(a.stdout, "website     %s %s\n", w.Name, u)
		}
	}
}
