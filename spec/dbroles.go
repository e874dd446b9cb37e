package spec

import (
	"crypto/hmac"
	"crypto/pbkdf2"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"net/url"
	"strings"
)

// The service DB's reader roles: db-mcp's and the verifiers'. Each may read every schema and
// write nothing. A server's role is named after its schema ([Server.Schema]).
const (
	DBRoleDBMCP    = "db_mcp"
	DBRoleVerifier = "verifier"
)

// rolesFile is the init file that makes the login roles; it runs after init_sql and seed.
const rolesFile = initDir + "/90-agentenv-roles.sql"

// scramIterations is the SCRAM-SHA-256 iteration count PostgreSQL uses by default.
const scramIterations = 4096

// DBRole is one login role of the service DB besides its superuser.
type DBRole struct {
	// Name is the role's name.
	Name string
	// Owns is the schema the role owns (a server's); "" for a reader.
	Owns string
}

// DBPasswords are one deployment's service DB passwords.
type DBPasswords struct {
	// Superuser is service_db.user's password. Only the service DB itself and the deployer's
	// init (which makes the roles) have it: no other component's environment carries it.
	Superuser string
	// Roles maps the name of each role of [Env.DBRoles] to its password.
	Roles map[string]string
}

// DBRoles returns the service DB's login roles besides the superuser: one per server with
// database: true, owning that server's schema, then db-mcp's (if enabled) and the verifiers'
// readers. It returns nil for an env without a service DB.
func (e *Env) DBRoles() []DBRole {
	if e.ServiceDB == nil {
		return nil
	}
	var out []DBRole
	for _, o := range e.schemaOwners() {
		out = append(out, DBRole{Name: o.schema, Owns: o.schema})
	}
	if e.ServiceDB.DBMCP.Enabled {
		out = append(out, DBRole{Name: DBRoleDBMCP})
	}
	return append(out, DBRole{Name: DBRoleVerifier})
}

// checkDBRoles reports a server whose role would take a name already in use: the superuser's,
// a reader's, or one PostgreSQL reserves.
func (c *checker) checkDBRoles(e *Env) {
	if e.ServiceDB == nil {
		return
	}
	for _, o := range e.schemaOwners() {
		switch name := o.schema; {
		case name == e.ServiceDB.User:
			c.errorf(o.path+".name", "a database %s's role and schema %q would be the superuser's (service_db.user): rename one", o.kind, name)
		case name == DBRoleDBMCP || name == DBRoleVerifier || name == "public" || strings.HasPrefix(name, "pg_"):
			c.errorf(o.path+".name", "a database %s's role and schema %q is reserved: rename the %s", o.kind, name, o.kind)
		}
	}
}

// schemaOwner is a server or website with database: true, which owns a schema of the service
// DB through a login role of the same name.
type schemaOwner struct {
	schema, kind, path string
}

// schemaOwners returns the servers with database: true, then the websites with it, in order.
func (e *Env) schemaOwners() []schemaOwner {
	var out []schemaOwner
	for i, s := range e.Servers {
		if s.Database {
			out = append(out, schemaOwner{s.Schema(), "server", fmt.Sprintf("servers[%d]", i)})
		}
	}
	for i, w := range e.Websites {
		if w.Database {
			out = append(out, schemaOwner{w.Schema(), "website", fmt.Sprintf("websites[%d]", i)})
		}
	}
	return out
}

// derivedDBPasswords are the passwords of a rendering without a deployer's: the superuser's
// is service_db.password, each role's an HMAC of its name under it. They are as secret as that
// password, which the rendered file holds anyway.
func (e *Env) derivedDBPasswords() DBPasswords {
	pw := DBPasswords{Superuser: e.ServiceDB.Password, Roles: map[string]string{}}
	for _, r := range e.DBRoles() {
		m := hmac.New(sha256.New, []byte(e.ServiceDB.Password))
		m.Write([]byte("agentenv/db-role/" + r.Name))
		pw.Roles[r.Name] = hex.EncodeToString(m.Sum(nil)[:16])
	}
	return pw
}

// URL is the DSN of db at hostport as user, with search_path set to schema if it is not "".
func (db *ServiceDB) URL(hostport, user, password, schema string) string {
	u := url.URL{
		Scheme:   "postgres",
		User:     url.UserPassword(user, password),
		Host:     hostport,
		Path:     "/" + db.Database,
		RawQuery: "sslmode=disable",
	}
	if schema != "" {
		u.RawQuery += "&options=" + url.QueryEscape("-csearch_path="+schema)
	}
	return u.String()
}

// rolesSQL makes the login roles, run by the superuser once the schemas, init_sql and seed
// exist. It takes every right from PUBLIC on the database and the public schema; gives each
// server's role its schema and what is in it (and nothing else: no CREATE on the database,
// no other schema); gives each reader USAGE and SELECT on every schema there is, now and, for
// the tables servers create later, by default privileges. No role is a superuser or a member
// of any role, so COPY TO PROGRAM, pg_read_file, lo_import and SET ROLE are the server's to
// refuse. Passwords are sent as SCRAM-SHA-256 verifiers, so the statement text (which the
// server may log on an error) holds none.
func (e *Env) rolesSQL(pw DBPasswords) []byte {
	return e.rolesSQLFor(pw, e.ServiceDB.Database, func(name string) string { return name })
}

// StoreRolesSQL makes the login roles of a deployment's database in a state store, the same
// rights as in a service DB container, on database, with each role's name mapped by name
// (the store's roles are shared by every database on it). It runs in database, as a role that
// may create roles, once the schemas, init_sql and seed exist there.
func (e *Env) StoreRolesSQL(pw DBPasswords, database string, name func(string) string) []byte {
	return e.rolesSQLFor(pw, database, name)
}

