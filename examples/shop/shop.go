// Package shop is the website of examples/shop: a small web shop written for this repository,
// server-rendered pages over a catalogue and orders kept in the service DB (the website's own
// schema, reached through DATABASE_URL). `agentenv serve shop` runs it.
//
// Its links and redirects are relative, so it works at any prefix: under the gateway's
// /website/shop/ as at the root of its own port.
package shop

import (
	"context"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentenv/agentenv/envsdk"
	"github.com/agentenv/agentenv/internal/httpserve"
)

// Config configures Run.
type Config struct {
	// Listen is the address to serve HTTP on.
	Listen string
	// DatabaseURL is the PostgreSQL URL, with search_path set to the schema holding the
	// products and orders tables (schema.sql).
	DatabaseURL string
}

// queryTimeout bounds one page's queries.
const queryTimeout = 10 * time.Second

// Product is one item of the catalogue.
type Product struct {
	ID         int
	Name       string
	PriceCents int
}

// Price is the product's price as text.
func (p Product) Price() string { return fmt.Sprintf("$%d.%02d", p.PriceCents/100, p.PriceCents%100) }

// Order is one order placed.
type Order struct {
	ID       int
	Product  string
	Quantity int
}

var page = template.Must(template.New("page").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Shop</title></head>
<body>
<h1>Shop</h1>
<ul id="catalogue">
{{range .Products}}<li>
  <form method="post" action="orders">
    <span class="name">{{.Name}}</span> <span class="price">{{.Price}}</span>
    <input type="hidden" name="product" value="{{.ID}}">
    <input type="number" name="quantity" value="1" min="1" aria-label="quantity of {{.Name}}">
    <button type="submit">Order {{.Name}}</button>
  </form>
</li>
{{end}}</ul>
<h2>Orders</h2>
<ul id="orders">
{{range .Orders}}<li>#{{.ID}}: {{.Quantity}} × {{.Product}}</li>
{{else}}<li>No orders yet.</li>
{{end}}</ul>
</body></html>
`))

var receipt = template.Must(template.New("receipt").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Order placed</title></head>
<body>
<h1>Order placed</h1>
<p id="receipt">Order #{{.ID}} placed: {{.Quantity}} × {{.Product}}.</p>
<p><a href="../">Back to the shop</a></p>
</body></html>
`))

// Handler serves the shop over pool: GET / (the catalogue and the orders), POST /orders
// (a form's product and quantity; then 303 to the order's confirmation page), GET
// /orders/{id} (that page: "Order #ID placed", a link back to the catalogue) and GET /healthz
// (the database answers).
func Handler(pool *pgxpool.Pool, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
		defer cancel()
		if err := pool.Ping(ctx); err != nil {
			http.Error(w, "database: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
		defer cancel()
		var data struct {
			Products []Product
			Orders   []Order
		}
		var err error
		if data.Products, err = products(ctx, pool); err == nil {
			data.Orders, err = orders(ctx, pool)
		}
		if err != nil {
			log.Warn("shop page", "err", err)
			http.Error(w, "database: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := page.Execute(w, data); err != nil {
			log.Warn("shop page", "err", err)
		}
	})
	mux.HandleFunc("POST /orders", func(w http.ResponseWriter, r *http.Request) {
		product, err1 := strconv.Atoi(r.FormValue("product"))
		qty, err2 := strconv.Atoi(r.FormValue("quantity"))
		if err := errors.Join(err1, err2); err != nil || qty < 1 {
			http.Error(w, "want a product id and a quantity of at least 1", http.StatusBadRequest)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
		defer cancel()
		var id int
		if err := pool.QueryRow(ctx, "INSERT INTO orders (product_id, quantity) VALUES ($1, $2) RETURNING id", product, qty).Scan(&id); err != nil {
			http.Error(w, "order: "+err.Error(), http.StatusBadRequest)
			return
		}
		// Relative to /orders, as the browser resolves it, so it stays under any prefix
		// (http.Redirect would make it absolute from the path the shop sees).
		w.Header().Set("Location", "orders/"+strconv.Itoa(id))
		w.WriteHeader(http.StatusSeeOther)
	})
	mux.HandleFunc("GET /orders/{id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := strconv.Atoi(r.PathValue("id"))
		if err != nil {
			http.NotFound(w, r)
			return
		}
		ctx, cancel := context.WithTimeout(r.Context(), queryTimeout)
		defer cancel()
		o := Order{ID: id}
		err = pool.QueryRow(ctx, "SELECT p.name, o.quantity FROM orders o JOIN products p ON p.id = o.product_id WHERE o.id = $1", id).Scan(&o.Product, &o.Quantity)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			http.NotFound(w, r)
			return
		case err != nil:
			log.Warn("shop receipt", "err", err)
			http.Error(w, "database: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := receipt.Execute(w, o); err != nil {
			log.Warn("shop receipt", "err", err)
		}
	})
	return mux
}

func products(ctx context.Context, pool *pgxpool.Pool) ([]Product, error) {
	rows, err := pool.Query(ctx, "SELECT id, name, price_cents FROM products ORDER BY id")
	if err != nil {
		return nil, fmt.Errorf("products: %w", err)
	}
	defer rows.Close()
	var out []Product
	for rows.Next() {
		var p Product
		if err := rows.Scan(&p.ID, &p.Name, &p.PriceCents); err != nil {
			return nil, fmt.Errorf("products: %w", err)
		}
		out = append(out, p)
	}
	return out, rows.Err()
}

func orders(ctx context.Context, pool *pgxpool.Pool) ([]Order, error) {
	rows, err := pool.Query(ctx, "SELECT o.id, p.name, o.quantity FROM orders o JOIN products p ON p.id = o.product_id ORDER BY o.id")
	if err != nil {
		return nil, fmt.Errorf("orders: %w", err)
	}
	defer rows.Close()
	var out []Order
	for rows.Next() {
		var o Order
		if err := rows.Scan(&o.ID, &o.Product, &o.Quantity); err != nil {
			return nil, fmt.Errorf("orders: %w", err)
		}
		out = append(out, o)
	}
	return out, rows.Err()
}

// Run serves the shop on cfg.Listen until ctx ends.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if cfg.DatabaseURL == "" {
		return errors.New("shop: no database url")
	}
	pool, err := pgxpool.New(ctx, cfg.DatabaseURL)
	if err != nil {
		return fmt.Errorf("shop: %w", err)
	}
	defer pool.Close()
	ln, err := httpserve.Listen(ctx, cfg.Listen, httpserve.DefaultMaxConns)
	if err != nil {
		return fmt.Errorf("shop: %w", err)
	}
	return envsdk.ServeHandler(ctx, ln, Handler(pool, log), nil, log)
}
