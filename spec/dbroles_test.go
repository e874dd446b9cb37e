package spec_test

import (
	"errors"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/spec"
)

// twoDBServers is an env with two database servers, db-mcp and a third server without a
// database.
const twoDBServers = `name: two
servers:
  - {name: notes, image: agentenv:dev, port: 8080, database: true}
  - {name: memo-pad, image: agentenv:dev, port: 8081, database: true}
  - {name: kv, image: agentenv:dev, port: 8082}
service_db:
  db_mcp: {enabled: true, port: 8083}
`

func parse(t *testing.T, y string) *spec.Env {
	t.Helper()
	env, err := spec.Parse("env.yaml", []byte(y))
	if err != nil {
		t.Fatal(err)
	}
	return env
}

// passwords are distinct and recognisable, so that a test can look for them in what
// Components renders.
func passwords(env *spec.Env) *spec.DBPasswords {
	pw := &spec.DBPasswords{Superuser: "SUPER-secret-0", Roles: map[string]string{}}
	for _, r := range env.DBRoles() {
		pw.Roles[r.Name] = "ROLE-secret-" + r.Name
	}
	return pw
}

func byName(comps []spec.Component) map[string]spec.Component {
	m := map[string]spec.Component{}
	for _, c := range comps {
		m[c.Name] = c
	}
	return m
}

// rolesSQL is the last init file of the service DB, the one that makes the roles.
func rolesSQL(t *testing.T, c spec.Component) string {
	t.Helper()
	f := c.Files[len(c.Files)-1]
	if f.Target != "/docker-entrypoint-initdb.d/90-agentenv-roles.sql" {
		t.Fatalf("last init file = %s, want the roles file", f.Target)
	}
	return string(f.Content)
}

func TestDBRoles(t *testing.T) {
	env := parse(t, twoDBServers)
	want := []spec.DBRole{
		{Name: "notes", Owns: "notes"},
		{Name: "memo_pad", Owns: "memo_pad"},
		{Name: spec.DBRoleDBMCP},
		{Name: spec.DBRoleVerifier},
	}
	if diff := cmp.Diff(want, env.DBRoles()); diff != "" {
		t.Errorf("DBRoles() (-want +got):\n%s", diff)
	}
	if roles := parse(t, "name: kv\nservers:\n  - {name: kv, image: x, port: 8080}\n").DBRoles(); roles != nil {
		t.Errorf("DBRoles() without a service DB = %v, want none", roles)
	}
}

// components renders env with pw and returns its components by name.
func components(t *testing.T, env *spec.Env, pw *spec.DBPasswords) map[string]spec.Component {
	t.Helper()
	comps, err := env.Components(spec.TopologyOptions{DB: pw})
	if err != nil {
		t.Fatal(err)
	}
	return byName(comps)
}

func TestComponents_eachServerItsOwnRole(t *testing.T) {
	env := parse(t, twoDBServers)
	m := components(t, env, passwords(env))
	want := map[string]string{
		"notes":    "postgres://notes:ROLE-secret-notes@servicedb:5432/agentenv?sslmode=disable&options=-csearch_path%3Dnotes",
		"memo-pad": "postgres://memo_pad:ROLE-secret-memo_pad@servicedb:5432/agentenv?sslmode=disable&options=-csearch_path%3Dmemo_pad",
		"db-mcp":   "postgres://db_mcp:ROLE-secret-db_mcp@servicedb:5432/agentenv?sslmode=disable",
	}
	for name, url := range want {
		if got := m[name].Env["DATABASE_URL"]; got != url {
			t.Errorf("%s DATABASE_URL = %q, want %q", name, got, url)
		}
	}
	if _, ok := m["kv"].Env["DATABASE_URL"]; ok {
		t.Error("kv, which has no database, got a DATABASE_URL")
	}
	for _, c := range m {
		for k, v := range c.Env {
			if c.Name != "servicedb" && strings.Contains(v, "SUPER-secret") {
				t.Errorf("%s's %s carries the superuser password", c.Name, k)
			}
		}
	}
	db := m["servicedb"].Env
	if db["POSTGRES_PASSWORD"] != "SUPER-secret-0" || db["POSTGRES_HOST_AUTH_METHOD"] != "scram-sha-256" ||
		!strings.HasPrefix(db["POSTGRES_INITDB_ARGS"], "--auth-local=scram-sha-256 --auth-host=scram-sha-256") {
		t.Errorf("servicedb env = %v, want the superuser password and password logins everywhere", db)
	}
}

