// Package pgstore is the provider of a state store: a PostgreSQL server on which each sandbox is
// a database. Create is CREATE DATABASE (from the spec's Image, which names the template
// database), Terminate is DROP DATABASE (FORCE) and drops the login roles made for that
// database (roles are cluster-wide, so they are named per database: [pgname.Role]), and List reads
// pg_database, with the labels kept as JSON in COMMENT ON DATABASE. Package lifecycle wraps it
// like any provider, so every database is a ledger record written before CREATE DATABASE, torn
// down with a verified receipt (the database is gone from pg_database) and collected by gc.
//
// The store itself is borrowed: the provider never drops a database it did not make, and it
// makes only databases named [pgname.DatabasePrefix] followed by the record id.
package pgstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/pgname"
)

// Port is the key of a database's one endpoint: the store's host:port from this host.
const Port = "5432"

// Attacher connects the store's server to a deployment's private network, where that
// network's sandboxes reach it at the aliases: a store that is a container on the same engine.
type Attacher interface {
	// Attach connects the server to network (a provider's network id) under aliases. Attaching
	// to a network it is already on is no error.
	Attach(ctx context.Context, network string, aliases []string) error
	// Detach disconnects the server from network. A server not on it, or a network that is
	// gone, is no error.
	Detach(ctx context.Context, network string) error
}

// Config configures the provider.
type Config struct {
	// Name is the provider's name, "state" if empty.
	Name string
	// DSN is the store's admin login from this host: a role that may create databases and
	// roles. Required.
	DSN string
	// Attach, if set, joins the server to the private network a spec names (SandboxSpec.Network).
	Attach Attacher
}

// Provider makes databases on one PostgreSQL server.
type Provider struct {
	cfg  Config
	log  *slog.Logger
	conf *pgxpool.Config
	host string // the server's host:port from this host

	mu   sync.Mutex
	pool *pgxpool.Pool
}

var _ agentenv.Provider = (*Provider)(nil)

// New returns a provider for cfg. It does no I/O: the server is reached on first use.
func New(cfg Config, logger *slog.Logger) (*Provider, error) {
	if cfg.Name == "" {
		cfg.Name = "state"
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DSN == "" {
		return nil, fmt.Errorf("pgstore: no DSN: %w", agentenv.ErrInvalid)
	}
	conf, err := pgxpool.ParseConfig(cfg.DSN)
	if err != nil {
		return nil, fmt.Errorf("pgstore: state store DSN: %w: %w", err, agentenv.ErrInvalid)
	}
	conf.MaxConns = 4
	conf.MinConns = 0
	conf.MaxConnIdleTime = 30 * time.Second
	return &Provider{cfg: cfg, log: logger, conf: conf, host: net.JoinHostPort(conf.ConnConfig.Host, strconv.Itoa(int(conf.ConnConfig.Port)))}, nil
}

// Name returns the provider's configured name.
func (p *Provider) Name() string { return p.cfg.Name }

// Capabilities reports that databases are found by label; they are not processes on this host.
func (p *Provider) Capabilities() agentenv.Capabilities {
	return agentenv.Capabilities{ListByLabel: true}
}

// HostPort returns the server's address from this host.
func (p *Provider) HostPort() string { return p.host }

// Close closes the provider's connections.
func (p *Provider) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pool != nil {
		p.pool.Close()
		p.pool = nil
	}
}

func (p *Provider) db(ctx context.Context) (*pgxpool.Pool, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.pool == nil {
		pool, err := pgxpool.NewWithConfig(ctx, p.conf.Copy())
		if err != nil {
			return nil, fmt.Errorf("state store %s: %w: %w", p.host, err, agentenv.ErrUnavailable)
		}
		p.pool = pool
	}
	return p.pool, nil
}

// recordID is what a record id the provider accepts looks like: it becomes part of a database
// name, so it is kept short and plain.
var recordID = regexp.MustCompile(`^[a-z0-9]([a-z0-9-]{0,46}[a-z0-9])?$`)

// comment is what COMMENT ON DATABASE holds for a database the provider made.
type comment struct {
	Agentenv map[string]string `json:"agentenv"`
	Created  time.Time         `json:"created"`
	// Network is the private network the server joined for the database (SandboxSpec.Network),
	// which it leaves when the database is dropped.
	Network string `json:"network,omitempty"`
}

