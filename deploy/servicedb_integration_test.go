//go:build integration

package deploy_test

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/moby/moby/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/envproto/envtest"
	"github.com/agentenv/agentenv/mcpclient"
	"github.com/agentenv/agentenv/spec"
)

// attack is one thing an agent holding db-mcp might try against the service DB.
type attack struct {
	name, sql string
}

// attacks are tried through db-mcp and, with its READ ONLY transaction out of the way, on a
// direct connection as db-mcp's role: each must be refused by the server itself.
func attacks(superuser string) []attack {
	return []attack{
		{"copy to program", "COPY (SELECT 1) TO PROGRAM 'id > /tmp/pwned'"},
		{"pg_read_file", "SELECT pg_read_file('/etc/passwd')"},
		{"lo_import", "SELECT lo_import('/etc/passwd')"},
		{"insert", "INSERT INTO notes.notes (title, body) VALUES ('forged', 'by db-mcp')"},
		{"set role postgres", "SET ROLE postgres"},
		{"set role superuser", "SET ROLE " + pgx.Identifier{superuser}.Sanitize()},
	}
}

// deployAndConnect deploys env on docker, connects an MCP client to its gateway, and tears it
// down when the test ends, checking the receipt.
func (r *rig) deployAndConnect(env *spec.Env) (*deploy.Result, *mcp.ClientSession) {
	r.t.Helper()
	id := r.name()
	res, err := r.d.Deploy(r.t.Context(), env, deploy.Options{Provider: "docker", Name: id})
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { assertReceiptClean(r.t, teardown(r.t, r, id), false) })
	return res, envtest.Connect(r.t, res.GatewayURL, res.Token)
}

// containerEnv returns the environment of the deployment's container for component name.
func (r *rig) containerEnv(res *deploy.Result, name string) map[string]string {
	r.t.Helper()
	id := r.record(res, name)
	in, err := r.dc.ContainerInspect(r.t.Context(), id, client.ContainerInspectOptions{})
	if err != nil {
		r.t.Fatalf("inspect %s: %v", id, err)
	}
	env := map[string]string{}
	for _, kv := range in.Container.Config.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

// record returns the record id of component name in res.
func (r *rig) record(res *deploy.Result, name string) string {
	r.t.Helper()
	for _, id := range res.Records {
		if i := strings.LastIndexByte(id, '-'); i > 0 && id[:i] == name {
			return id
		}
	}
	r.t.Fatalf("no record of %s in %v", name, res.Records)
	return ""
}

// hostURL points a component's DATABASE_URL, which names the service DB by its network alias,
// at the service DB's published port instead.
func hostURL(t *testing.T, res *deploy.Result, dsn string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatalf("parse DATABASE_URL: %v", err)
	}
	u.Host = res.Endpoints["servicedb"]
	return u.String()
}

func connect(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(t.Context(), dsn)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// readWrite turns off the read-only default a reader role logs in with, as anyone holding its
// password may: what the role may not do must then be refused by its privileges.
func readWrite(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	if _, err := conn.Exec(t.Context(), "SET default_transaction_read_only = off"); err != nil {
		t.Fatal(err)
	}
}

// assertRefused runs each statement on conn and fails unless the server refuses it for lack
// of privilege.
func assertRefused(t *testing.T, conn *pgx.Conn, who string, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		if _, err := conn.Exec(t.Context(), sql); refusedCode(err) != "42501" {
			t.Errorf("%s, %s: %v, want insufficient_privilege (42501)", who, sql, err)
		}
	}
}

