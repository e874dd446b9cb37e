//go:build integration

package shop_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentenv/agentenv/examples/shop"
)

// testShop serves the shop over a fresh schema of the integration PostgreSQL, made from
// schema.sql and seed.sql and dropped at the end of the test. A missing DSN fails the test: the
// integration tag is the opt-in.
func testShop(t *testing.T) *httptest.Server {
	t.Helper()
	dsn := os.Getenv("AGENTENV_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Fatal("integration tests need PostgreSQL: set AGENTENV_TEST_POSTGRES_DSN (eval \"$(.ci/postgres.sh)\")")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schema := fmt.Sprintf("shop_test_%d", time.Now().UnixNano())
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
		pool.Close()
	})
	sql := "CREATE SCHEMA " + schema + ";\n"
	for _, f := range []string{"schema.sql", "seed.sql"} {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		sql += strings.ReplaceAll(string(b), "shop.", schema+".")
	}
	if _, err := pool.Exec(ctx, sql); err != nil {
		t.Fatalf("schema and seed: %v", err)
	}
	srv := httptest.NewServer(shop.Handler(pool, slog.New(slog.DiscardHandler)))
	t.Cleanup(srv.Close)
	return srv
}

// An order is answered 303 to its confirmation page, relative to /orders so that it stays under
// the gateway's prefix; the page says the order was placed and links back to the catalogue,
// which lists it; an order that is not there is 404.
func TestOrderConfirmation(t *testing.T) {
	srv := testShop(t)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.PostForm(srv.URL+"/orders", url.Values{"product": {"2"}, "quantity": {"3"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusSeeOther || resp.Header.Get("Location") != "orders/1" {
		t.Fatalf("POST /orders: %s, Location %q; want 303 to orders/1", resp.Status, resp.Header.Get("Location"))
	}
	get := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, page := get("/orders/1"); code != http.StatusOK || !strings.Contains(page, "Order #1 placed: 3 × Notebook.") || !strings.Contains(page, `<a href="../">Back to the shop</a>`) {
		t.Errorf("GET /orders/1: %d\n%s", code, page)
	}
	if code, page := get("/"); code != http.StatusOK || !strings.Contains(page, "#1: 3 × Notebook") {
		t.Errorf("GET /: %d, want the order listed\n%s", code, page)
	}
	for _, bad := range []string{"/orders/2", "/orders/x"} {
		if code, _ := get(bad); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", bad, code)
		}
	}
}
