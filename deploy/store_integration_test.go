//go:build integration

package deploy_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/envproto/envtest"
	"github.com/agentenv/agentenv/internal/fault"
	"github.com/agentenv/agentenv/internal/pgname"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/docker"
	"github.com/agentenv/agentenv/provider/pgstore"
	"github.com/agentenv/agentenv/spec"
)

// storeRig is a rig with a state store: a real PostgreSQL container on the engine (as `agentenv
// state up` starts one), recorded under the rig's manager, and the store's provider over it.
type storeRig struct {
	*rig
	store     *deploy.Store
	dsn       string
	container string // the store's container
}

func newStoreRig(t *testing.T, wrap func(*docker.Provider) agentenv.Provider) *storeRig {
	t.Helper()
	r := newRig(t, wrap)
	// The store container, on a manager of the plain docker provider (no faults), labelled
	// with a deployment id of its own so that the leftover check covers it.
	base, err := lifecycle.New(lifecycle.Config{Ledger: r.mgr.Ledger(), Providers: map[string]agentenv.Provider{"docker": r.docker}})
	if err != nil {
		t.Fatal(err)
	}
	owner := r.name()
	b := make([]byte, 12)
	rand.Read(b)
	password := hex.EncodeToString(b)
	rec, sb, err := base.Create(t.Context(), lifecycle.CreateRequest{
		Provider: "docker", ID: lifecycle.NewID("store"), Role: agentenv.RoleStateStore, Deployment: owner,
		Spec: agentenv.SandboxSpec{Image: postgresImage, Ports: []int{5432}, Env: map[string]string{
			"POSTGRES_USER": "agentenv", "POSTGRES_PASSWORD": password, "POSTGRES_DB": "agentenv",
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := base.Teardown(ctx, []agentenv.Record{rec}); err != nil {
			t.Errorf("tear down the store: %v", err)
		}
		base.Close()
	})
	u := url.URL{Scheme: "postgres", User: url.UserPassword("agentenv", password), Host: sb.Endpoints["5432"], Path: "/agentenv", RawQuery: "sslmode=disable"}
	dsn := u.String()
	waitDB(t, dsn)
	var port uint16
	fmt.Sscanf(sb.Endpoints["5432"][strings.LastIndexByte(sb.Endpoints["5432"], ':')+1:], "%d", &port)
	att, err := pgstore.NewDockerAttacher("", port)
	if err != nil {
		t.Fatal(err)
	}
	sp, err := pgstore.New(pgstore.Config{DSN: dsn, Attach: att}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sp.Close)
	var dp agentenv.Provider = r.docker
	if wrap != nil {
		dp = wrap(r.docker)
	}
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: r.mgr.Ledger(), Providers: map[string]agentenv.Provider{"docker": dp, "state": sp}, ReclaimWait: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(mgr.Close)
	r.mgr, r.d = mgr, deploy.New(mgr, nil)
	return &storeRig{rig: r, dsn: dsn, container: sb.ID, store: &deploy.Store{Provider: "state", DSN: dsn, Networks: []string{"docker"}}}
}

// networks returns the networks the store's container is on.
func (s *storeRig) networks(t *testing.T) []string {
	t.Helper()
	res, err := s.dc.ContainerInspect(t.Context(), s.container, client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return slices.Sorted(maps.Keys(res.Container.NetworkSettings.Networks))
}

func waitDB(t *testing.T, dsn string) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		ctx, cancel := context.WithTimeout(t.Context(), 3*time.Second)
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			err = conn.Ping(ctx)
			conn.Close(ctx)
		}
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("store not ready within a minute: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// databases returns the store's databases whose names start with prefix.
func (s *storeRig) databases(t *testing.T, prefix string) []string {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	rows, _ := conn.Query(t.Context(), "SELECT datname FROM pg_database WHERE starts_with(datname, $1) ORDER BY 1", prefix)
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func (s *storeRig) exec(t *testing.T, sql string) {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(t.Context(), sql); err != nil {
		t.Fatal(err)
	}
}

// TestStoreDeployThenTeardown deploys notes twice with a store: each deployment's service DB
// is a database of the store (no service DB container), made from one template, reached by
// the server and db-mcp through the gateway; teardown drops each (gone from pg_database, its
// roles too), and the store's own database is untouched throughout.
func TestStoreDeployThenTeardown(t *testing.T) {
	t.Parallel()
	s := newStoreRig(t, nil)
	s.exec(t, `CREATE DATABASE "users-own"`)
	env := s.notesEnv(false)
	var ids []string
	var dbs []string
	for i := range 2 {
		id := s.name()
		res, err := s.d.Deploy(t.Context(), env, deploy.Options{Provider: "docker", Name: id, Store: s.store})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, id)
		recs, _ := s.mgr.Ledger().List(t.Context(), agentenv.Filter{Deployment: id})
		for _, rec := range recs {
			if rec.Role == agentenv.RoleServiceDB && rec.Provider != "state" {
				t.Errorf("service DB record %s on %s, want a database of the store", rec.ID, rec.Provider)
			}
			if rec.Role == agentenv.RoleServiceDB {
				dbs = append(dbs, pgname.Database(rec.ID))
			}
		}
		cs := envtest.Connect(t, res.GatewayURL, res.Token)
		envtest.Call(t, cs, "add_note", map[string]any{"title": fmt.Sprintf("note %d", i), "body": "in the store"})
		if got := envtest.Call(t, cs, "query", map[string]any{"sql": "SELECT count(*) AS n FROM notes.notes"}); !strings.Contains(got, "1") {
			t.Errorf("db-mcp count = %s, want 1: each deployment's database is its own", got)
		}
		cs.Close()
		conn, err := pgx.Connect(t.Context(), res.DatabaseURL)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(t.Context(), "DELETE FROM notes.notes"); err == nil {
			t.Error("the verifier's role deleted rows, want read-only")
		}
		conn.Close(context.Background())
	}
	if len(dbs) != 2 {
		t.Fatalf("service DB databases %v, want one per deployment", dbs)
	}
	if tpl := s.databases(t, pgname.DatabasePrefix+"tpl-"); len(tpl) != 1 {
		t.Errorf("templates %v, want one for the env digest", tpl)
	}
	for _, id := range ids {
		assertReceiptClean(t, teardown(t, s.rig, id), false)
		if left := s.leftovers(id); len(left) != 0 {
			t.Errorf("left after teardown: %v", left)
		}
	}

	left := s.databases(t, pgname.DatabasePrefix+"servicedb-")
	if len(left) != 0 {
		t.Errorf("databases after teardown: %v, want none", left)
	}
	if own := s.databases(t, "users-own"); len(own) != 1 {
		t.Errorf("the store's own database: %v, want it untouched", own)
	}
	conn, err := pgx.Connect(t.Context(), s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	var roles int
	for _, db := range dbs {
		var n int
		conn.QueryRow(t.Context(), "SELECT count(*) FROM pg_roles WHERE rolname = $1", pgname.Role(db, "notes")).Scan(&n)
		roles += n
	}
	if roles != 0 {
		t.Errorf("%d login roles of dropped databases left", roles)
	}
}

// TestStoreLeavesTheNetworkWithItsDatabase: the store's container joins a deployment's private
// network with the database made for it, and leaves it when that database is dropped, while
// the network still exists, rather than being pulled off by the network's removal: endpoint
// changes of one container under way at once make Docker 20.10 leave stale endpoints that no
// one can remove.
func TestStoreLeavesTheNetworkWithItsDatabase(t *testing.T) {
	t.Parallel()
	s := newStoreRig(t, nil)
	id := s.name()
	netRec, net, err := s.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "docker", Kind: agentenv.KindNetwork, ID: lifecycle.NewID("net"), Deployment: id, Role: agentenv.RoleNetwork})
	if err != nil {
		t.Fatal(err)
	}
	on := func() bool {
		return slices.Contains(s.networks(t), net.ID) || slices.Contains(s.networks(t), netRec.ID)
	}
	dbRec, _, err := s.mgr.Create(t.Context(), lifecycle.CreateRequest{Provider: "state", Deployment: id, Role: agentenv.RoleServiceDB,
		Spec: agentenv.SandboxSpec{Network: net.ID, Aliases: []string{"servicedb"}}})
	if err != nil {
		t.Fatal(err)
	}
	if !on() {
		t.Fatalf("the store's container is on %v, want network %s too", s.networks(t), net.ID)
	}
	assertReceiptClean(t, mustTeardown(t, s.mgr, dbRec), false)
	if on() {
		t.Errorf("after its database was dropped, the store's container is still on network %s", net.ID)
	}
	assertReceiptClean(t, mustTeardown(t, s.mgr, netRec), false)
	if left := s.leftovers(id); len(left) != 0 {
		t.Errorf("left: %v", left)
	}
}

func mustTeardown(t *testing.T, mgr *lifecycle.Manager, recs ...agentenv.Record) agentenv.Receipt {
	t.Helper()
	rc, err := mgr.Teardown(context.Background(), recs)
	if err != nil {
		t.Fatalf("teardown: %v (%+v)", err, rc)
	}
	return rc
}

// TestStoreChainFirstMemberFailsKeepsOnlyTheWinnersDatabase fails the first chain member after
// its database exists: that database is dropped before the next member, whose own is the only
// one left.
func TestStoreChainFirstMemberFailsKeepsOnlyTheWinnersDatabase(t *testing.T) {
	t.Parallel()
	s := newStoreRig(t, func(p *docker.Provider) agentenv.Provider {
		// The first attempt's second container fails to create, after its database is made.
		return fault.WrapProvider(p, fault.NewPlan(fault.Rule{Op: "create", Call: 2, Action: fault.Error}))
	})
	id := s.name()
	res, err := s.d.Deploy(t.Context(), s.notesEnv(false), deploy.Options{Provider: "docker,docker", Name: id, Store: s.store})
	if err != nil {
		t.Fatal(err)
	}
	recs, _ := s.mgr.Ledger().List(t.Context(), agentenv.Filter{Deployment: id})
	var live, gone []string
	for _, rec := range recs {
		if rec.Role != agentenv.RoleServiceDB {
			continue
		}
		switch rec.State {
		case agentenv.StateLive:
			live = append(live, pgname.Database(rec.ID))
		case agentenv.StateGone:
			gone = append(gone, pgname.Database(rec.ID))
		default:
			t.Errorf("database record %s is %s", rec.ID, rec.State)
		}
	}
	if len(live) != 1 || len(gone) != 1 {
		t.Fatalf("database records: live %v, gone %v; want the winner's live and the failed member's gone", live, gone)
	}
	if got := s.databases(t, pgname.DatabasePrefix+"servicedb-"); len(got) != 1 || got[0] != live[0] {
		t.Errorf("databases on the store %v, want only the winner's %s", got, live[0])
	}
	assertReceiptClean(t, teardown(t, s.rig, res.Doc.ID), false)
	if got := s.databases(t, pgname.DatabasePrefix+"servicedb-"); len(got) != 0 {
		t.Errorf("databases after teardown %v, want none", got)
	}
}

// TestSnapshotDeployedTwiceExportsTheSame seeds a deployment through its server, snapshots its
// database, and deploys the snapshot twice: both servers export the same data (data/get), the
// seeded notes; a name the store lacks fails at the field, and rm-snapshot drops it.
func TestSnapshotDeployedTwiceExportsTheSame(t *testing.T) {
	t.Parallel()
	s := newStoreRig(t, nil)
	snap, snapEnv := snapshotDeployedTwice(t, s.rig, s.store)
	if snap.Kind != agentenv.KindSandbox || snap.Provider != "state" {
		t.Errorf("snapshot record %+v, want a database of the store", snap)
	}
	name := snapEnv.ServiceDB.FromSnapshot
	y := strings.Replace(notesYAML(s.rig), "service_db:\n", "service_db:\n  from_snapshot: "+name+"\n", 1)
	missing := s.parse("notes", strings.Replace(y, name, "no-such-snapshot", 1))
	if _, err := s.d.Deploy(t.Context(), missing, deploy.Options{Provider: "docker", Name: s.name(), Store: s.store}); err == nil ||
		!strings.Contains(err.Error(), "notes.yaml:") || !strings.Contains(err.Error(), "service_db.from_snapshot") {
		t.Errorf("deploy of an unknown snapshot = %v, want an error at notes.yaml:LINE: service_db.from_snapshot", err)
	}
	if _, err := s.d.Deploy(t.Context(), snapEnv, deploy.Options{Provider: "docker", Name: s.name()}); err == nil || !strings.Contains(err.Error(), "service_db.from_snapshot") {
		t.Errorf("deploy of a snapshot without a store = %v, want an error at service_db.from_snapshot", err)
	}
	rc, err := s.d.RemoveSnapshot(t.Context(), name)
	if err != nil {
		t.Fatal(err)
	}
	assertReceiptClean(t, rc, false)
	if got := s.databases(t, pgname.DatabasePrefix+"snap-"); len(got) != 0 {
		t.Errorf("snapshots after rm-snapshot: %v", got)
	}
	if got := s.databases(t, pgname.DatabasePrefix+"servicedb-"); len(got) != 0 {
		t.Errorf("databases after the teardowns: %v", got)
	}
}

// snapshotDeployedTwice deploys notes (its service DB a database of store, or a container
// without one), adds two notes through its server, snapshots it under a fresh name, adds a note
// the snapshot must not hold, and tears the source down; then it deploys the snapshot twice
// and checks that both deployments export the same data (data/get), the two seeded notes. It
// returns the snapshot's record and the env deployed from it; the caller removes the snapshot.
func snapshotDeployedTwice(t *testing.T, r *rig, store *deploy.Store) (agentenv.Record, *spec.Env) {
	t.Helper()
	env := r.parse("notes", notesYAML(r))
	src := r.name()
	res, err := r.d.Deploy(t.Context(), env, deploy.Options{Provider: "docker", Name: src, Store: store})
	if err != nil {
		t.Fatal(err)
	}
	cs := envtest.Connect(t, res.GatewayURL, res.Token)
	envtest.Call(t, cs, "add_note", map[string]any{"title": "seeded", "body": "paid once", "tags": []string{"load"}})
	envtest.Call(t, cs, "add_note", map[string]any{"title": "second", "body": "also seeded"})
	cs.Close()
	name := "seeded-" + strings.TrimPrefix(r.name(), "dep-")
	snap, err := r.d.Snapshot(t.Context(), src, name, store)
	if err != nil {
		t.Fatal(err)
	}
	// The source keeps working after the snapshot.
	cs = envtest.Connect(t, res.GatewayURL, res.Token)
	envtest.Call(t, cs, "add_note", map[string]any{"title": "after", "body": "not in the snapshot"})
	cs.Close()
	assertReceiptClean(t, teardown(t, r, src), false)

	snapEnv := r.parse("notes", strings.Replace(notesYAML(r), "service_db:\n", "service_db:\n  from_snapshot: "+name+"\n", 1))
	var exports []string
	for range 2 {
		id := r.name()
		res, err := r.d.Deploy(t.Context(), snapEnv, deploy.Options{Provider: "docker", Name: id, Store: store})
		if err != nil {
			t.Fatal(err)
		}
		// notes has no port of its own: its data plane is the gateway's, with the admin token.
		exports = append(exports, string(envtest.DataVia(t, strings.TrimSuffix(res.GatewayURL, envproto.MCPPath), res.Token, "data/get", nil)))
		assertReceiptClean(t, teardown(t, r, id), false)
	}
	if exports[0] != exports[1] {
		t.Errorf("data/get of two deployments of one snapshot differ:\n%s\n%s", exports[0], exports[1])
	}
	if !strings.Contains(exports[0], "paid once") || !strings.Contains(exports[0], "also seeded") || strings.Contains(exports[0], "not in the snapshot") {
		t.Errorf("data/get = %s, want the two seeded notes only", exports[0])
	}
	return snap, snapEnv
}

// notesYAML is the notes env of notesEnv without the web UI, as a file.
func notesYAML(r *rig) string {
	return fmt.Sprintf(`name: notes
servers:
  - name: notes
    image: %[1]s
    command: [/agentenv, serve, notes, --listen, ":8080"]
    port: 8080
    database: true
service_db:
  image: %[2]s
  db_mcp:
    enabled: true
    image: %[1]s
gateway:
  image: %[1]s
`, r.runtime, postgresImage)
}