// refusedCode returns the SQLSTATE of err, or "" if err is nil or not a server error.
func refusedCode(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func TestServiceDBLeastPrivilege(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	res, cs := r.deployAndConnect(r.notesEnv(false))
	envtest.Call(t, cs, "add_note", map[string]any{"title": "groceries", "body": "milk"})
	envtest.Call(t, cs, "add_note", map[string]any{"title": "talk", "body": "agentenv"})

	dbEnv := r.containerEnv(res, "servicedb")
	superuser, superPW := dbEnv["POSTGRES_USER"], dbEnv["POSTGRES_PASSWORD"]
	if superPW == "" || strings.Contains(res.Token, superPW) {
		t.Errorf("superuser password %q is empty or part of the gateway token", superPW)
	}
	for _, name := range []string{"notes", "db-mcp", "db-web", "gateway"} {
		for k, v := range r.containerEnv(res, name) {
			if strings.Contains(v, superPW) {
				t.Errorf("%s's %s carries the superuser password", name, k)
			}
		}
	}

	// Through db-mcp, as an agent would.
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "v1"}, nil)
	// db-mcp has no door of its own: it is a backend of the gateway, behind a role's token.
	if u, ok := res.Doc.URLs["db-mcp"]; ok {
		t.Errorf("db-mcp is published at %s, want it behind the gateway only", u)
	}
	dbs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{Endpoint: res.GatewayURL,
		HTTPClient: mcpclient.HTTPClient(nil, res.Tokens["default"])}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dbs.Close()
	for _, a := range attacks(superuser) {
		out, err := dbs.CallTool(t.Context(), &mcp.CallToolParams{Name: "query", Arguments: map[string]any{"sql": a.sql}})
		if err != nil {
			t.Fatalf("db-mcp %s: %v", a.name, err)
		}
		if !out.IsError {
			t.Errorf("db-mcp %s (%s): succeeded, want it refused", a.name, a.sql)
			continue
		}
		for _, c := range out.Content {
			if tc, ok := c.(*mcp.TextContent); ok {
				t.Logf("db-mcp %s: refused: %s", a.name, tc.Text)
			}
		}
	}
	if got := envtest.Call(t, dbs, "query", map[string]any{"sql": "SELECT title FROM notes.notes ORDER BY id"}); !strings.Contains(got, "groceries") {
		t.Errorf("db-mcp cannot read the notes: %s", got)
	}

	// The same statements on a direct connection as db-mcp's role, outside db-mcp's READ ONLY
	// transaction: the server refuses each, with no filter in the way.
	mcpConn := connect(t, hostURL(t, res, r.containerEnv(res, "db-mcp")["DATABASE_URL"]))
	readWrite(t, mcpConn)
	for _, a := range attacks(superuser) {
		_, err := mcpConn.Exec(t.Context(), a.sql)
		code := refusedCode(err)
		switch {
		case err == nil:
			t.Errorf("db-mcp's role, %s: succeeded, want it refused by the server", a.name)
		case a.name == "set role postgres" && code != "" && code != "42501":
			// No role postgres in this database (its superuser is the env's): refused all the same.
		case code != "42501":
			t.Errorf("db-mcp's role, %s: %v, want insufficient_privilege (42501)", a.name, err)
		}
		t.Logf("db-mcp's role, read-only default off, %s: %v", a.name, err)
	}
	var super bool
	if err := mcpConn.QueryRow(t.Context(), "SELECT rolsuper FROM pg_roles WHERE rolname = current_user").Scan(&super); err != nil || super {
		t.Errorf("db-mcp's role is a superuser: %v (%v)", super, err)
	}
	if out, err := r.mgr.Exec(t.Context(), r.record(res, "servicedb"), []string{"test", "-e", "/tmp/pwned"}); err != nil {
		t.Fatal(err)
	} else if out.ExitCode == 0 {
		t.Error("COPY TO PROGRAM ran a shell in the service DB container: /tmp/pwned exists")
	}

	// The notes are unchanged, as the read-only verifier role reads them.
	verifier := connect(t, res.DatabaseURL)
	readWrite(t, verifier)
	var titles string
	if err := verifier.QueryRow(t.Context(), "SELECT string_agg(title, ',' ORDER BY id) FROM notes.notes").Scan(&titles); err != nil || titles != "groceries,talk" {
		t.Errorf("notes after the attacks = %q (%v), want groceries,talk", titles, err)
	}
	assertRefused(t, verifier, "verifier role",
		"INSERT INTO notes.notes (title) VALUES ('forged')",
		"UPDATE notes.notes SET title = 'forged'",
		"CREATE TABLE public.forged (x int)",
		"DROP TABLE notes.notes",
		"SET ROLE "+pgx.Identifier{superuser}.Sanitize())

	// The notes server's own role owns its schema and nothing else.
	notesConn := connect(t, hostURL(t, res, r.containerEnv(res, "notes")["DATABASE_URL"]))
	if _, err := notesConn.Exec(t.Context(), "INSERT INTO notes.notes (title, body) VALUES ('mine', 'ok')"); err != nil {
		t.Errorf("notes role cannot write its own schema: %v", err)
	}
	assertRefused(t, notesConn, "notes role",
		"CREATE SCHEMA elsewhere",
		"CREATE TABLE public.elsewhere (x int)",
		"COPY (SELECT 1) TO PROGRAM 'id > /tmp/pwned'",
		"SET ROLE "+pgx.Identifier{superuser}.Sanitize())

	// Inside the DB container, a local login needs the password, on the socket and over TCP.
	for _, argv := range [][]string{
		{"psql", "-X", "-w", "-U", superuser, "-d", "agentenv", "-tAc", "SELECT 1"},
		{"psql", "-X", "-w", "-h", "127.0.0.1", "-U", superuser, "-d", "agentenv", "-tAc", "SELECT 1"},
	} {
		out, err := r.mgr.Exec(t.Context(), r.record(res, "servicedb"), argv)
		if err != nil {
			t.Fatal(err)
		}
		if out.ExitCode == 0 {
			t.Errorf("%s: logged in without a password", strings.Join(argv, " "))
		}
	}
}

