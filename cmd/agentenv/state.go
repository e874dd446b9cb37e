package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/internal/pgname"
	"github.com/agentenv/agentenv/provider/pgstore"
)

// localStores are the stores `agentenv state up` started, kept in the state folder.
func localStores() (deploy.LocalStores, error) {
	sd, err := stateDir()
	return deploy.LocalStores{Dir: sd}, err
}

// setStateStore makes a command's --state-store flag win over state.store.
func (a *app) setStateStore(flag string) {
	if flag != "" {
		_ = a.cfg.Set("state.store", flag, "--state-store")
	}
}

// newStateStore builds the state store's provider from state.store, else from the one local
// store `agentenv state up` started (so that teardown and gc reach its databases without the
// flag a deploy was given); nil when there is neither, or several local stores and no setting. A store that is the local one joins the docker
// provider's private networks.
func newStateStore(a *app) (agentenv.Provider, error) {
	dsn, err := a.cfg.Get("state.store")
	if err != nil {
		return nil, err
	}
	if dsn == "" {
		stores, err := localStores()
		if err != nil {
			return nil, err
		}
		ls, err := stores.Sole()
		if err != nil || ls == nil {
			return nil, err
		}
		dsn = ls.DSN
	}
	cfg := pgstore.Config{Name: deploy.StoreProvider, DSN: dsn}
	if att, err := a.storeAttacher(dsn); err != nil {
		return nil, err
	} else if att != nil {
		cfg.Attach = att
	}
	return pgstore.New(cfg, a.log)
}

// storeAttacher returns the attacher of a store on this host's loopback, which may be a
// store container on the docker engine; nil for a store elsewhere.
func (a *app) storeAttacher(dsn string) (*pgstore.DockerAttacher, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("state.store: %w: %w", err, agentenv.ErrInvalid)
	}
	if !loopback(cfg.Host) {
		return nil, nil
	}
	host, err := a.cfg.Get("provider.docker.host")
	if err != nil {
		return nil, err
	}
	return pgstore.NewDockerAttacher(host, cfg.Port)
}

func loopback(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || strings.HasPrefix(host, "/") || ip != nil && ip.IsLoopback()
}

// store returns the deploys' state store, nil if state.store is unset. A store on this host's
// loopback is reached by docker's container-mode deploys if it is a store container on the
// engine (it joins their networks); by nothing else.
func (a *app) store(ctx context.Context) (*deploy.Store, error) {
	dsn, err := a.cfg.Get("state.store")
	if err != nil || dsn == "" {
		return nil, err
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("state.store: %w: %w", err, agentenv.ErrInvalid)
	}
	s := &deploy.Store{Provider: deploy.StoreProvider, DSN: dsn}
	if !loopback(cfg.Host) {
		s.Reach = net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
		return s, nil
	}
	att, err := a.storeAttacher(dsn)
	if err != nil {
		return nil, err
	}
	if _, err := att.Find(ctx); err == nil {
		s.Networks = []string{"docker"}
	} else if !errors.Is(err, agentenv.ErrNotFound) {
		a.log.Warn("state store: cannot ask the docker engine for its container; deploys use service DB containers", "err", err)
	}
	return s, nil
}

func newStateCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "A state store: one PostgreSQL server whose databases stand in for service DB containers",
		Long: `With state.store (AGENTENV_STATE_STORE, or --state-store on env deploy, run and soak)
naming a PostgreSQL server, each deployment's service DB is a database of its own on it,
copied from a template that the env's init_sql and seed made once per env digest, with its
own login roles. Every database is a ledger record: torn down with the deployment (verified
gone from pg_database) and collected by gc. A store you name is borrowed: only the databases
agentenv made in it are ever dropped. 'state up' starts a local store on the Docker engine.

Snapshots of env state ('agentenv env snapshot') are of two kinds: a template database of the
store, or, for a deployment whose service DB is a container, an image of that container's
image holding its database's dump, which needs no store. An env file's
service_db.from_snapshot deploys from either. 'state ls' lists them and 'state rm-snapshot'
removes one, with a verified receipt.`,
	}
	cmd.AddCommand(newStateUpCmd(a), newStateDownCmd(a), newStateLsCmd(a), newStateRmSnapshotCmd(a))
	return cmd
}

