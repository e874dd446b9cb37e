package spec

import (
	"errors"
	"strings"
	"testing"
)

const storeEnv = `name: notes
servers:
  - name: notes
    image: agentenv:dev
    port: 8080
    database: true
service_db:
  from_snapshot: %s
  db_mcp:
    enabled: true
`

func TestFromSnapshotName(t *testing.T) {
	if _, err := Parse("env.yaml", []byte(strings.Replace(storeEnv, "%s", "seeded-1", 1))); err != nil {
		t.Fatal(err)
	}
	_, err := Parse("env.yaml", []byte(strings.Replace(storeEnv, "%s", "Bad_Name", 1)))
	var e *Error
	if !errors.As(err, &e) || e.Line != 8 || e.Path != "service_db.from_snapshot" {
		t.Fatalf("Parse with a bad snapshot name = %v, want env.yaml:8 service_db.from_snapshot", err)
	}
	env, _ := Parse("env.yaml", []byte(strings.Replace(storeEnv, "%s", "seeded-1", 1)))
	err = env.FieldError("service_db.from_snapshot", "no snapshot %q", "seeded-1")
	if !errors.As(err, &e) || e.Line != 8 || !strings.Contains(err.Error(), "env.yaml:8") {
		t.Errorf("FieldError = %v, want it at env.yaml:8", err)
	}
}

// TestComponentsOnAStore checks that a store stands in for the service DB component: none is
// rendered, nothing waits for one, and each URL names the store's database and the
// deployment's own role names.
func TestComponentsOnAStore(t *testing.T) {
	env, err := Parse("env.yaml", []byte(strings.Replace(storeEnv, "%s", "seeded-1", 1)))
	if err != nil {
		t.Fatal(err)
	}
	store := &StoreDB{HostPort: "servicedb:5432", Database: "agentenv-servicedb-1", Role: func(n string) string { return "ae1_" + n }}
	comps, err := env.Components(TopologyOptions{Store: store})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range comps {
		if c.Name == nameServiceDB {
			t.Errorf("a servicedb component with a store")
		}
		for _, a := range c.After {
			if a == nameServiceDB {
				t.Errorf("%s waits for a servicedb component", c.Name)
			}
		}
		if u := c.Env[envDatabaseURL]; u != "" && (!strings.Contains(u, "@servicedb:5432/agentenv-servicedb-1") || !strings.Contains(u, "//ae1_")) {
			t.Errorf("%s DATABASE_URL = %s, want the store's database as the deployment's role", c.Name, u)
		}
	}
	sql := string(env.StoreRolesSQL(env.derivedDBPasswords(), store.Database, store.Role))
	for _, want := range []string{`CREATE ROLE "ae1_notes"`, `CREATE ROLE "ae1_verifier"`, `REVOKE ALL ON DATABASE "agentenv-servicedb-1" FROM PUBLIC`} {
		if !strings.Contains(sql, want) {
			t.Errorf("roles SQL lacks %s:\n%s", want, sql)
		}
	}
	if strings.Contains(sql, `ROLE "notes"`) {
		t.Errorf("roles SQL names a role without the deployment's prefix:\n%s", sql)
	}
}