func TestServerRolesCannotReadEachOthersSchemas(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	// Two notes servers, each on its own schema.
	var servers strings.Builder
	for _, name := range []string{"notes", "memo"} {
		fmt.Fprintf(&servers, "  - {name: %s, image: %s, command: [/agentenv, serve, notes, --listen, \":8080\"], port: 8080, database: true}\n", name, r.runtime)
	}
	env := r.parse("multi", fmt.Sprintf("name: multi\nservers:\n%sservice_db: {image: %s}\ngateway: {image: %s, tool_names: prefix}\n",
		servers.String(), postgresImage, r.runtime))
	res, cs := r.deployAndConnect(env)
	envtest.Call(t, cs, "notes__add_note", map[string]any{"title": "secret", "body": "notes only"})
	envtest.Call(t, cs, "memo__add_note", map[string]any{"title": "memo", "body": "memo only"})

	for _, pair := range [][2]string{{"notes", "memo"}, {"memo", "notes"}} {
		conn := connect(t, hostURL(t, res, r.containerEnv(res, pair[0])["DATABASE_URL"]))
		var n int
		if err := conn.QueryRow(t.Context(), "SELECT count(*) FROM "+pair[0]+".notes").Scan(&n); err != nil || n != 1 {
			t.Errorf("%s role reads its own notes: %d (%v), want 1", pair[0], n, err)
		}
		assertRefused(t, conn, pair[0]+" role",
			"SELECT count(*) FROM "+pair[1]+".notes",
			"INSERT INTO "+pair[1]+".notes (title, body) VALUES ('x', 'y')",
			"CREATE TABLE "+pair[1]+".planted (x int)")
	}
	// The verifier reads both.
	verifier := connect(t, res.DatabaseURL)
	var n int
	if err := verifier.QueryRow(t.Context(), "SELECT (SELECT count(*) FROM notes.notes) + (SELECT count(*) FROM memo.notes)").Scan(&n); err != nil || n != 2 {
		t.Errorf("verifier reads %d notes in both schemas (%v), want 2", n, err)
	}
}
