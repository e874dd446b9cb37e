//go:build integration

package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/ledgertest"
	"github.com/agentenv/agentenv/ledger/postgres"
	"github.com/jackc/pgx/v5"
)

// envDSN names the variable that holds the DSN of the test server.
const envDSN = "AGENTENV_TEST_POSTGRES_DSN"

// serverDSN returns the DSN of the test server, or fails t: the integration tag is the opt-in.
func serverDSN(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv(envDSN)
	if dsn == "" {
		t.Fatalf("%s is not set: integration tests need PostgreSQL; run eval \"$(.ci/postgres.sh)\" as root to start one and set it", envDSN)
	}
	return dsn
}

// freshDatabase creates a database of its own for this test run on the server at dsn, drops it
// when t ends, and returns its DSN.
func freshDatabase(t *testing.T, dsn string) string {
	t.Helper()
	name := "agentenv_test_" + randomHex(t)
	admin(t, dsn, "CREATE DATABASE "+name)
	t.Cleanup(func() { admin(t, dsn, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)") })
	u := parseURL(t, dsn)
	u.Path = "/" + name
	return u.String()
}

// freshSchema creates a schema in the database at dsn and returns a DSN whose search_path
// puts the ledger's tables there.
func freshSchema(t *testing.T, dsn string) string {
	t.Helper()
	name := "ledger_" + randomHex(t)
	admin(t, dsn, "CREATE SCHEMA "+name)
	t.Cleanup(func() { admin(t, dsn, "DROP SCHEMA IF EXISTS "+name+" CASCADE") })
	u := parseURL(t, dsn)
	q := u.Query()
	q.Set("search_path", name)
	u.RawQuery = q.Encode()
	return u.String()
}

// admin runs one statement on its own connection, bounded, even after t's context ended.
func admin(t *testing.T, dsn, sql string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(t.Context()), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", postgres.Redact(dsn), err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func parseURL(t *testing.T, dsn string) *url.URL {
	t.Helper()
	u, err := url.Parse(dsn)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		t.Fatalf("%s: want a postgres:// URL (%v)", envDSN, err)
	}
	return u
}

func randomHex(t *testing.T) string {
	b := make([]byte, 6)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// open opens a ledger at dsn or fails t, and closes it when t ends.
func open(t *testing.T, dsn string) *postgres.Ledger {
	t.Helper()
	l, err := postgres.Open(t.Context(), dsn, nil)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func TestLedger(t *testing.T) {
	db := freshDatabase(t, serverDSN(t))
	ledgertest.Run(t, func(t *testing.T) agentenv.Ledger { return open(t, freshSchema(t, db)) })
}

// TestOpenConcurrently opens one new schema from many pools at once: the advisory lock must
// let exactly one create the tables while the others wait.
func TestOpenConcurrently(t *testing.T) {
	dsn := freshSchema(t, freshDatabase(t, serverDSN(t)))
	const n = 6
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() {
			l, err := postgres.Open(t.Context(), dsn, nil)
			if err == nil {
				err = l.Put(t.Context(), agentenv.Record{ID: "r" + strconv.Itoa(i), State: agentenv.StateLive})
				l.Close()
			}
			errs[i] = err
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("Open #%d at once = %v", i, err)
		}
	}
	if rs, err := open(t, dsn).List(t.Context(), agentenv.Filter{}); err != nil || len(rs) != n {
		t.Errorf("List() = %d records, %v; want %d", len(rs), err, n)
	}
}

// TestTwoLedgers updates one record through two ledgers (two pools, as two processes would
// have) at once: no update may be lost.
func TestTwoLedgers(t *testing.T) {
	dsn := freshSchema(t, freshDatabase(t, serverDSN(t)))
	a, b := open(t, dsn), open(t, dsn)
	if err := a.Put(t.Context(), agentenv.Record{ID: "shared", State: agentenv.StateLive}); err != nil {
		t.Fatal(err)
	}
	const each = 100
	var wg sync.WaitGroup
	for _, l := range []*postgres.Ledger{a, b, a, b} {
		wg.Go(func() {
			for range each {
				_, err := l.Update(t.Context(), "shared", func(r *agentenv.Record) error {
					n, _ := strconv.Atoi(r.Attrs["n"])
					r.Attrs = map[string]string{"n": strconv.Itoa(n + 1)}
					return nil
				})
				if err != nil {
					t.Errorf("Update(shared) = %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if r, err := b.Get(t.Context(), "shared"); err != nil || r.Attrs["n"] != strconv.Itoa(4*each) {
		t.Errorf("counter = %q, %v after 4 x %d increments through two ledgers, want %d", r.Attrs["n"], err, each, 4*each)
	}
}

func TestOpenErrors(t *testing.T) {
	dsn := serverDSN(t)
	u := parseURL(t, dsn)
	u.User = url.UserPassword(u.User.Username(), "wrong-s3cret")
	if _, err := postgres.Open(t.Context(), u.String(), nil); err == nil {
		t.Errorf("Open with a wrong password = nil error, want one")
	} else if strings.Contains(err.Error(), "wrong-s3cret") || !strings.Contains(err.Error(), u.Host) {
		t.Errorf("Open with a wrong password = %q, want an error naming %s without the password", err, u.Host)
	}
	if _, err := postgres.Open(t.Context(), "postgres://u:s3cret@host:notaport/db", nil); !errors.Is(err, agentenv.ErrInvalid) || strings.Contains(err.Error(), "s3cret") {
		t.Errorf("Open with a bad port = %v, want ErrInvalid without the password", err)
	}

	newer := freshSchema(t, freshDatabase(t, dsn))
	open(t, newer).Close()
	u = parseURL(t, newer)
	admin(t, newer, "INSERT INTO "+u.Query().Get("search_path")+".agentenv_schema_migrations (version) VALUES (9999)")
	if _, err := postgres.Open(t.Context(), newer, nil); err == nil || !strings.Contains(err.Error(), "newer than this agentenv") {
		t.Errorf("Open of a newer schema = %v, want an error saying so", err)
	}
}