// Create makes the database of spec.Name from the template spec.Image ([pgname.DefaultTemplate] if
// empty), labels it, and joins the server to spec.Network when the provider can.
func (p *Provider) Create(ctx context.Context, spec agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	if err := checkRecord(spec); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("pgstore: create: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("pgstore: create %s: %w", spec.Name, err)
	}
	if spec.Network != "" && p.cfg.Attach == nil {
		return agentenv.Sandbox{}, fmt.Errorf("pgstore: create %s: the store cannot join network %s: %w", spec.Name, spec.Network, agentenv.ErrInvalid)
	}
	tpl := spec.Image
	if tpl == "" {
		tpl = pgname.DefaultTemplate
	}
	pool, err := p.db(ctx)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("pgstore: create %s: %w", spec.Name, err)
	}
	name := pgname.Database(spec.Name)
	created := time.Now().UTC().Truncate(time.Second)
	text, err := json.Marshal(comment{Agentenv: spec.Labels, Created: created, Network: spec.Network})
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("pgstore: create %s: %w", spec.Name, err)
	}
	made := false
	undo := func(err error) (agentenv.Sandbox, error) {
		if made {
			cctx, cancel := cleanup.Context(ctx, 30*time.Second)
			defer cancel()
			if derr := p.drop(cctx, name); derr != nil {
				p.log.Warn("pgstore: undo a failed create; gc will find the database", "database", name, "err", derr)
			}
			p.detach(cctx, name, spec.Network)
		}
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
			err = fmt.Errorf("%w (%w)", cerr, err)
		}
		return agentenv.Sandbox{}, fmt.Errorf("pgstore: create %s: %w", spec.Name, err)
	}
	// A template another session is connected to (or copying from, on older servers) refuses
	// for a moment: retry within the caller's deadline.
	for {
		_, err = pool.Exec(ctx, fmt.Sprintf("CREATE DATABASE %s TEMPLATE %s", ident(name), ident(tpl)))
		if code(err) == "55006" && ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
			continue
		}
		break
	}
	if err != nil {
		// The server may have made it before it saw the cancellation: look.
		made = ctx.Err() != nil || code(err) == ""
		return undo(mapErr(err))
	}
	made = true
	if _, err := pool.Exec(ctx, fmt.Sprintf("COMMENT ON DATABASE %s IS %s", ident(name), literal(string(text)))); err != nil {
		return undo(mapErr(err))
	}
	if spec.Network != "" {
		if err := p.cfg.Attach.Attach(ctx, spec.Network, spec.Aliases); err != nil {
			return undo(fmt.Errorf("join network %s: %w", spec.Network, err))
		}
	}
	return p.sandbox(name, spec.Labels, created), nil
}

func (p *Provider) sandbox(name string, labels map[string]string, created time.Time) agentenv.Sandbox {
	return agentenv.Sandbox{
		ID: name, Name: strings.TrimPrefix(name, pgname.DatabasePrefix), Provider: p.cfg.Name, State: agentenv.SandboxRunning,
		Labels: labels, Endpoints: map[string]string{Port: p.host}, Created: created,
	}
}

// checkRecord refuses a spec whose record label is missing, is not spec.Name, or is not a
// record id the provider can name a database after.
func checkRecord(spec agentenv.SandboxSpec) error {
	if !recordID.MatchString(spec.Name) {
		return fmt.Errorf("record id %q: want 1-48 of [a-z0-9-]: %w", spec.Name, agentenv.ErrInvalid)
	}
	if got := spec.Labels[agentenv.LabelRecord]; got != spec.Name {
		return fmt.Errorf("record label %q, want %q: %w", got, spec.Name, agentenv.ErrInvalid)
	}
	return nil
}

// Get returns the database id (a database name) if it exists.
func (p *Provider) Get(ctx context.Context, id string) (agentenv.Sandbox, error) {
	sbs, err := p.list(ctx, id)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("pgstore: get %s: %w", id, err)
	}
	if len(sbs) == 0 {
		return agentenv.Sandbox{}, fmt.Errorf("pgstore: database %s: %w", id, agentenv.ErrNotFound)
	}
	return sbs[0], nil
}

// Terminate drops database id, closing its sessions, and the login roles made for it. A
// database that does not exist counts as dropped. It refuses a name the provider does not make.
func (p *Provider) Terminate(ctx context.Context, id string) error {
	if !strings.HasPrefix(id, pgname.DatabasePrefix) || !recordID.MatchString(strings.TrimPrefix(id, pgname.DatabasePrefix)) {
		// Not one of ours: nothing of ours to drop, and a user's database is never touched.
		return nil
	}
	network, err := p.network(ctx, id)
	if err != nil {
		return fmt.Errorf("pgstore: terminate %s: %w", id, err)
	}
	if err := p.drop(ctx, id); err != nil {
		return fmt.Errorf("pgstore: terminate %s: %w", id, err)
	}
	p.detach(ctx, id, network)
	return nil
}

// network returns the network the server joined for database name: "" if none, or if the
// database is gone.
func (p *Provider) network(ctx context.Context, name string) (string, error) {
	if p.cfg.Attach == nil {
		return "", nil
	}
	pool, err := p.db(ctx)
	if err != nil {
		return "", err
	}
	var text string
	err = pool.QueryRow(ctx, `SELECT coalesce(shobj_description(oid, 'pg_database'), '') FROM pg_database WHERE datname = $1`, name).Scan(&text)
	if errors.Is(err, pgx.ErrNoRows) {
		return "", nil
	}
	if err != nil {
		return "", mapErr(err)
	}
	var c comment
	_ = json.Unmarshal([]byte(text), &c) // a database made before its comment joined no network
	return c.Network, nil
}