// newEnvSnapshotCmd is `agentenv env snapshot`.
func newEnvSnapshotCmd(a *app) *cobra.Command {
	var f struct{ name, stateStore string }
	cmd := &cobra.Command{
		Use:   "snapshot DEPLOYMENT --name NAME",
		Short: "Save a deployment's service DB (each server's schema) as a named snapshot",
		Long: `snapshot saves the deployment's service DB as snapshot NAME, recorded in the ledger until
'agentenv state rm-snapshot NAME'. An env file's service_db.from_snapshot: NAME then deploys
from it, so a long load_data is paid once. What it makes follows where the service DB is:

  a database of the state store   a template database of the store, copied from it; the
                                  deployment's open sessions are closed for the moment of
                                  the copy and its servers reconnect
  a container (docker)            an image of the service DB's image holding pg_dump's dump
                                  of its database, taken while the deployment runs on; it
                                  deploys on the provider that built it, in container mode,
                                  without a store

A deployment in VM mode, or on a provider that builds no images and without a store, cannot
be snapshotted.`,
		Example: `  agentenv env snapshot dep-0123456789ab --name seeded`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			if f.name == "" {
				return usageError{"env snapshot: --name is required"}
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
			rec, err := deploy.New(mgr, a.log).Snapshot(ctx, args[0], f.name, store)
			if err != nil {
				return err
			}
			what := "template database " + pgname.Database(rec.ID) + " of the state store"
			if rec.Kind == agentenv.KindImage {
				what = "image " + rec.Attrs[agentenv.AttrImageRef] + " on " + rec.Provider
			}
			fmt.Fprintf(a.stdout, "snapshot %s (record %s) of deployment %s: %s\n", f.name, rec.ID, args[0], what)
			return nil
		},
	}
	cmd.Flags().StringVar(&f.name, "name", "", "the snapshot's name, 1-40 of [a-z0-9-]")
	cmd.Flags().StringVar(&f.stateStore, "state-store", "", "the state store (overrides state.store)")
	return cmd
}

func newStateRmSnapshotCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "rm-snapshot NAME",
		Short: "Remove a snapshot of env state (a store's template database or an image), with a verified receipt",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			mgr, err := a.manager(cmd.Context())
			if err != nil {
				return err
			}
			rc, err := deploy.New(mgr, a.log).RemoveSnapshot(cmd.Context(), args[0])
			printReceipt(a.stdout, rc)
			return err
		},
	}
}

func newStateLsCmd(a *app) *cobra.Command {
	var f struct{ json bool }
	cmd := &cobra.Command{
		Use:   "ls [--json]",
		Short: "List the snapshots of env state: template databases of a store and images",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			mgr, err := a.manager(cmd.Context())
			if err != nil {
				return err
			}
			snaps, err := deploy.New(mgr, a.log).Snapshots(cmd.Context())
			if err != nil {
				return err
			}
			if f.json {
				if snaps == nil {
					snaps = []deploy.SnapshotInfo{}
				}
				return printJSON(a.stdout, snaps)
			}
			rows := make([][]string, 0, len(snaps))
			for _, s := range snaps {
				rows = append(rows, []string{s.Name, s.Kind, s.Env, s.Provider, s.Ref, ago(s.Created)})
			}
			table(a.stdout, []string{"NAME", "KIND", "ENV", "PROVIDER", "REF", "CREATED"}, rows)
			return nil
		},
	}
	cmd.Flags().BoolVar(&f.json, "json", false, "print JSON")
	return cmd
}

func newStateUpCmd(a *app) *cobra.Command {
	var f struct {
		json bool
		name string
	}
	cmd := &cobra.Command{
		Use:   "up [--json] [--name NAME]",
		Short: "Start a local state store on the Docker engine and print its DSN",
		Long: `up starts one PostgreSQL container (images.postgres), recorded and labelled like any
sandbox, named ` + deploy.LocalStoreName + `, which joins the private network of each docker deployment
that uses it. It stays until 'agentenv state down'. Use the DSN it prints as state.store:

  export AGENTENV_STATE_STORE=$(agentenv state up --json | jq -r .dsn)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			image, err := a.cfg.Get("images.postgres")
			if err != nil {
				return err
			}
			stores, err := localStores()
			if err != nil {
				return err
			}
			dsn, err := deploy.New(mgr, a.log).StartLocalStore(ctx, stores, f.name, image)
			if err != nil {
				return err
			}
			if f.json {
				return printJSON(a.stdout, map[string]string{"dsn": dsn})
			}
			fmt.Fprintln(a.stdout, dsn)
			return nil
		},
	}
	cmd.Flags().BoolVar(&f.json, "json", false, `print {"dsn": ...}`)
	cmd.Flags().StringVar(&f.name, "name", deploy.LocalStoreName, "the store's record id and container name")
	return cmd
}

func newStateDownCmd(a *app) *cobra.Command {
	var f struct {
		force            bool
		name, stateStore string
	}
	cmd := &cobra.Command{
		Use:   "down [--force] [--name NAME]",
		Short: "Remove the local state store (refused while deployments use it, unless --force)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			a.setStateStore(f.stateStore)
			stores, err := localStores()
			if err != nil {
				return err
			}
			ls, err := stores.Get(f.name)
			if err != nil {
				return err
			}
			if ls != nil && a.cfg.Raw("state.store") == "" {
				a.setStateStore(ls.DSN) // its databases' records need the store's provider
			}
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			dsn, err := a.cfg.Get("state.store")
			if err != nil {
				return err
			}
			rc, err := deploy.New(mgr, a.log).StopLocalStore(ctx, stores, f.name, dsn, f.force)
			if len(rc.Items) > 0 {
				printReceipt(a.stderr, rc)
			}
			return err
		},
	}
	cmd.Flags().BoolVar(&f.force, "force", false, "drop the databases of deployments still using the store too")
	cmd.Flags().StringVar(&f.name, "name", deploy.LocalStoreName, "the store's record id and container name")
	cmd.Flags().StringVar(&f.stateStore, "state-store", "", "the store's DSN (default: state.store, else the one 'state up --name' printed)")
	return cmd
}
