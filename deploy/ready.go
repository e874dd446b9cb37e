package deploy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/mcpclient"
	"github.com/agentenv/agentenv/spec"
)

// closeTimeout bounds the close of a PostgreSQL connection, which runs even when ctx ended.
const closeTimeout = 5 * time.Second

// pollEvery is the pause between readiness tries; each try has its own short bound, and the
// whole wait the caller's deadline.
const (
	pollEvery = 50 * time.Millisecond
	tryBound  = 3 * time.Second
)

// poll calls try until it succeeds or ctx ends, and returns the last error.
func poll(ctx context.Context, try func(ctx context.Context) error) error {
	var last error
	for {
		tctx, cancel := context.WithTimeout(ctx, tryBound)
		err := try(tctx)
		cancel()
		if err == nil {
			return nil
		}
		// The attempt the deadline cut short says less than the one before it (a 404, a
		// refused connection): keep that one.
		if last == nil || ctx.Err() == nil {
			last = err
		}
		select {
		case <-ctx.Done():
			return errors.Join(context.Cause(ctx), last)
		case <-time.After(pollEvery):
		}
	}
}

// waitPostgres waits until PostgreSQL at url answers a query.
func waitPostgres(ctx context.Context, url string) error {
	return poll(ctx, func(ctx context.Context) error {
		conn, err := pgx.Connect(ctx, url)
		if err != nil {
			return err
		}
		defer cleanup.Do(ctx, closeTimeout, conn.Close) //nolint:errcheck // the query said what matters
		var one int
		return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
	})
}

// drawDBPasswords draws the service DB's passwords for one deployment: the superuser's and
// one per login role, each independent of the others and of the gateway token.
func drawDBPasswords(env *spec.Env) (spec.DBPasswords, error) {
	var pw spec.DBPasswords
	if env.ServiceDB == nil {
		return pw, nil
	}
	roles := env.DBRoles()
	var err error
	if pw.Superuser, err = newToken(); err != nil {
		return pw, fmt.Errorf("service db password: %w", err)
	}
	pw.Roles = make(map[string]string, len(roles))
	for _, r := range roles {
		if pw.Roles[r.Name], err = newToken(); err != nil {
			return pw, fmt.Errorf("service db password: %w", err)
		}
	}
	return pw, nil
}

// initDB runs the service DB's init files (schemas, init_sql, seed, then the roles) in order,
// as the superuser at url, once it answers. They run through a client rather than the
// image's init folder, so that any PostgreSQL image works and nothing runs twice. An image
// that left passwordless logins in pg_hba.conf (one that ignores POSTGRES_INITDB_ARGS) is
// named in a warning: the roles still hold, but a shell in its container would be the
// superuser's.
func initDB(ctx context.Context, url string, files []spec.File, log *slog.Logger) error {
	if len(files) == 0 {
		return nil
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Target < files[j].Target })
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return fmt.Errorf("service db: %w", err)
	}
	defer cleanup.Do(ctx, closeTimeout, conn.Close) //nolint:errcheck // the query said what matters
	for _, f := range files {
		sql := f.Content
		if f.Source != "" {
			if sql, err = os.ReadFile(f.Source); err != nil {
				return fmt.Errorf("service db init: %w", err)
			}
		}
		if _, err := conn.Exec(ctx, string(sql)); err != nil {
			return fmt.Errorf("service db init %s: %w", f.Target, err)
		}
	}
	var trust []string
	rows, err := conn.Query(ctx, `SELECT type || ' ' || array_to_string(database, ',') || ' ' || array_to_string(user_name, ',') || coalesce(' ' || address, '')
		FROM pg_hba_file_rules WHERE auth_method = 'trust' ORDER BY line_number`)
	if err == nil {
		trust, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	switch {
	case err != nil:
		log.Warn("service db: cannot read pg_hba.conf's rules", "err", err)
	case len(trust) > 0:
		log.Warn("service db: its image lets these logins in without a password; it should honour POSTGRES_INITDB_ARGS", "rules", trust)
	}
	return nil
}

// listTools connects to an MCP endpoint and returns its tool names.
func listTools(ctx context.Context, url, token string) ([]string, error) {
	cs, err := mcpclient.Client{Name: "agentenv-deploy"}.Connect(ctx, url, token)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	var names []string
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			return nil, err
		}
		names = append(names, t.Name)
	}
	return names, nil
}

// waitMCP waits until an MCP server answers initialize and tools/list, and returns its tools.
func waitMCP(ctx context.Context, url, token string) ([]string, error) {
	var tools []string
	err := poll(ctx, func(ctx context.Context) error {
		t, err := listTools(ctx, url, token)
		tools = t
		return err
	})
	return tools, err
}

// waitHTTP waits until url answers any HTTP status below 500.
func waitHTTP(ctx context.Context, url string) error {
	return poll(ctx, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode >= 500 {
			return fmt.Errorf("GET %s: %s", url, resp.Status)
		}
		return nil
	})
}

// waitGateway waits until the gateway at base serves its card to the token and lists tools.
func waitGateway(ctx context.Context, base, token string) error {
	err := poll(ctx, func(ctx context.Context) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+envproto.CardPath, nil)
		if err != nil {
			return err
		}
		resp, err := mcpclient.HTTPClient(nil, token).Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("GET card: %s", resp.Status)
		}
		return nil
	})
	if err != nil {
		return err
	}
	_, err = waitMCP(ctx, base+envproto.MCPPath, token)
	return err
}

