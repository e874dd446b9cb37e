package deploy

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/pgname"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/spec"
)

// RoleSnapshot is the role of a snapshot of env state: a template database in the store, or an
// image of a service DB container with its dump.
const RoleSnapshot agentenv.Role = "state_snapshot"

// SnapshotTTL is a snapshot's lifetime: it stays until `agentenv state rm-snapshot`.
const SnapshotTTL = 10 * 365 * 24 * time.Hour

// SnapshotDump is where an image snapshot holds its service DB's dump (pg_dump's plain SQL).
const SnapshotDump = "/agentenv/snapshot.sql"

// labelSnapshotEnv labels a snapshot with the name of the env it was taken of.
const labelSnapshotEnv = "state.env"

// SnapshotRecord is the record id of snapshot name.
func SnapshotRecord(name string) string { return "snap-" + name }

// Snapshot saves the service DB of deployment id as snapshot name, recorded in the ledger with
// its own teardown, that an env file's service_db.from_snapshot deploys from. What it makes
// follows where the service DB is:
//
//   - a database of store: a template database of the store (the record's Kind is sandbox).
//     The deployment's sessions on its database are closed for the moment of the copy
//     (PostgreSQL copies only a database no one is connected to); its servers reconnect.
//   - a container (container mode) on a provider that builds images: an image of the service
//     DB's image with the database's dump at SnapshotDump (KindImage), from pg_dump inside the
//     container; the deployment keeps running.
//
// A VM-mode deployment's service DB, which has no record of its own, cannot be snapshotted.
func (d *Deployer) Snapshot(ctx context.Context, id, name string, store *Store) (agentenv.Record, error) {
	if !spec.SnapshotName.MatchString(name) {
		return agentenv.Record{}, fmt.Errorf("snapshot name %q: want 1-40 of [a-z0-9-], starting and ending with a letter or digit: %w", name, agentenv.ErrInvalid)
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
	var db *agentenv.Record
	for _, r := range recs {
		if r.Role == agentenv.RoleServiceDB {
			db = &r
		}
	}
	switch {
	case db == nil && doc.Mode == ModeVM:
		return agentenv.Record{}, fmt.Errorf("snapshot %s: its service DB runs in the stack of a VM (vm mode), which has no record of its own to dump: deploy it in container mode or with --state-store to snapshot it: %w", id, agentenv.ErrInvalid)
	case db == nil:
		return agentenv.Record{}, fmt.Errorf("snapshot %s: the deployment has no service DB: %w", id, agentenv.ErrInvalid)
	}
	if old, err := d.mgr.Ledger().Get(ctx, SnapshotRecord(name)); err == nil && old.State != agentenv.StateGone {
		return agentenv.Record{}, fmt.Errorf("snapshot %s exists already (%s); remove it with agentenv state rm-snapshot %s: %w", name, old.State, name, agentenv.ErrConflict)
	}
	if store != nil && db.Provider == store.Provider {
		return d.snapshotStore(ctx, doc, *db, name, store)
	}
	return d.snapshotImage(ctx, doc, *db, name)
}

// snapshotStore copies the service DB db, a database of store, into a template database.
func (d *Deployer) snapshotStore(ctx context.Context, doc agentenv.Deployment, db agentenv.Record, name string, store *Store) (agentenv.Record, error) {
	src := pgname.Database(db.ID)
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

// snapshotImage dumps the service DB container db (pg_dump inside it, one consistent snapshot
// of the env's database while its servers run on) and builds an image of db's image with the
// dump, on db's provider.
func (d *Deployer) snapshotImage(ctx context.Context, doc agentenv.Deployment, db agentenv.Record, name string) (agentenv.Record, error) {
	if ok, err := d.mgr.Supports(db.Provider, agentenv.AbilityImageBuild); err != nil || !ok {
		return agentenv.Record{}, fmt.Errorf("snapshot %s: its service DB runs on provider %s, which builds no images to hold it; deploy it on docker, or with --state-store: %w", doc.ID, db.Provider, agentenv.ErrInvalid)
	}
	res, err := d.mgr.Exec(ctx, db.ID, inServiceDB("pg_dump", "--no-owner", "--no-privileges"))
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	if err != nil {
		return agentenv.Record{}, fmt.Errorf("snapshot %s: pg_dump in %s: %w", name, db.ID, err)
	}
	rec, _, err := d.mgr.Create(ctx, lifecycle.CreateRequest{
		Provider: db.Provider, Kind: agentenv.KindImage, ID: SnapshotRecord(name), Role: RoleSnapshot, TTL: SnapshotTTL,
		Spec: agentenv.SandboxSpec{Image: db.Image, Files: map[string][]byte{SnapshotDump: res.Stdout}, Labels: map[string]string{labelSnapshotEnv: doc.Env}},
	})
	if err != nil {
		return agentenv.Record{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	if err := d.mgr.Release(ctx, rec.Expires, rec.ID); err != nil {
		return agentenv.Record{}, fmt.Errorf("snapshot %s: %w", name, err)
	}
	return rec, nil
}

// inServiceDB is the argv that runs tool (pg_dump, psql) with args (plain words) inside a
// service DB container, as its superuser over TCP on 127.0.0.1 (the server the image's init
// ends with, not the one it runs on a socket meanwhile). Login, password and database come from
// the container's own environment, the POSTGRES_* variables the spec gives it: the password is
// in no argv and never leaves the container.
func inServiceDB(tool string, args ...string) []string {
	return []string{"sh", "-c", fmt.Sprintf(`PGPASSWORD="$POSTGRES_PASSWORD" exec %s -h 127.0.0.1 -p %d -U "$POSTGRES_USER" -d "$POSTGRES_DB" %s`,
		tool, spec.DBPort, strings.Join(args, " "))}
}

// sealSnapshot hands what the deployment's roles owned in the copy db of src to the store's
// admin and drops their rights there (a deployment from it makes roles of its own, and the
// source's roles must stay droppable), then makes db a template no one connects to.
func (d *Deployer) sealSnapshot(ctx context.Context, st *stack, src, db string) error {
	conn, err := st.storeConn(ctx, db)
	if err != nil {
		return err
	}
	rows, err := conn.Query(ctx, `SELECT quote_ident(rolname) FROM pg_roles WHERE starts_with(rolname, $1)`, pgname.RolePrefix(src))
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
			WHERE d.datname = $1 AND starts_with(r.rolname, $2)`, src, pgname.RolePrefix(src))
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

// fromSnapshot prepares the deploy of an env whose service_db.from_snapshot names a snapshot,
// before anything is created, and otherwise only decides on the store (useStore). An image
// snapshot is run by the service DB component (snapImage), if this deploy is in container mode
// on the provider that built it; a store snapshot is the template of the deployment's database
// (snapTemplate), if this deploy uses that store. Every refusal names the field.
func (st *stack) fromSnapshot(ctx context.Context, mode string) error {
	if st.env.ServiceDB == nil || st.env.ServiceDB.FromSnapshot == "" {
		st.useStore(mode)
		return nil
	}
	const field = "service_db.from_snapshot"
	name := st.env.ServiceDB.FromSnapshot
	rec, err := st.d.mgr.Ledger().Get(ctx, SnapshotRecord(name))
	if err != nil && !errors.Is(err, agentenv.ErrNotFound) {
		return fmt.Errorf("%s: %w", field, err)
	}
	if err != nil || rec.State != agentenv.StateLive || rec.Role != RoleSnapshot {
		return st.env.FieldError(field, "no snapshot %q: make one with agentenv env snapshot DEPLOYMENT --name %s", name, name)
	}
	if of := rec.Labels[labelSnapshotEnv]; of != st.env.Name {
		return st.env.FieldError(field, "snapshot %q is of env %q, not of %q", name, of, st.env.Name)
	}
	if rec.Kind == agentenv.KindImage {
		switch {
		case rec.Provider != st.member:
			return st.env.FieldError(field, "snapshot %q is an image on provider %s, which only that provider runs; this deploy is on %s: deploy on %s, or snapshot a deployment with a state store",
				name, rec.Provider, st.member, rec.Provider)
		case mode != ModeContainer:
			return st.env.FieldError(field, "snapshot %q is an image, which deploys in container mode, not %s mode", name, mode)
		case rec.Attrs[agentenv.AttrImageRef] == "":
			return st.env.FieldError(field, "snapshot %q names no image (record %s has no %s)", name, rec.ID, agentenv.AttrImageRef)
		}
		st.snapImage = rec.Attrs[agentenv.AttrImageRef]
		return nil
	}
	st.useStore(mode)
	switch {
	case st.store == nil:
		return st.env.FieldError(field, "snapshot %q is in a state store, which this deploy does not use on %s in %s mode: set state.store (or --state-store) to a store its sandboxes reach",
			name, st.member, mode)
	case rec.Provider != st.opts.Store.Provider:
		return st.env.FieldError(field, "snapshot %q is on provider %s, not in this deploy's state store (%s)", name, rec.Provider, st.opts.Store.Provider)
	}
	st.snapTemplate = pgname.Database(rec.ID)
	return nil
}

// restoreSnapshot runs the dump of the image snapshot the service DB runs, if it runs one: psql
// (which pg_dump's COPY blocks need) inside the container, in one transaction, before the
// roles file hands what it made to the deployment's roles.
func (st *stack) restoreSnapshot(ctx context.Context) error {
	st.mu.Lock()
	img, rec := st.snapImage, st.serviceDB
	st.mu.Unlock()
	if img == "" {
		return nil
	}
	res, err := st.d.mgr.Exec(ctx, rec, inServiceDB("psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-1", "-f", SnapshotDump))
	if err == nil && res.ExitCode != 0 {
		err = fmt.Errorf("psql exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	if err != nil {
		return fmt.Errorf("restore snapshot %s: %w", img, err)
	}
	return nil
}

// SnapshotInfo describes one snapshot of env state for a listing.
type SnapshotInfo struct {
	Name     string    `json:"name"`
	Kind     string    `json:"kind"` // "image", or "store" for a template database of a state store
	Env      string    `json:"env"`
	Provider string    `json:"provider"`
	Ref      string    `json:"ref"` // the image reference, or the store's database
	Record   string    `json:"record"`
	Created  time.Time `json:"created"`
}

// Snapshots lists the live snapshots of env state, of both kinds, by name.
func (d *Deployer) Snapshots(ctx context.Context) ([]SnapshotInfo, error) {
	recs, err := d.mgr.Ledger().List(ctx, agentenv.Filter{States: []agentenv.State{agentenv.StateLive}})
	if err != nil {
		return nil, fmt.Errorf("snapshots: %w", err)
	}
	var out []SnapshotInfo
	for _, r := range recs {
		if r.Role != RoleSnapshot {
			continue
		}
		info := SnapshotInfo{Name: strings.TrimPrefix(r.ID, SnapshotRecord("")), Kind: "store", Env: r.Labels[labelSnapshotEnv],
			Provider: r.Provider, Ref: pgname.Database(r.ID), Record: r.ID, Created: r.Created}
		if r.Kind == agentenv.KindImage {
			info.Kind, info.Ref = "image", r.Attrs[agentenv.AttrImageRef]
		}
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b SnapshotInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

// RemoveSnapshot tears down snapshot name, of either kind, and returns the receipt.
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
