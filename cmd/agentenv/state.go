package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/internal/atomicfile"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/pgname"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/pgstore"
)

// stateProvider is the name records of state store databases carry; stateRecord is the record
// id (and container name) of the local store `agentenv state up` starts.
const (
	stateProvider = "state"
	stateRecord   = "agentenv-state"
	// roleStateStore is the role of the local store's container.
	roleStateStore = pgstore.RoleStore
	// stateTTL is the local store's lifetime: it stays until `agentenv state down`.
	stateTTL = 10 * 365 * 24 * time.Hour
)

// localStore is what `agentenv state up` writes of the store it started, in the state folder
// (mode 0600: the DSN carries the password).
type localStore struct {
	DSN       string `json:"dsn"`
	Container string `json:"container"`
}

func localStorePath(name string) (string, error) {
	sd, err := stateDir()
	if err != nil {
		return "", err
	}
	return filepath.Join(sd, name+".json"), nil
}

// readLocalStore returns the local store name, or nil if none was started.
func readLocalStore(name string) (*localStore, error) {
	path, err := localStorePath(name)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("local state store: %w", err)
	}
	var ls localStore
	if err := json.Unmarshal(b, &ls); err != nil {
		return nil, fmt.Errorf("local state store %s: %w", path, err)
	}
	return &ls, nil
}

// soleLocalStore returns the local store when `agentenv state up` started exactly one (under
// any --name) in this state folder; nil when it started none or several.
func soleLocalStore() (*localStore, error) {
	sd, err := stateDir()
	if err != nil {
		return nil, err
	}
	paths, err := filepath.Glob(filepath.Join(sd, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("local state stores: %w", err)
	}
	var found []*localStore
	for _, p := range paths {
		ls, err := readLocalStore(strings.TrimSuffix(filepath.Base(p), ".json"))
		if err == nil && ls != nil && ls.DSN != "" && ls.Container != "" {
			found = append(found, ls)
		}
	}
	if len(found) != 1 {
		return nil, nil
	}
	return found[0], nil
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
		ls, err := soleLocalStore()
		if err != nil || ls == nil {
			return nil, err
		}
		dsn = ls.DSN
	}
	cfg := pgstore.Config{Name: stateProvider, DSN: dsn}
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
	s := &deploy.Store{Provider: stateProvider, DSN: dsn}
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
sandbox, named ` + stateRecord + `, which joins the private network of each docker deployment
that uses it. It stays until 'agentenv state down'. Use the DSN it prints as state.store:

  export AGENTENV_STATE_STORE=$(agentenv state up --json | jq -r .dsn)`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx := cmd.Context()
			mgr, err := a.manager(ctx)
			if err != nil {
				return err
			}
			dsn, err := stateUp(ctx, a, mgr, f.name)
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
	cmd.Flags().StringVar(&f.name, "name", stateRecord, "the store's record id and container name")
	return cmd
}

// stateUp starts the local store, or returns the DSN of the one running.
func stateUp(ctx context.Context, a *app, mgr *lifecycle.Manager, name string) (string, error) {
	ls, err := readLocalStore(name)
	if err != nil {
		return "", err
	}
	if rec, err := mgr.Ledger().Get(ctx, name); err == nil && rec.State == agentenv.StateLive {
		_, err := mgr.Get(ctx, name)
		switch {
		case err == nil && ls != nil:
			return ls.DSN, waitStore(ctx, ls.DSN)
		case err == nil:
			return "", fmt.Errorf("state up: the store %s runs but its DSN file is gone; remove it with agentenv state down --name %s: %w", name, name, agentenv.ErrConflict)
		case errors.Is(err, agentenv.ErrNotFound):
			// Its container was removed behind our back: close the record (a verified
			// teardown) so the name can be claimed again.
			if _, err := mgr.Teardown(ctx, []agentenv.Record{rec}); err != nil {
				return "", fmt.Errorf("state up: replace the store %s: %w", name, err)
			}
		}
	}
	image, err := a.cfg.Get("images.postgres")
	if err != nil {
		return "", err
	}
	password, err := randomHex(24)
	if err != nil {
		return "", err
	}
	if err := mgr.EnsureImages(ctx, "docker", image); err != nil {
		return "", fmt.Errorf("state up: %w", err)
	}
	rec, sb, err := mgr.Create(ctx, lifecycle.CreateRequest{
		Provider: "docker", ID: name, Role: roleStateStore, TTL: stateTTL,
		Spec: agentenv.SandboxSpec{
			Image: image,
			// Many deployments at once, each a few sessions; its data is episodes' state, so
			// commits need not wait for the disk.
			Command: []string{"postgres", "-c", "max_connections=1000", "-c", "synchronous_commit=off", "-c", "shared_buffers=256MB"},
			Env: map[string]string{
				"POSTGRES_USER": "agentenv", "POSTGRES_PASSWORD": password, "POSTGRES_DB": "agentenv",
				"POSTGRES_HOST_AUTH_METHOD": "scram-sha-256",
				"POSTGRES_INITDB_ARGS":      "--auth-local=scram-sha-256 --auth-host=scram-sha-256",
			},
			Ports: []int{5432}, Memory: 4 << 30, CPUs: 2, Pids: 4096,
		},
	})
	if err != nil {
		return "", fmt.Errorf("state up: %w", err)
	}
	u := url.URL{Scheme: "postgres", User: url.UserPassword("agentenv", password), Host: sb.Endpoints["5432"], Path: "/agentenv", RawQuery: "sslmode=disable"}
	dsn := u.String()
	err = waitStore(ctx, dsn)
	if err == nil {
		err = mgr.Release(ctx, rec.Expires, rec.ID)
	}
	if err != nil {
		rc, _ := mgr.Teardown(ctx, []agentenv.Record{rec})
		printReceipt(a.stderr, rc)
		return "", fmt.Errorf("state up: %w", err)
	}
	path, err := localStorePath(name)
	if err != nil {
		return "", err
	}
	b, _ := json.Marshal(localStore{DSN: dsn, Container: sb.ID})
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", fmt.Errorf("state up: %w", err)
	}
	if err := atomicfile.WriteBytes(path, 0o600, b); err != nil {
		return "", fmt.Errorf("state up: %w", err)
	}
	return dsn, nil
}

// waitStore waits, at most a minute, until the store at dsn answers a query.
func waitStore(ctx context.Context, dsn string) error {
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		tctx, tcancel := context.WithTimeout(wctx, 3*time.Second)
		conn, err := pgx.Connect(tctx, dsn)
		if err == nil {
			var one int
			err = conn.QueryRow(tctx, "SELECT 1").Scan(&one)
			cleanup.Do(tctx, 5*time.Second, conn.Close) //nolint:errcheck // the query said what matters
		}
		tcancel()
		if err == nil {
			return nil
		}
		last = err
		select {
		case <-wctx.Done():
			return fmt.Errorf("state store not ready within a minute: %w", last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("password: %w", err)
	}
	return hex.EncodeToString(b), nil
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
			ls, err := readLocalStore(f.name)
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
			recs, err := mgr.Ledger().List(ctx, agentenv.Filter{Provider: stateProvider, States: []agentenv.State{agentenv.StateCreating, agentenv.StateLive, agentenv.StateTerminating, agentenv.StateTerminateFailed, agentenv.StateAbandoned}})
			if err != nil {
				return err
			}
			var mine, templates []agentenv.Record
			if ls != nil {
				dsn, _ := a.cfg.Get("state.store")
				if dsn != ls.DSN && len(recs) > 0 {
					return fmt.Errorf("state down: set state.store to the local store's DSN, so that its %d databases are dropped with their records: %w", len(recs), agentenv.ErrInvalid)
				}
				for _, r := range recs {
					if r.Role == deploy.RoleTemplate {
						templates = append(templates, r)
					} else {
						mine = append(mine, r)
					}
				}
			}
			if len(mine) > 0 && !f.force {
				return fmt.Errorf("state down: %d databases of deployments are on the store (first: %s of deployment %s); tear them down first or pass --force: %w",
					len(mine), mine[0].ID, mine[0].Deployment, agentenv.ErrConflict)
			}
			// The databases first, while their server still answers; then the server.
			if dbs := append(mine, templates...); len(dbs) > 0 {
				rc, terr := mgr.Teardown(ctx, dbs)
				printReceipt(a.stderr, rc)
				if terr != nil {
					return terr
				}
			}
			if rec, err := mgr.Ledger().Get(ctx, f.name); err == nil && rec.State != agentenv.StateGone {
				rc, terr := mgr.Teardown(ctx, []agentenv.Record{rec})
				printReceipt(a.stderr, rc)
				if terr != nil {
					return terr
				}
			}
			if path, err := localStorePath(f.name); err == nil {
				if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
					return fmt.Errorf("state down: %w", err)
				}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&f.force, "force", false, "drop the databases of deployments still using the store too")
	cmd.Flags().StringVar(&f.name, "name", stateRecord, "the store's record id and container name")
	cmd.Flags().StringVar(&f.stateStore, "state-store", "", "the store's DSN (default: state.store, else the one 'state up --name' printed)")
	return cmd
}
