//go:build integration

package pgstore_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/pgname"
	"github.com/agentenv/agentenv/provider/pgstore"
	"github.com/agentenv/agentenv/provider/providertest"
)

// storeDSN is the real PostgreSQL server of the integration tier (.ci/postgres.sh). Its role may
// create databases, not roles, which is all the conformance suite needs.
func storeDSN(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("AGENTENV_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Fatal("AGENTENV_TEST_POSTGRES_DSN is not set: run eval \"$(.ci/postgres.sh)\"")
	}
	return dsn
}

func newStore(t *testing.T) *pgstore.Provider {
	p, err := pgstore.New(pgstore.Config{DSN: storeDSN(t)}, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

func TestConformance(t *testing.T) {
	providertest.Run(t, func(t *testing.T) agentenv.Provider { return newStore(t) }, providertest.Options{
		Image: pgname.DefaultTemplate, Command: []string{"unused"}, Port: 5432,
		ExitCommand: []string{"unused"}, ExitCode: 1, NotProcesses: true,
	})
}

// TestBorrowedStoreUntouched checks that the store's own databases are neither listed nor
// dropped, even when asked by name, and that a made database is gone from pg_database after
// Terminate.
func TestBorrowedStoreUntouched(t *testing.T) {
	ctx := t.Context()
	p := newStore(t)
	conn, err := pgx.Connect(ctx, storeDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	own := "users-own-" + strings.TrimPrefix(providertest.NewID(), "t-")
	if _, err := conn.Exec(ctx, `CREATE DATABASE "`+own+`"`); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(cctx, storeDSN(t))
		if err == nil {
			conn.Exec(cctx, `DROP DATABASE IF EXISTS "`+own+`"`)
			conn.Close(cctx)
		}
	})
	id := providertest.NewID()
	sb, err := p.Create(ctx, agentenv.SandboxSpec{Name: id, Labels: map[string]string{agentenv.LabelRecord: id}})
	if err != nil {
		t.Fatal(err)
	}
	all, err := p.List(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range all {
		if x.ID == own {
			t.Errorf("List lists the store's own database %s", own)
		}
	}
	if err := p.Terminate(ctx, own); err != nil {
		t.Errorf("Terminate(%s) = %v, want nil (not ours: nothing to do)", own, err)
	}
	if err := p.Terminate(ctx, sb.ID); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]bool{own: true, sb.ID: false} {
		var n int
		if err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_database WHERE datname = $1`, name).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if (n == 1) != want {
			t.Errorf("database %s in pg_database: %v, want %v", name, n == 1, want)
		}
	}
}