func TestRolesSQL(t *testing.T) {
	env := parse(t, twoDBServers)
	sql := rolesSQL(t, components(t, env, passwords(env))["servicedb"])
	// No password is in the text, which the server may log: only SCRAM verifiers.
	if strings.Contains(sql, "secret") {
		t.Errorf("roles SQL holds a password in clear:\n%s", sql)
	}
	verifier := regexp.MustCompile(`PASSWORD 'SCRAM-SHA-256\$4096:[A-Za-z0-9+/=]{24}\$[A-Za-z0-9+/=]{44}:[A-Za-z0-9+/=]{44}'`)
	if n := len(verifier.FindAllString(sql, -1)); n != 4 {
		t.Errorf("roles SQL has %d SCRAM verifiers, want one per role (4):\n%s", n, sql)
	}
	for _, want := range []string{
		`REVOKE ALL ON DATABASE "agentenv" FROM PUBLIC;`,
		`REVOKE ALL ON SCHEMA public FROM PUBLIC;`,
		`CREATE ROLE "notes" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS PASSWORD 'SCRAM-SHA-256$`,
		`ALTER SCHEMA "notes" OWNER TO "notes";`,
		`ALTER SCHEMA "memo_pad" OWNER TO "memo_pad";`,
		`GRANT CONNECT, TEMPORARY ON DATABASE "agentenv" TO "memo_pad";`,
		`GRANT CONNECT ON DATABASE "agentenv" TO "db_mcp";`,
		`GRANT CONNECT ON DATABASE "agentenv" TO "verifier";`,
		`ALTER ROLE "verifier" SET default_transaction_read_only = on;`,
		`EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %I TO %s', s, '"db_mcp", "verifier"');`,
		`ALTER DEFAULT PRIVILEGES FOR ROLE "memo_pad" IN SCHEMA "memo_pad" GRANT SELECT ON TABLES TO "db_mcp", "verifier";`,
	} {
		if !strings.Contains(sql, want) {
			t.Errorf("roles SQL lacks %q:\n%s", want, sql)
		}
	}
	for _, bad := range []string{"SUPERUSER ", "GRANT pg_", "CREATE ON DATABASE", "GRANT ALL"} {
		if strings.Contains(strings.ReplaceAll(sql, "NOSUPERUSER", ""), bad) {
			t.Errorf("roles SQL grants %q:\n%s", bad, sql)
		}
	}
	// A reader owns nothing and reads through the loop only.
	if strings.Contains(sql, `OWNER TO "verifier"`) || strings.Contains(sql, `OWNER TO "db_mcp"`) {
		t.Errorf("a reader owns something:\n%s", sql)
	}

	// The verifier of a password is not the verifier of another: the passwords are what differ.
	other := passwords(env)
	other.Roles["notes"] = "ROLE-other"
	if rolesSQL(t, components(t, env, other)["servicedb"]) == sql {
		t.Error("a different password renders the same roles SQL")
	}
}

func TestComponents_derivedDBPasswords(t *testing.T) {
	env := parse(t, twoDBServers)
	m, m2 := components(t, env, nil), components(t, env, nil)
	seen := map[string]string{}
	for _, name := range []string{"notes", "memo-pad", "db-mcp"} {
		url := m[name].Env["DATABASE_URL"]
		if url != m2[name].Env["DATABASE_URL"] {
			t.Errorf("%s DATABASE_URL differs between renderings", name)
		}
		pw := url[strings.Index(url, ":")+3:]
		pw = pw[strings.Index(pw, ":")+1 : strings.Index(pw, "@")]
		if pw == env.ServiceDB.Password || len(pw) != 32 {
			t.Errorf("%s password %q: want 32 hex digits, not service_db.password", name, pw)
		}
		if prev, dup := seen[pw]; dup {
			t.Errorf("%s and %s have the same password", name, prev)
		}
		seen[pw] = name
	}
}

func TestComponents_roleNameClash(t *testing.T) {
	for _, tt := range []struct{ name, server, msg string }{
		{"the superuser's", "agentenv", `a database server's role and schema "agentenv" would be the superuser's (service_db.user): rename one`},
		{"the verifier's", "verifier", `a database server's role and schema "verifier" is reserved: rename the server`},
		{"db-mcp's", "db-mcp", ``}, // a reserved component name, refused by Load already
		{"PostgreSQL's", "pg-stat", `a database server's role and schema "pg_stat" is reserved: rename the server`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			env, err := spec.Parse("env.yaml", []byte("name: x\nservers:\n  - {name: "+tt.server+", image: i, port: 8080, database: true}\nservice_db: {}\n"))
			if tt.msg == "" {
				if err == nil {
					t.Errorf("Parse accepted a server named %s", tt.server)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			_, err = env.Components(spec.TopologyOptions{})
			var e *spec.Error
			if !errors.As(err, &e) || !errors.Is(err, agentenv.ErrInvalid) || e.Msg != tt.msg || e.Path != "servers[0].name" {
				t.Errorf("Components() = %v, want servers[0].name: %s", err, tt.msg)
			}
		})
	}
}

func TestComponents_missingRolePassword(t *testing.T) {
	env := parse(t, twoDBServers)
	pw := passwords(env)
	delete(pw.Roles, spec.DBRoleVerifier)
	if _, err := env.Components(spec.TopologyOptions{DB: pw}); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "verifier") {
		t.Errorf("Components() without the verifier's password = %v, want an error naming it", err)
	}
}