// inVMDB reaches a stack's PostgreSQL from inside its VM, with psql in the service DB's own
// container (which a PostgreSQL image has), for VMs whose ports carry only HTTP to the caller.
type inVMDB struct {
	ex                       agentenv.VMExecer
	vm, container            string
	port                     int
	user, password, database string
}

// psql runs psql over TCP inside the container, so that it sees the server the image's init
// ends with, not the one it runs on a socket meanwhile.
func (d inVMDB) psql(ctx context.Context, stdin []byte, args ...string) error {
	argv := append([]string{"psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", strconv.Itoa(d.port), "-U", d.user, "-d", d.database}, args...)
	res, err := d.ex.ExecInVM(ctx, d.vm, d.container, argv, map[string]string{"PGPASSWORD": d.password}, stdin)
	if err != nil {
		return err
	}
	if res.ExitCode != 0 {
		return fmt.Errorf("psql exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
	}
	return nil
}

// wait waits until the server answers a query.
func (d inVMDB) wait(ctx context.Context) error {
	return poll(ctx, func(ctx context.Context) error { return d.psql(ctx, nil, "-tAc", "SELECT 1") })
}

// init runs the init files as initDB does, each in one transaction.
func (d inVMDB) init(ctx context.Context, files []spec.File) error {
	sort.Slice(files, func(i, j int) bool { return files[i].Target < files[j].Target })
	for _, f := range files {
		sql := f.Content
		if f.Source != "" {
			var err error
			if sql, err = os.ReadFile(f.Source); err != nil {
				return fmt.Errorf("service db init: %w", err)
			}
		}
		if err := d.psql(ctx, sql, "-1", "-f", "-"); err != nil {
			return fmt.Errorf("service db init %s: %w", f.Target, err)
		}
	}
	return nil
}

// errExited is the cause of a readiness wait cut short because the component's sandbox exited.
var errExited = errors.New("exited before it was ready")

// watch returns a context that is cancelled, with a cause wrapping errExited, once the sandbox
// of record id no longer runs.
func (st *stack) watch(ctx context.Context, id string) context.Context {
	wctx, cancel := context.WithCancelCause(ctx)
	go func() {
		defer cancel(nil)
		t := time.NewTicker(250 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
			}
			if _, err := st.d.mgr.Get(wctx, id); errors.Is(err, agentenv.ErrGone) || errors.Is(err, agentenv.ErrNotFound) {
				cancel(fmt.Errorf("%w: %w", errExited, err))
				return
			}
		}
	}()
	return wctx
}

// ready waits until c answers as its role requires.
func (st *stack) ready(ctx context.Context, c spec.Component, addr string) error {
	switch c.Role {
	case agentenv.RoleServiceDB:
		db := st.env.ServiceDB
		if st.vm != "" && strings.Contains(addr, "://") {
			// A VM whose ports are reached as URLs carries only HTTP to them: PostgreSQL is
			// waited for and initialised from inside the VM instead.
			if ok, _ := st.d.mgr.Supports(st.member, agentenv.AbilityVMExec); !ok {
				return fmt.Errorf("its port is reached at %s, not over TCP, and provider %s cannot run commands in the vm: %w", addr, st.member, agentenv.ErrInvalid)
			}
			in := inVMDB{ex: st.d.mgr, vm: st.vm, container: st.inVMName(c.Name), port: c.Port, user: db.User, password: st.db.Superuser, database: db.Database}
			if err := in.wait(ctx); err != nil {
				return err
			}
			return in.init(ctx, c.Files)
		}
		// The superuser's URL is for the init alone; the deployment hands out the verifier's.
		url := db.URL(addr, db.User, st.db.Superuser, "")
		if err := waitPostgres(ctx, url); err != nil {
			return err
		}
		if err := st.restoreSnapshot(ctx); err != nil {
			return err
		}
		if err := initDB(ctx, url, c.Files, st.d.log); err != nil {
			return err
		}
		st.mu.Lock()
		st.dbURL = db.URL(addr, spec.DBRoleVerifier, st.db.Roles[spec.DBRoleVerifier], "")
		st.mu.Unlock()
		return nil
	case agentenv.RoleMCPServer, agentenv.RoleDBMCP:
		tools, err := waitMCP(ctx, baseURL(addr)+c.Path, "")
		if err != nil {
			return err
		}
		if c.Role == agentenv.RoleMCPServer {
			st.mu.Lock()
			st.tools[c.Name] = tools
			st.mu.Unlock()
		}
		return nil
	case agentenv.RoleGateway:
		return waitGateway(ctx, baseURL(addr), st.token)
	case agentenv.RoleWebsite:
		token := ""
		if c.Private { // through the gateway at addr (website.go), with the admin token
			token = st.token
		}
		return waitWebsite(ctx, baseURL(addr)+c.ReadyPath, token)
	default:
		return waitHTTP(ctx, baseURL(addr)+"/")
	}
}

// logs returns the last lines of a failed component's output (of record rec, or of the whole
// VM), for the error message.
func (st *stack) logs(ctx context.Context, rec string) string {
	if st.vm != "" {
		rec = st.vm
	}
	cctx, cancel := cleanup.Context(ctx, 5*time.Second)
	defer cancel()
	out, err := st.d.mgr.Logs(cctx, rec, 20)
	if err != nil || out == "" {
		return ""
	}
	return "\nlast log lines:\n" + out
}