// detach takes the server off the network it joined for database name, if any. A failure is
// logged, not returned: the database is gone, and the network's own teardown disconnects
// whatever is still on it.
func (p *Provider) detach(ctx context.Context, name, network string) {
	if network == "" || p.cfg.Attach == nil {
		return
	}
	if err := p.cfg.Attach.Detach(ctx, network); err != nil {
		p.log.Warn("pgstore: the store's server did not leave the network of a dropped database", "database", name, "network", network, "err", err)
	}
}

func (p *Provider) drop(ctx context.Context, name string) error {
	pool, err := p.db(ctx)
	if err != nil {
		return err
	}
	// A template must stop being one before it can be dropped.
	if _, err := pool.Exec(ctx, fmt.Sprintf(`DO $agentenv$ BEGIN
  IF EXISTS (SELECT FROM pg_database WHERE datname = %[1]s AND datistemplate) THEN
    EXECUTE format('ALTER DATABASE %%I IS_TEMPLATE false', %[1]s);
  END IF;
END $agentenv$`, literal(name))); err != nil {
		return mapErr(err)
	}
	if _, err := pool.Exec(ctx, fmt.Sprintf("DROP DATABASE IF EXISTS %s WITH (FORCE)", ident(name))); err != nil {
		return mapErr(err)
	}
	rows, err := pool.Query(ctx, `SELECT rolname FROM pg_roles WHERE starts_with(rolname, $1)`, pgname.RolePrefix(name))
	if err != nil {
		return mapErr(err)
	}
	roles, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return mapErr(err)
	}
	var errs []error
	for _, r := range roles {
		if _, err := pool.Exec(ctx, "DROP ROLE IF EXISTS "+ident(r)); err != nil {
			errs = append(errs, fmt.Errorf("drop role %s: %w", r, mapErr(err)))
		}
	}
	return errors.Join(errs...)
}

// List returns the databases the provider made that carry every one of labels.
func (p *Provider) List(ctx context.Context, labels map[string]string) ([]agentenv.Sandbox, error) {
	sbs, err := p.list(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("pgstore: list: %w", err)
	}
	out := sbs[:0]
	for _, sb := range sbs {
		if agentenv.MatchLabels(sb.Labels, labels) {
			out = append(out, sb)
		}
	}
	return out, nil
}

// list reads pg_database: the database named only, or every one the provider made.
func (p *Provider) list(ctx context.Context, only string) ([]agentenv.Sandbox, error) {
	pool, err := p.db(ctx)
	if err != nil {
		return nil, err
	}
	rows, err := pool.Query(ctx, `SELECT datname, coalesce(shobj_description(oid, 'pg_database'), '') FROM pg_database
		WHERE starts_with(datname, $1) AND ($2 = '' OR datname = $2)`, pgname.DatabasePrefix, only)
	if err != nil {
		return nil, mapErr(err)
	}
	type row struct{ name, comment string }
	found, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (row, error) {
		var x row
		return x, r.Scan(&x.name, &x.comment)
	})
	if err != nil {
		return nil, mapErr(err)
	}
	var out []agentenv.Sandbox
	for _, r := range found {
		record := strings.TrimPrefix(r.name, pgname.DatabasePrefix)
		if !recordID.MatchString(record) {
			continue
		}
		var c comment
		if err := json.Unmarshal([]byte(r.comment), &c); err != nil || c.Agentenv == nil {
			// Made, but its create stopped before the labels: it is still ours by name.
			c.Agentenv = map[string]string{agentenv.LabelRecord: record}
		}
		out = append(out, p.sandbox(r.name, c.Agentenv, c.Created))
	}
	return out, nil
}

// code returns the SQLSTATE of a server's error, or "" for any other error.
func code(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// mapErr maps a server's refusals onto agentenv's kinds: privileges and a missing template
// are the caller's to fix, anything not from the server means it could not be reached.
func mapErr(err error) error {
	if err == nil {
		return nil
	}
	switch c := code(err); {
	case c == "":
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return err
		}
		return fmt.Errorf("%w: %w", err, agentenv.ErrUnavailable)
	case c == "42501" || c == "3D000" || c == "42P04" || strings.HasPrefix(c, "28"):
		return fmt.Errorf("%w: %w", err, agentenv.ErrInvalid)
	case strings.HasPrefix(c, "53") || strings.HasPrefix(c, "57") || strings.HasPrefix(c, "08"):
		return fmt.Errorf("%w: %w", err, agentenv.ErrUnavailable)
	default:
		return err
	}
}

// ident quotes an SQL identifier.
func ident(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// literal quotes an SQL string literal.
func literal(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }
