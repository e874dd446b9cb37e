package deploy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/atomicfile"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/lifecycle"
)

// StoreProvider is the name the state store's provider is registered under: every database
// record of a store carries it.
const StoreProvider = "state"

// LocalStoreName is the record id (and container name) of the local store a `state up` without
// --name starts.
const LocalStoreName = "agentenv-state"

// localStoreTTL is a local store's lifetime: it stays until it is stopped.
const localStoreTTL = 10 * 365 * 24 * time.Hour

// localStoreWait bounds the wait for a local store to answer.
const localStoreWait = time.Minute

// LocalStore is a state store started on the Docker engine by StartLocalStore: a recorded
// container, and what LocalStores keeps of it.
type LocalStore struct {
	DSN       string `json:"dsn"`
	Container string `json:"container"`
}

// LocalStores keeps the DSN of each local store in Dir, a file NAME.json each, mode 0600 (the
// DSN carries the password).
type LocalStores struct{ Dir string }

func (s LocalStores) path(name string) string { return filepath.Join(s.Dir, name+".json") }

// Get returns the local store NAME, nil if none was started.
func (s LocalStores) Get(name string) (*LocalStore, error) {
	b, err := os.ReadFile(s.path(name))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("local state store: %w", err)
	}
	var ls LocalStore
	if err := json.Unmarshal(b, &ls); err != nil {
		return nil, fmt.Errorf("local state store %s: %w", s.path(name), err)
	}
	return &ls, nil
}

// Sole returns the local store when exactly one was started (under any name); nil when none
// or several were.
func (s LocalStores) Sole() (*LocalStore, error) {
	paths, err := filepath.Glob(filepath.Join(s.Dir, "*.json"))
	if err != nil {
		return nil, fmt.Errorf("local state stores: %w", err)
	}
	var found []*LocalStore
	for _, p := range paths {
		ls, err := s.Get(strings.TrimSuffix(filepath.Base(p), ".json"))
		if err == nil && ls != nil && ls.DSN != "" && ls.Container != "" {
			found = append(found, ls)
		}
	}
	if len(found) != 1 {
		return nil, nil
	}
	return found[0], nil
}

func (s LocalStores) put(name string, ls LocalStore) error {
	b, err := json.Marshal(ls)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(s.Dir, 0o700); err != nil {
		return err
	}
	return atomicfile.WriteBytes(s.path(name), 0o600, b)
}

func (s LocalStores) remove(name string) error {
	if err := os.Remove(s.path(name)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}

// StartLocalStore starts the local store NAME, a PostgreSQL container of image on the docker
// provider, recorded and labelled like any sandbox, and keeps its DSN in stores; if it runs
// already, it returns that DSN. It returns once the store answers a query, or within a minute
// with an error, after tearing down what it started.
func (d *Deployer) StartLocalStore(ctx context.Context, stores LocalStores, name, image string) (string, error) {
	ls, err := stores.Get(name)
	if err != nil {
		return "", err
	}
	if rec, err := d.mgr.Ledger().Get(ctx, name); err == nil && rec.State == agentenv.StateLive {
		_, err := d.mgr.Get(ctx, name)
		switch {
		case err == nil && ls != nil:
			return ls.DSN, waitStore(ctx, ls.DSN)
		case err == nil:
			return "", fmt.Errorf("state up: the store %s runs but its DSN file is gone; remove it with agentenv state down --name %s: %w", name, name, agentenv.ErrConflict)
		case errors.Is(err, agentenv.ErrNotFound):
			// Its container was removed behind our back: close the record (a verified
			// teardown) so the name can be claimed again.
			if _, err := d.mgr.Teardown(ctx, []agentenv.Record{rec}); err != nil {
				return "", fmt.Errorf("state up: replace the store %s: %w", name, err)
			}
		}
	}
	secret := make([]byte, 24)
	if _, err := rand.Read(secret); err != nil {
		return "", fmt.Errorf("state up: password: %w", err)
	}
	password := hex.EncodeToString(secret)
	if err := d.mgr.EnsureImages(ctx, "docker", image); err != nil {
		return "", fmt.Errorf("state up: %w", err)
	}
	rec, sb, err := d.mgr.Create(ctx, lifecycle.CreateRequest{
		Provider: "docker", ID: name, Role: agentenv.RoleStateStore, TTL: localStoreTTL,
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
		err = d.mgr.Release(ctx, rec.Expires, rec.ID)
	}
	if err == nil {
		err = stores.put(name, LocalStore{DSN: dsn, Container: sb.ID})
	}
	if err != nil {
		rc, terr := d.mgr.Teardown(ctx, []agentenv.Record{rec})
		d.log.Info("state up failed; its container was torn down", "clean", rc.Clean(), "err", terr)
		return "", fmt.Errorf("state up: %w", errors.Join(err, terr))
	}
	return dsn, nil
}

// StopLocalStore tears down the local store NAME: first the databases of the store's provider
// (templates always; deployments' only with force, else it refuses with ErrConflict), while
// the server still answers, then its container; then it forgets its DSN. storeDSN is the
// state store the manager's store provider reaches: it must be the local store's own when
// there are databases to drop. The receipt covers every teardown made.
func (d *Deployer) StopLocalStore(ctx context.Context, stores LocalStores, name, storeDSN string, force bool) (agentenv.Receipt, error) {
	var rc agentenv.Receipt
	ls, err := stores.Get(name)
	if err != nil {
		return rc, err
	}
	recs, err := d.mgr.Ledger().List(ctx, agentenv.Filter{Provider: StoreProvider, States: agentenv.NotGone()})
	if err != nil {
		return rc, fmt.Errorf("state down: %w", err)
	}
	var mine, templates []agentenv.Record
	if ls != nil {
		if storeDSN != ls.DSN && len(recs) > 0 {
			return rc, fmt.Errorf("state down: set state.store to the local store's DSN, so that its %d databases are dropped with their records: %w", len(recs), agentenv.ErrInvalid)
		}
		for _, r := range recs {
			if r.Role == RoleTemplate {
				templates = append(templates, r)
			} else {
				mine = append(mine, r)
			}
		}
	}
	if len(mine) > 0 && !force {
		return rc, fmt.Errorf("state down: %d databases of deployments are on the store (first: %s of deployment %s); tear them down first or pass --force: %w",
			len(mine), mine[0].ID, mine[0].Deployment, agentenv.ErrConflict)
	}
	// The databases first, while their server still answers; then the server.
	if dbs := append(mine, templates...); len(dbs) > 0 {
		drc, err := d.mgr.Teardown(ctx, dbs)
		rc = drc
		if err != nil {
			return rc, err
		}
	}
	if rec, err := d.mgr.Ledger().Get(ctx, name); err == nil && rec.State != agentenv.StateGone {
		src, err := d.mgr.Teardown(ctx, []agentenv.Record{rec})
		rc.Items = append(rc.Items, src.Items...)
		rc.Finished = src.Finished
		if rc.Started.IsZero() {
			rc.Started = src.Started
		}
		if err != nil {
			return rc, err
		}
	}
	if err := stores.remove(name); err != nil {
		return rc, fmt.Errorf("state down: %w", err)
	}
	return rc, nil
}

// waitStore waits, at most localStoreWait, until the store at dsn answers a query.
func waitStore(ctx context.Context, dsn string) error {
	wctx, cancel := context.WithTimeout(ctx, localStoreWait)
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
			return fmt.Errorf("state store not ready within %s: %w", localStoreWait, last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}
