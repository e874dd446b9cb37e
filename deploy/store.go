package deploy

import (
	"context"
	"fmt"
	"net"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/pgname"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/spec"
)

// Store is a state store: a PostgreSQL server on which each deployment's service DB is a
// database of its own instead of a container, copied from a template database that the env's
// init_sql and seed made once per env digest. Every database, templates included, is a record
// of the store's provider (provider/pgstore), so the lifecycle's rules hold for it.
type Store struct {
	// Provider is the manager's name of the store's provider.
	Provider string
	// DSN is the store's admin login from this host.
	DSN string
	// Networks lists the providers whose private networks the store's server joins in
	// container mode (the store container of `agentenv state up` joins docker's); their
	// components reach it as "servicedb".
	Networks []string
	// Reach is host:port where other sandboxes (VM mode, remote providers) reach the server;
	// "" when they cannot (a server on this host's loopback): those deploys fall back to a
	// service DB container, and say so in the progress output.
	Reach string
}

// RoleTemplate is the role of a template database in a state store.
const RoleTemplate agentenv.Role = "state_template"

// LabelEnvDigest labels a template database with the env digest its init files are of.
const LabelEnvDigest = "state.env-digest"

// TemplateTTL is how long a template database lives after it was made; gc drops it after, and
// the next deploy of its env makes another.
const TemplateTTL = 24 * time.Hour

// storePort is the port of the store's server on a private network it joins.
const storePort = 5432

// useStore decides whether this attempt takes its service DB from the store, and where its
// components reach it; a store they cannot reach is said in the progress output.
func (st *stack) useStore(mode string) {
	s := st.opts.Store
	if s == nil || st.env.ServiceDB == nil {
		return
	}
	c := spec.Component{Name: "servicedb", Role: agentenv.RoleServiceDB}
	hostport, attach := "", false
	switch {
	case mode == ModeContainer && slices.Contains(s.Networks, st.member):
		hostport, attach = net.JoinHostPort("servicedb", strconv.Itoa(storePort)), true
	case s.Reach != "":
		hostport = s.Reach
	default:
		st.emit(c, "store", fmt.Sprintf("the state store is not reachable from %s sandboxes in %s mode: a service DB container instead", st.member, mode))
		return
	}
	st.storeRec = lifecycle.NewID("servicedb")
	db := pgname.Database(st.storeRec)
	st.store = &spec.StoreDB{HostPort: hostport, Database: db, Role: func(name string) string { return pgname.Role(db, name) }}
	st.storeAttach = attach
}

// topology returns the options components are rendered with.
func (st *stack) topology(host func(string) string) spec.TopologyOptions {
	return spec.TopologyOptions{DB: &st.db, Pass: st.pass(), Host: host, Store: st.store, SnapshotImage: st.snapImage}
}

// upStore makes the deployment's database in the store from the env's template, and its login
// roles; container mode has made the private network the store joins.
func (st *stack) upStore(ctx context.Context) error {
	c := spec.Component{Name: "servicedb", Role: agentenv.RoleServiceDB}
	tpl := st.snapTemplate // service_db.from_snapshot's, else the env's own
	if tpl == "" {
		var err error
		if tpl, err = st.template(ctx); err != nil {
			st.emit(c, "failed", err.Error())
			return fmt.Errorf("servicedb: state store template: %w", err)
		}
	}
	sp := agentenv.SandboxSpec{Image: tpl}
	if st.storeAttach {
		sp.Network, sp.Aliases = st.network, []string{"servicedb"}
	}
	req := st.request(agentenv.KindSandbox, agentenv.RoleServiceDB, sp, "servicedb")
	req.Provider, req.ID = st.opts.Store.Provider, st.storeRec
	if _, _, err := st.d.mgr.Create(ctx, req); err != nil {
		st.emit(c, "failed", err.Error())
		return fmt.Errorf("servicedb: state store database: %w", err)
	}
	st.emit(c, "created", st.store.Database)
	rolesSQL := st.env.StoreRolesSQL(st.db, st.store.Database, st.store.Role)
	if err := st.storeExec(ctx, st.store.Database, string(rolesSQL)); err != nil {
		st.emit(c, "failed", err.Error())
		return fmt.Errorf("servicedb: state store roles: %w", err)
	}
	admin, err := pgx.ParseConfig(st.opts.Store.DSN)
	if err != nil {
		return fmt.Errorf("servicedb: state store DSN: %w", err)
	}
	here := net.JoinHostPort(admin.Host, strconv.Itoa(int(admin.Port)))
	local := spec.StoreDB{HostPort: here, Database: st.store.Database, Role: st.store.Role}
	st.mu.Lock()
	st.dbURL = local.URL(st.env.ServiceDB, spec.DBRoleVerifier, st.db.Roles[spec.DBRoleVerifier], "")
	st.mu.Unlock()
	st.emit(c, "ready", "state store database from "+tpl)
	return nil
}