func (e *Env) rolesSQLFor(pw DBPasswords, dbName string, roleName func(string) string) []byte {
	roles := e.DBRoles()
	var b strings.Builder
	database := quoteIdent(dbName)
	fmt.Fprintf(&b, "REVOKE ALL ON DATABASE %s FROM PUBLIC;\nREVOKE ALL ON SCHEMA public FROM PUBLIC;\n", database)
	var readers []string
	for _, r := range roles {
		role := quoteIdent(roleName(r.Name))
		fmt.Fprintf(&b, "CREATE ROLE %s LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS PASSWORD %s;\n",
			role, quoteLiteral(scramVerifier(pw.Roles[r.Name], r.Name)))
		if r.Owns == "" {
			readers = append(readers, roleName(r.Name))
			fmt.Fprintf(&b, "GRANT CONNECT ON DATABASE %s TO %s;\n", database, role)
			fmt.Fprintf(&b, "ALTER ROLE %s SET default_transaction_read_only = on;\n", role)
			continue
		}
		schema := quoteIdent(r.Owns)
		fmt.Fprintf(&b, "GRANT CONNECT, TEMPORARY ON DATABASE %s TO %s;\n", database, role)
		fmt.Fprintf(&b, "ALTER SCHEMA %s OWNER TO %s;\n", schema, role)
		fmt.Fprintf(&b, ownSchemaSQL, quoteLiteral(r.Owns), quoteLiteral(roleName(r.Name)))
	}
	if len(readers) > 0 {
		quoted := make([]string, len(readers))
		for i, r := range readers {
			quoted[i] = quoteIdent(r)
		}
		list := strings.Join(quoted, ", ")
		fmt.Fprintf(&b, readAllSQL, quoteLiteral(list))
		for _, r := range roles {
			if r.Owns != "" {
				fmt.Fprintf(&b, "ALTER DEFAULT PRIVILEGES FOR ROLE %s IN SCHEMA %s GRANT SELECT ON TABLES TO %s;\n",
					quoteIdent(roleName(r.Name)), quoteIdent(r.Owns), list)
			}
		}
	}
	return []byte(b.String())
}

// ownSchemaSQL hands the objects init_sql and seed made in a schema (%[1]s, a literal) to its
// role (%[2]s, a literal): tables, views, sequences of their own and routines. Sequences that
// belong to a column follow their table.
const ownSchemaSQL = `DO $agentenv$
DECLARE o record;
BEGIN
  FOR o IN SELECT c.oid::regclass AS name, c.relkind FROM pg_class c
      WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = %[1]s)
        AND c.relkind IN ('r', 'p', 'v', 'm', 'f', 'S')
        AND NOT EXISTS (SELECT FROM pg_depend d WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid
                        AND d.refclassid = 'pg_class'::regclass AND d.deptype IN ('a', 'i'))
  LOOP
    EXECUTE format('ALTER %%s %%s OWNER TO %%I',
      CASE o.relkind WHEN 'S' THEN 'SEQUENCE' WHEN 'v' THEN 'VIEW' WHEN 'm' THEN 'MATERIALIZED VIEW'
                     WHEN 'f' THEN 'FOREIGN TABLE' ELSE 'TABLE' END, o.name, %[2]s);
  END LOOP;
  FOR o IN SELECT p.oid::regprocedure AS name FROM pg_proc p
      WHERE p.pronamespace = (SELECT oid FROM pg_namespace WHERE nspname = %[1]s) AND p.prokind IN ('f', 'p')
  LOOP
    EXECUTE format('ALTER ROUTINE %%s OWNER TO %%I', o.name, %[2]s);
  END LOOP;
END $agentenv$;
`

// readAllSQL gives the readers (%s, a literal of their quoted, comma-separated names) USAGE on
// every schema but PostgreSQL's own and SELECT on every table in them.
const readAllSQL = `DO $agentenv$
DECLARE s name;
BEGIN
  FOR s IN SELECT nspname FROM pg_namespace WHERE nspname <> 'information_schema' AND nspname NOT LIKE 'pg\_%%'
  LOOP
    EXECUTE format('GRANT USAGE ON SCHEMA %%I TO %%s', s, %[1]s);
    EXECUTE format('GRANT SELECT ON ALL TABLES IN SCHEMA %%I TO %%s', s, %[1]s);
  END LOOP;
END $agentenv$;
`

// scramVerifier is the SCRAM-SHA-256 verifier of password as PostgreSQL stores it (RFC 7677;
// the password is ASCII, so SASLprep leaves it as it is). The salt is drawn from the role's
// name: the password is random per deployment, so a salt needs to be unique, not secret, and
// a fixed one keeps a rendered file deterministic.
func scramVerifier(password, role string) string {
	salt := sha256.Sum256([]byte("agentenv/scram-salt/" + role))
	salted, err := pbkdf2.Key(sha256.New, password, salt[:16], scramIterations, sha256.Size)
	if err != nil {
		panic(fmt.Sprintf("pbkdf2: %v", err)) // only for a key length FIPS mode refuses; 32 is fine
	}
	mac := func(key []byte, msg string) []byte {
		m := hmac.New(sha256.New, key)
		m.Write([]byte(msg))
		return m.Sum(nil)
	}
	stored := sha256.Sum256(mac(salted, "Client Key"))
	server := mac(salted, "Server Key")
	enc := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("SCRAM-SHA-256$%d:%s$%s:%s", scramIterations, enc(salt[:16]), enc(stored[:]), enc(server))
}

// quoteIdent quotes an SQL identifier.
func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// quoteLiteral quotes an SQL string literal (standard_conforming_strings is on by default).
func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
