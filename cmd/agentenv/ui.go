package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/eval"
	"github.com/agentenv/agentenv/explorer"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/httpserve"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/task"
)

// uiShutdown bounds how long `agentenv ui` waits, once stopped, for the runs it started to tear
// down what they made (their own teardown bounds apply within it).
const uiShutdown = 5 * time.Minute

func newUICmd(a *app) *cobra.Command {
	var f struct {
		listen, token string
		hosts         []string
	}
	cmd := &cobra.Command{
		Use:   "ui [--listen 127.0.0.1:8234] [--token T] [--allow-host NAME]",
		Short: "Serve the explorer: runs, groups, episodes, trajectories, deployments and the ledger in a browser",
		Long: `ui serves the explorer from this binary over the same ledger and state folder as the CLI,
and prints its URL. Its pages show run groups (one per 'agentenv run') with pass@k and charts,
episodes with their steps, verifier rows and receipts, trajectories, deployments and the
ledger joined with the providers; they update live. Runs can be started and cancelled, and
deployments torn down and gc run, from the pages; the JSON API under /api/v1/ serves the same.

It listens on loopback. Listening on any other address needs --token, and then every request
must carry it (the printed URL does, once). Requests for another Host get 421, and every change
needs a same-origin request with the page's CSRF token. Ctrl-C stops it; the runs it started
are cancelled and tear down what they made first. With runner.backend temporal
(AGENTENV_RUNNER_BACKEND=temporal and runner.temporal), a run started from the pages is handed
to the 'agentenv worker' processes instead, and outlives this one.`,
		Example: `  agentenv ui
  agentenv ui --listen 0.0.0.0:8234 --token "$(openssl rand -hex 16)" --allow-host explorer.lan`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			if !explorer.Loopback(f.listen) && f.token == "" {
				return usageError{fmt.Sprintf("--listen %s is not a loopback address: give --token too, so that only you can reach it", f.listen)}
			}
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			sd, err := stateDir()
			if err != nil {
				return err
			}
			// With runner.backend temporal, the start button submits to the workers: a run
			// then outlives this process.
			remote, closeRemote, err := a.remote(ctx, runnerFlags{})
			if err != nil {
				return err
			}
			defer closeRemote()
			ln, err := httpserve.Listen(ctx, f.listen, 0)
			if err != nil {
				return fmt.Errorf("ui: %w", err)
			}
			hosts, err := explorer.Hosts(ln.Addr().String(), f.hosts...)
			if err != nil {
				ln.Close()
				return err
			}
			d := deploy.New(mgr, a.log)
			x, err := explorer.New(explorer.Config{
				Ledger: mgr.Ledger(), Runner: uiRunner{a: a, mgr: mgr, workdir: sd, remote: remote}, Deployer: d, Collector: mgr,
				Inventory: uiInventory{a: a, mgr: mgr}, RunsDir: sd + "/runs", Hosts: hosts, Token: f.token, Logger: a.log, Context: ctx,
			})
			if err != nil {
				ln.Close()
				return err
			}
			// Teardown and gc answer when done (up to the explorer's 10 min action bound); the
			// live event stream lifts its own deadlines.
			srv := httpserve.New(x.Handler(), httpserve.Limits{WriteTimeout: 11 * time.Minute})
			u := url.URL{Scheme: "http", Host: ln.Addr().String(), Path: "/"}
			if h, port, _ := net.SplitHostPort(ln.Addr().String()); net.ParseIP(h).IsUnspecified() {
				u.Host = net.JoinHostPort("127.0.0.1", port)
			}
			if f.token != "" {
				u.RawQuery = url.Values{"token": {f.token}}.Encode()
			}
			fmt.Fprintf(a.stdout, "explorer: %s\n", u.String())
			errc := make(chan error, 1)
			go func() { errc <- srv.Serve(ln) }()
			select {
			case err = <-errc:
			case <-ctx.Done():
			}
			sctx, cancel := cleanup.Context(ctx, uiShutdown)
			defer cancel()
			fmt.Fprintln(a.stderr, "explorer: stopping; runs it started tear down first")
			cerr := x.Close(sctx)
			_ = srv.Shutdown(sctx)
			if err != nil && !errors.Is(err, http.ErrServerClosed) {
				return fmt.Errorf("ui: %w", err)
			}
			if cerr != nil {
				return cerr
			}
			return context.Cause(ctx)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8234", "address to listen on (host:port; port 0 picks one)")
	fl.StringVar(&f.token, "token", "", "require this token on every request (needed beyond loopback)")
	fl.StringSliceVar(&f.hosts, "allow-host", nil, "another Host name the explorer is reached by (repeatable)")
	return cmd
}

// uiRunner runs tasks for the explorer's start button as 'agentenv run' does: as a group of
// the eval runner, which `runs ls --group`, `runs export` and `run --resume` know.
type uiRunner struct {
	a       *app
	mgr     *lifecycle.Manager
	workdir string
	remote  eval.Remote // runner.backend temporal: groups are handed to its workers, detached
}

func (u uiRunner) Run(ctx context.Context, req explorer.RunRequest, progress func(task.Event)) (string, error) {
	t, err := u.a.loadTask(ctx, req.Task)
	if err != nil {
		return "", err
	}
	if req.Provider != "" {
		if _, err := u.mgr.ParseChain(req.Provider); err != nil {
			return "", fmt.Errorf("provider: %w", err)
		}
	}
	tr, err := u.a.taskRunner(ctx, u.mgr, u.workdir, req.Provider, nil, nil, progress)
	if err != nil {
		return "", err
	}
	er := &eval.Runner{Tasks: tr, Logger: u.a.log, LoadTask: func(name string) (*task.Task, error) { return u.a.loadTask(ctx, name) }, Remote: u.remote,
		Fetch: u.a.fetchBundle}
	ef := eval.ForTask(t, req.K, req.Concurrency, req.Seeds, eval.Overrides{Provider: req.Provider})
	res, err := er.Run(ctx, ef, eval.Options{Concurrency: req.Concurrency, Detach: u.remote != nil})
	return res.Group.ID, err
}

// Cancel cancels a group handed to workers, as 'agentenv runs cancel' does.
func (u uiRunner) Cancel(ctx context.Context, group string) error {
	_, _, err := (&eval.Runner{Ledger: u.mgr.Ledger(), Remote: u.remote, Logger: u.a.log}).Cancel(ctx, group)
	return err
}

// uiInventory answers the explorer's ledger and health questions with the code of 'sandbox ls'
// and 'env get'.
type uiInventory struct {
	a   *app
	mgr *lifecycle.Manager
}

func (u uiInventory) Sandboxes(ctx context.Context) ([]explorer.Sandbox, error) {
	c := &cobra.Command{}
	c.SetContext(ctx)
	c.SetErr(io.Discard)
	rows, err := joinSandboxes(c, u.mgr, false)
	if err != nil {
		return nil, err
	}
	out := make([]explorer.Sandbox, 0, len(rows))
	for _, r := range rows {
		out = append(out, explorer.Sandbox{Record: r.Record, Provider: r.Provider, Kind: r.Kind, State: r.State, Status: r.Status,
			SandboxID: r.SandboxID, Deployment: r.Deployment, Run: r.Run, Owner: r.Owner, Image: r.Image, Error: r.Error})
	}
	return out, nil
}

func (u uiInventory) Health(ctx context.Context, r agentenv.Record) string {
	return deploy.New(u.mgr, u.a.log).Health(ctx, r.ID)
}