// template returns the store's template database for the env's digest, making it (init files
// run once) if the ledger has none live. An advisory lock on the store serialises the deploys
// of one env, so it is made once.
func (st *stack) template(ctx context.Context) (string, error) {
	s := st.opts.Store
	digest := st.env.Digest()
	conn, err := st.storeConn(ctx, "")
	if err != nil {
		return "", err
	}
	defer cleanup.Do(ctx, closeTimeout, conn.Close) //nolint:errcheck // closing ends the session and its lock
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock(hashtext($1))", "agentenv/template/"+digest); err != nil {
		return "", fmt.Errorf("lock: %w", err)
	}
	recs, err := st.d.mgr.Ledger().List(ctx, agentenv.Filter{Provider: s.Provider, States: []agentenv.State{agentenv.StateLive}})
	if err != nil {
		return "", err
	}
	for _, r := range recs {
		if r.Role != RoleTemplate || r.Labels[LabelEnvDigest] != digest || time.Until(r.Expires) < time.Hour {
			continue
		}
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_database WHERE datname = $1 AND datistemplate)", pgname.Database(r.ID)).Scan(&ok); err != nil {
			return "", err
		}
		if ok {
			return pgname.Database(r.ID), nil
		}
	}
	c := spec.Component{Name: "servicedb", Role: agentenv.RoleServiceDB}
	st.emit(c, "template", "init_sql and seed run once for env digest "+digest)
	rec, sb, err := st.d.mgr.Create(ctx, lifecycle.CreateRequest{
		Provider: s.Provider, ID: lifecycle.NewID("tpl"), Role: RoleTemplate, TTL: TemplateTTL,
		Spec: agentenv.SandboxSpec{Image: pgname.DefaultTemplate, Labels: map[string]string{LabelEnvDigest: digest}},
	})
	if err != nil {
		return "", err
	}
	err = st.initTemplate(ctx, sb.ID)
	if err == nil {
		err = st.d.mgr.Release(ctx, rec.Expires, rec.ID)
	}
	if err != nil {
		if _, terr := st.d.mgr.Teardown(ctx, []agentenv.Record{rec}); terr != nil {
			st.d.log.Warn("tear down a template that failed", "record", rec.ID, "err", terr)
		}
		return "", err
	}
	return sb.ID, nil
}

// initTemplate runs the env's init files in database db, then makes it a template no one
// connects to.
func (st *stack) initTemplate(ctx context.Context, db string) error {
	conn, err := st.storeConn(ctx, db)
	if err != nil {
		return err
	}
	for _, f := range st.env.ServiceDBInit() {
		sql := f.Content
		if f.Source != "" {
			if sql, err = os.ReadFile(f.Source); err != nil {
				cleanup.Do(ctx, closeTimeout, conn.Close) //nolint:errcheck // the read said what matters
				return fmt.Errorf("init: %w", err)
			}
		}
		if _, err := conn.Exec(ctx, string(sql)); err != nil {
			cleanup.Do(ctx, closeTimeout, conn.Close) //nolint:errcheck // the init said what matters
			return fmt.Errorf("init %s: %w", f.Target, err)
		}
	}
	if err := cleanup.Do(ctx, closeTimeout, conn.Close); err != nil {
		return err
	}
	return st.storeExec(ctx, "", fmt.Sprintf(`ALTER DATABASE "%s" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false`, db))
}

// storeConn connects to database db of the store ("" for the admin DSN's own) as its admin.
func (st *stack) storeConn(ctx context.Context, db string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(st.opts.Store.DSN)
	if err != nil {
		return nil, fmt.Errorf("state store DSN: %w", err)
	}
	if db != "" {
		cfg.Database = db
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("state store: %w", err)
	}
	return conn, nil
}

// storeExec runs sql in database db of the store as its admin.
func (st *stack) storeExec(ctx context.Context, db, sql string) error {
	conn, err := st.storeConn(ctx, db)
	if err != nil {
		return err
	}
	defer cleanup.Do(ctx, closeTimeout, conn.Close) //nolint:errcheck // the statement said what matters
	_, err = conn.Exec(ctx, sql)
	return err
}
