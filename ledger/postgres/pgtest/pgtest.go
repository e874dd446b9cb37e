// Package pgtest is a test kit: it gives integration tests a PostgreSQL ledger of their own on
// the test server (AGENTENV_TEST_POSTGRES_DSN; .ci/postgres.sh starts one). Only tests import it.
package pgtest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// Env names the variable holding the test server's DSN.
const Env = "AGENTENV_TEST_POSTGRES_DSN"

// Schema returns a DSN of the test server whose search_path is a new schema, named with
// prefix, dropped when tb ends. Without the server tb fails: integration tests never skip.
// Call it before what must be cleaned up while the schema still exists (its drop runs after).
func Schema(tb testing.TB, prefix string) string {
	tb.Helper()
	dsn := os.Getenv(Env)
	if dsn == "" {
		tb.Fatalf("integration tests need PostgreSQL: set %s (eval \"$(.ci/postgres.sh)\")", Env)
	}
	schema := fmt.Sprintf("%s_%x", prefix, rand.Uint64())
	exec := func(sql string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec("CREATE SCHEMA " + schema); err != nil {
		tb.Fatalf("create schema %s: %v", schema, err)
	}
	tb.Cleanup(func() {
		if err := exec("DROP SCHEMA IF EXISTS " + schema + " CASCADE"); err != nil {
			tb.Errorf("drop schema %s: %v", schema, err)
		}
	})
	u, err := url.Parse(dsn)
	if err != nil {
		tb.Fatalf("%s: %v", Env, err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}
