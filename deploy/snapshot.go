package deploy

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/pgstore"
	"github.com/agentenv/agentenv/spec"
)

// RoleSnapshot is the role of a snapshot of env state: a template database in the store.
const RoleSnapshot agentenv.Role = "state_snapshot"

// SnapshotTTL is a snapshot's lifetime: it stays until `agentenv state rm-snapshot`.
const SnapshotTTL = 10 * 365 * 24 * time.Hour

// labelSnapshotEnv labels a snapshot with the name of the env it was taken of.
const labelSnapshotEnv = "state.env"

// SnapshotRecord is the record id of snapshot name.
func SnapshotRecord(name string) string { return "snap-" + name }

// Snapshot saves the service DB of deployment id (a database of store) as snapshot name: a
// template database, recorded in the ledger with its own teardown, that an env file's
// service_db.from_snapshot deploys from. The deployment's sessions on its database are closed
// for the moment of the copy (PostgreSQL copies only a database no one is connected to); its
// servers reconnect. A deployment whose service DB is a container has nothing to copy: it
// needs a store.
func (d *Deployer) Snapshot(ctx context.Context, id, name string, store *Store) (agentenv.Record, error) {
	if !spec.SnapshotName.MatchString(name) {
		return agentenv.Record{}, fmt.Errorf("snapshot name %q: want 1-40 of [a-z0-9-], starting and ending with a letter or digit: %w", name, agentenv.ErrInvalid)
	}
	if store == nil {
		return agentenv.Record{}, fmt.Errorf("snapshot %s: needs a state store (state.store or --state-store), of which the deployment's service DB is a database: %w", name, agentenv.ErrInvalid)
	}
	doc, err := d.mgr.Ledger().Deployments().Get(ctx, id)
	if err != nil {
		return agentenv.Record{}, fmt.Errorf("snapshot %s: %w", id, err)
	}
	if doc.State != agentenv.DeploymentLive {
		return agentenv.Record{}, fmt.Errorf("snapshot %s: deployment is %s, want live: %w", id, doc.State, agentenv.ErrInvalid)
	}
	recs, err := d.mgr.Ledger().List(ctx, agentenv.Filter{Deployment: id, States: []agentenv.State{agentenv.StateLive}})
	if err != nil {
		return agentenv.Record{}, fmt.Errorf("snapshot %s: %w", id, err)
	}
	var src string
	for _, r := range recs {
		if r.Role == agentenv.RoleServiceDB {
			if r.Provider != store.Provider {
				return agentenv.Record{}, fmt.Errorf("snapshot %s: its service DB is a %s container, not a database of the state store; deploy it with --state-store to snapshot it: %w", id, r.Provider, agentenv.ErrInvalid)
			}
			src = pgstore.DatabaseName(r.ID)
		}
	}
	if src == "" {
		return agentenv.Record{}, fmt.Errorf("snapshot %s: the deployment has no service DB: %w", id, agentenv.ErrInvalid)
	}
	if old, err := d.mgr.Ledger().Get(ctx, SnapshotRecord(name)); err == nil && old.State != agentenv.StateGone {
		return agentenv.Record{}, fmt.Errorf("snapshot %s exists already (%s); remove it with agentenv state rm-snapshot %s: %w", name, old.State, name, agentenv.ErrConflict)
	}
	st := &stack{d: d, opts: Options{Store: store}}
	if err := st.storeExec(ctx, "", fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS false`, pgIdent(src))); err != nil {
		return agentenv.Record{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	defer func() {
		cctx, cancel := cleanup.Context(ctx, 30*time.Second)
		defer cancel()
		if err := st.storeExec(cctx, "", fmt.Sprintf(`ALTER DATABASE %s ALLOW_CONNECTIONS true`, pgIdent(src))); err != nil {
			d.log.Warn("snapshot: let the deployment's servers back into their database", "database", src, "err", err)
		}
	}()
	if err := st.storeExec(ctx, "", `SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = `+pgLiteral(src)); err != nil {
		return agentenv.Record{}, fmt.Errorf("snapshot %s: close the deployment's sessions: %w", name, err)
	}
	rec, sb, err := d.mgr.Create(ctx, lifecycle.CreateRequest{
		Provider: store.Provider, ID: SnapshotRecord(name), Role: RoleSnapshot, TTL: SnapshotTTL,
		Spec: agentenv.SandboxSpec{Image: src, Labels: map[string]string{labelSnapshotEnv: doc.Env}},
	})
	if err != nil {
		return agentenv.Record{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	if err := d.sealSnapshot(ctx, st, src, sb.ID); err != nil {
		if _, terr := d.mgr.Teardown(ctx, []agentenv.Record{rec}); terr != nil {
			d.log.Warn("tear down a snapshot that failed", "record", rec.ID, "err", terr)
		}
		return agentenv.Record{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	if err := d.mgr.Release(ctx, rec.Expires, rec.ID); err != nil {
		return agentenv.Record{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	return rec, nil
}

// sealSnapshot hands what the deployment's roles owned in the copy db of src to the store's
// admin and drops their rights there (a deployment from it makes roles of its own, and the
// source's roles must stay droppable), then makes db a template no one connects to.
func (d *Deployer) sealSnapshot(ctx context.Context, st *stack, src, db string) error {
	conn, err := st.storeConn(ctx, db)
	if err != nil {
		return err
	}
	rows, err := conn.Query(ctx, `SELECT quote_ident(rolname) FROM pg_roles WHERE starts_with(rolname, $1)`, pgstore.RolePrefix(src))
	var roles []string
	if err == nil {
		roles, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	// DROP OWNED also revokes the roles' rights on databases, the source's included: they
	// are read first and given back after.
	var grants []string
	if err == nil {
		rows, err = conn.Query(ctx, `SELECT format('GRANT %s ON DATABASE %I TO %I', a.privilege_type, d.datname, r.rolname)
			FROM pg_database d, aclexplode(d.datacl) a JOIN pg_roles r ON r.oid = a.grantee
			WHERE d.datname = $1 AND starts_with(r.rolname, $2)`, src, pgstore.RolePrefix(src))
		if err == nil {
			grants, err = pgx.CollectRows(rows, pgx.RowTo[string])
		}
	}
	for _, r := range roles {
		if err != nil {
			break
		}
		_, err = conn.Exec(ctx, fmt.Sprintf("REASSIGN OWNED BY %[1]s TO CURRENT_USER; DROP OWNED BY %[1]s", r))
	}
	for _, g := range grants {
		if err != nil {
			break
		}
		_, err = conn.Exec(ctx, g)
	}
	cerr := cleanup.Do(ctx, closeTimeout, conn.Close)
	if err != nil {
		return fmt.Errorf("hand the copy to the store: %w", err)
	}
	if cerr != nil {
		return cerr
	}
	return st.storeExec(ctx, "", fmt.Sprintf(`ALTER DATABASE %s WITH IS_TEMPLATE true ALLOW_CONNECTIONS false`, pgIdent(db)))
}

// snapshotTemplate returns the database of the env's service_db.from_snapshot, or an error
// naming that field when the ledger has no such snapshot.
func (st *stack) snapshotTemplate(ctx context.Context) (string, error) {
	name := st.env.ServiceDB.FromSnapshot
	rec, err := st.d.mgr.Ledger().Get(ctx, SnapshotRecord(name))
	if err != nil || rec.State != agentenv.StateLive || rec.Provider != st.opts.Store.Provider {
		return "", st.env.FieldError("service_db.from_snapshot", "no snapshot %q in the state store: make one with agentenv env snapshot DEPLOYMENT --name %s", name, name)
	}
	return pgstore.DatabaseName(rec.ID), nil
}

// RemoveSnapshot tears down snapshot name and returns the receipt.
func (d *Deployer) RemoveSnapshot(ctx context.Context, name string) (agentenv.Receipt, error) {
	rec, err := d.mgr.Ledger().Get(ctx, SnapshotRecord(name))
	if err != nil {
		return agentenv.Receipt{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	if rec.Role != RoleSnapshot {
		return agentenv.Receipt{}, fmt.Errorf("record %s is a %s, not a snapshot: %w", rec.ID, rec.Role, agentenv.ErrInvalid)
	}
	return d.mgr.Teardown(ctx, []agentenv.Record{rec})
}

func pgIdent(s string) string { return pgx.Identifier{s}.Sanitize() }

func pgLiteral(s string) string {
	out := "'"
	for _, r := range s {
		if r == '\'' {
			out += "''"
		} else {
			out += string(r)
		}
	}
	return out + "'"
}
