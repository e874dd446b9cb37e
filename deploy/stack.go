package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/staticbin"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/spec"
)

// stack is one attempt at deploying an env on one provider: what it has created so far, so that
// a failure undoes exactly that.
type stack struct {
	d      *Deployer
	env    *spec.Env
	member string
	doc    agentenv.Deployment
	opts   Options
	token  string            // the gateway's admin token
	tokens map[string]string // role -> role-bound token
	start  time.Time

	mu         sync.Mutex
	network    string              // container mode: the private network's provider id
	browserNet string              // container mode: the browser's network with no route out, if any (browser.go)
	vm         string              // VM mode: the VM's record id
	endpoints  map[string]string   // component -> where its main port is reached: host:port or a URL
	private    map[string]string   // container mode without DNS: component -> its PrivateHost
	records    map[string]string   // component -> its record id ("" in a VM's stack), once created
	tools      map[string][]string // exposed servers' tools, as each lists them
	// gatewayTools is how many tools the gateway lists (the probe's count; 0 if it failed)
	gatewayTools int
	db           spec.DBPasswords // the service DB's passwords, drawn for this attempt
	dbURL        string           // the service DB as the read-only verifier role, from this host
	bin          []byte           // this binary, for stdio servers behind the bridge

	store       *spec.StoreDB // the service DB is a database of the state store (store.go), if set
	storeRec    string        // that database's record id
	storeAttach bool          // the store's server joins the private network

	snapTemplate string // service_db.from_snapshot: the store's template database to copy, if set
	snapImage    string // service_db.from_snapshot: the image snapshot the service DB runs, if set
	serviceDB    string // container mode: the service DB container's record id, once created
}

func (st *stack) emit(c spec.Component, phase, detail string) {
	if st.opts.Progress != nil {
		st.opts.Progress(Event{Component: c.Name, Role: c.Role, Phase: phase, Elapsed: time.Since(st.start), Detail: detail})
	}
}

func (st *stack) request(kind agentenv.Kind, role agentenv.Role, sp agentenv.SandboxSpec, prefix string) lifecycle.CreateRequest {
	return lifecycle.CreateRequest{
		Provider: st.member, Kind: kind, ID: lifecycle.NewID(prefix), Spec: sp,
		// The TTL counts from the hand-over (finish moves each record's expiry there); the
		// budget on top keeps a sandbox's expiry label, fixed at create, no earlier than that.
		Run: st.opts.Run, Deployment: st.doc.ID, Role: role, TTL: st.opts.TTL + st.opts.Budget,
	}
}

// components returns the env's components with the service DB's passwords drawn for this
// deployment, once the provider has confirmed it can run every image: an env that names a
// missing image fails here, naming the component, before anything is created.
func (st *stack) components(ctx context.Context) ([]spec.Component, error) {
	db, err := drawDBPasswords(st.env)
	if err != nil {
		return nil, err
	}
	st.db = db
	comps, err := st.env.Components(st.topology(nil))
	if err != nil {
		return nil, err
	}
	var errs []error
	checked := map[string]bool{}
	for _, c := range comps {
		if checked[c.Image] {
			continue
		}
		checked[c.Image] = true
		if pin := st.opts.Pinned[c.Image]; pin != "" {
			// Pulled by digest where the provider checks images; else the create falls back
			// to the image as named, which must then be here.
			if err := st.d.mgr.EnsureImages(ctx, st.member, pin); err == nil {
				continue
			}
		}
		if err := st.d.mgr.EnsureImages(ctx, st.member, c.Image); err != nil {
			errs = append(errs, fmt.Errorf("%s %s: %w", c.Role, c.Name, err))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return comps, err
	}
	return comps, st.live(ctx)
}

// live waits for the env's live endpoints (servers with url) to answer MCP initialize and
// tools/list, each within its ready_timeout, before anything is created: nothing is created
// or torn down for them, and the gateway joins them like any other server.
func (st *stack) live(ctx context.Context) error {
	for _, s := range st.env.Servers {
		if s.URL == "" {
			continue
		}
		c := spec.Component{Role: agentenv.RoleMCPServer, Name: s.Name}
		wctx, cancel := context.WithTimeout(ctx, s.ReadyTimeout)
		tools, err := waitMCP(wctx, s.URL, "")
		cancel()
		if err != nil {
			if ctx.Err() != nil {
				return context.Cause(ctx)
			}
			err = fmt.Errorf("server %s at %s (url) not ready within %s: %w", s.Name, s.URL, s.ReadyTimeout, err)
			st.emit(c, "failed", err.Error())
			return err
		}
		st.mu.Lock()
		st.tools[s.Name] = tools
		st.mu.Unlock()
		st.emit(c, "ready", "live endpoint "+s.URL)
	}
	return nil
}

// upContainers runs container mode: a private network, then the components in dependency order,
// each its own recorded sandbox, concurrently where nothing orders them.
func (st *stack) upContainers(ctx context.Context) error {
	comps, err := st.components(ctx)
	if err != nil {
		return err
	}
	st.warnEgress(false)
	_, nsb, err := st.d.mgr.Create(ctx, st.request(agentenv.KindNetwork, agentenv.RoleNetwork, agentenv.SandboxSpec{Egress: st.env.EgressRules()}, "net"))
	if err != nil {
		return fmt.Errorf("private network: %w", err)
	}
	st.network = nsb.ID
	st.emit(spec.Component{Name: "network", Role: agentenv.RoleNetwork}, "created", nsb.ID)
	if err := st.browserNetwork(ctx); err != nil {
		return err
	}
	if st.store != nil {
		if err := st.upStore(ctx); err != nil {
			return err
		}
	}
	return st.inOrder(ctx, comps, func(ctx context.Context, c spec.Component, sp agentenv.SandboxSpec) (string, agentenv.Sandbox, error) {
		if err := st.rewire(c, &sp); err != nil {
			return "", agentenv.Sandbox{}, err
		}
		sp.Network = st.network
		sp.Aliases = []string{c.Name}
		sp.Labels = map[string]string{}
		st.placeBrowser(c, &sp)
		rec, sb, err := st.d.mgr.Create(ctx, st.request(agentenv.KindSandbox, c.Role, sp, c.Name))
		if err == nil && sb.PrivateHost != "" {
			st.mu.Lock()
			st.private[c.Name] = sb.PrivateHost
			st.mu.Unlock()
		}
		return rec.ID, sb, err
	})
}

// pass returns the deploy's allow-list of env:NAME references, never nil: a deploy resolves
// only what its user passed.
func (st *stack) pass() []string { return append([]string{}, st.opts.PassEnv...) }

// rewire points c at the private hosts of the components created before it, on a network that
// does not resolve aliases (the sandboxes report a PrivateHost): c's env and command are
// rendered anew with those hosts in place of the names. Components start after what they
// depend on is ready, so every host c names is known by then.
func (st *stack) rewire(c spec.Component, sp *agentenv.SandboxSpec) error {
	st.mu.Lock()
	private := maps.Clone(st.private)
	st.mu.Unlock()
	if len(private) == 0 {
		return nil
	}
	comps, err := st.env.Components(st.topology(func(name string) string {
		if h, ok := private[name]; ok {
			return h
		}
		return name
	}))
	if err != nil {
		return err
	}
	for _, fresh := range comps {
		if fresh.Name == c.Name {
			if sp.Env == nil {
				sp.Env = map[string]string{}
			}
			maps.Copy(sp.Env, fresh.Env)
			sp.Command = fresh.Command
			return nil
		}
	}
	return fmt.Errorf("component %s vanished from the env on re-render: %w", c.Name, agentenv.ErrInvalid)
}

// warnEgress says, as a warning event and in the log, that the env's egress list is not
// enforced where the provider (or VM mode, whose stack shares its VM's network) cannot hold
// the env to it: never silently.
func (st *stack) warnEgress(vm bool) {
	if len(st.env.Egress) == 0 {
		return
	}
	caps, err := st.d.mgr.Capabilities(st.member)
	if err == nil && caps.Egress && !vm {
		return
	}
	where := "provider " + st.member
	if vm && err == nil && caps.Egress {
		where += " in vm mode"
	}
	msg := fmt.Sprintf("egress not enforced: %s does not restrict egress, so the env's components can reach any address, not only %s", where, strings.Join(st.env.Egress, ", "))
	st.d.log.Warn("egress not enforced", "deployment", st.doc.ID, "provider", st.member, "egress", st.env.Egress)
	st.emit(spec.Component{Name: "egress", Role: agentenv.RoleNetwork}, "warning", msg)
}

// startFunc makes one component's sandbox from a spec filled with what every mode shares. It
// returns the sandbox's record id ("" for a container of a VM's stack, which is the VM's).
type startFunc func(ctx context.Context, c spec.Component, sp agentenv.SandboxSpec) (string, agentenv.Sandbox, error)

// inOrder starts comps so that each starts once everything in its After is ready, concurrently
// otherwise, and waits for each to be ready. The first failure cancels the rest, and inOrder
// returns once every started component has returned.
func (st *stack) inOrder(ctx context.Context, comps []spec.Component, start startFunc) error {
	ready := map[string]bool{}
	left := comps
	for len(left) > 0 {
		var wave, later []spec.Component
		for _, c := range left {
			if allReady(c.After, ready) {
				wave = append(wave, c)
			} else {
				later = append(later, c)
			}
		}
		if len(wave) == 0 {
			return fmt.Errorf("components wait on each other: %v: %w", names(later), agentenv.ErrInvalid)
		}
		wctx, cancel := context.WithCancelCause(ctx)
		var wg sync.WaitGroup
		errs := make([]error, len(wave))
		for i, c := range wave {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := st.up(wctx, c, start); err != nil {
					errs[i] = fmt.Errorf("%s: %w", c.Name, err)
					cancel(errs[i])
				}
			}()
		}
		wg.Wait()
		cancel(nil)
		if err := errors.Join(errs...); err != nil {
			return err
		}
		for _, c := range wave {
			ready[c.Name] = true
		}
		left = later
	}
	return nil
}

// up starts one component and waits until it is ready.
func (st *stack) up(ctx context.Context, c spec.Component, start startFunc) error {
	sp := agentenv.SandboxSpec{Image: c.Image, Pinned: st.opts.Pinned[c.Image], Command: c.Command, Env: maps.Clone(c.Env), Ports: []int{c.Port},
		Memory: c.Resources.Memory, CPUs: c.Resources.CPUs, Pids: c.Resources.Pids, NonRoot: c.NonRoot, ShmSize: c.ShmSize}
	if sp.Pinned != "" {
		sp.PullAuth = st.opts.Logins.For(ctx, sp.Pinned)
	}
	if c.Private {
		sp.Ports = nil // no door on the host: the gateway reaches it on the env's network
	}
	if c.Role == agentenv.RoleGateway {
		if sp.Env == nil {
			sp.Env = map[string]string{}
		}
		sp.Env[spec.ComposeTokenVar] = st.token
		rt, err := json.Marshal(st.tokens)
		if err != nil {
			return fmt.Errorf("role tokens: %w", err)
		}
		sp.Env[spec.RoleTokensVar] = string(rt)
	}
	if c.Bridge {
		bin, err := st.binary()
		if err != nil {
			return err
		}
		sp.Files = map[string][]byte{spec.BinaryPath: bin}
	}
	rec, sb, err := start(ctx, c, sp)
	if err != nil {
		st.emit(c, "failed", err.Error())
		return err
	}
	if sb.ImageNote != "" {
		st.emit(c, "image", sb.ImageNote)
	}
	addr := sb.Endpoints[strconv.Itoa(c.Port)]
	st.mu.Lock()
	st.records[c.Name] = rec
	if c.Role == agentenv.RoleServiceDB {
		st.serviceDB = rec
	}
	st.mu.Unlock()
	st.emit(c, "created", addr)
	if sb.State == agentenv.SandboxExited {
		err := fmt.Errorf("%w: exit code %d%s", errExited, sb.ExitCode, st.logs(ctx, rec))
		st.emit(c, "failed", err.Error())
		return err
	}
	if c.Private {
		if c.Role == agentenv.RoleWebsite {
			return nil // readied through the gateway once it is up (website.go)
		}
		// Not reachable from here: the gateway waits for it as a backend (its connect
		// timeout) and fails its own readiness, with its logs, if it never answers.
		st.emit(c, "ready", "private: behind the gateway")
		return nil
	}
	if addr == "" {
		return fmt.Errorf("port %d not published", c.Port)
	}
	st.mu.Lock()
	st.endpoints[c.Name] = addr
	st.mu.Unlock()

	timeout := c.ReadyTimeout
	if timeout <= 0 {
		timeout = spec.DefaultReadyTimeout
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if rec != "" {
		// A component that exits will never be ready: fail at once, not at the deadline.
		rctx = st.watch(rctx, rec)
	}
	if err := st.d.ready(st, rctx, c, addr); err != nil {
		if cause := context.Cause(rctx); errors.Is(cause, errExited) {
			err = cause
		}
		if ctx.Err() == nil && rctx.Err() != nil {
			err = fmt.Errorf("not ready within %s: %w", timeout, err)
		}
		if c.Role == agentenv.RoleGateway || errors.Is(err, errExited) {
			err = fmt.Errorf("%w%s", err, st.logs(ctx, rec))
		}
		st.emit(c, "failed", err.Error())
		return err
	}
	st.emit(c, "ready", "")
	return nil
}

// binary returns the agentenv binary to copy into stdio servers as the bridge: static, since
// the server's image may have no libc.
func (st *stack) binary() ([]byte, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.bin != nil {
		return st.bin, nil
	}
	path := st.opts.BridgeBinary
	if path == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("stdio bridge: %w", err)
		}
		path = exe
	}
	if err := staticbin.Check(path); err != nil {
		return nil, fmt.Errorf("stdio bridge: %w (build agentenv with CGO_ENABLED=0 to run stdio servers)", err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("stdio bridge: %w", err)
	}
	st.bin = b
	return b, nil
}

// probe lists the gateway's tools and compares them with what each server listed. It is bounded
// and never fails the deploy, except by the caller's cancellation.
func (st *stack) probe(ctx context.Context) error {
	if !st.env.Gateway.On() {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	gw := st.endpoints["gateway"]
	tools, err := listTools(pctx, baseURL(gw)+"/mcp", st.token)
	if ctx.Err() != nil {
		return fmt.Errorf("tools probe: %w", context.Cause(ctx))
	}
	c := spec.Component{Name: "gateway", Role: agentenv.RoleGateway}
	if err != nil {
		st.d.log.Warn("tools probe failed", "deployment", st.doc.ID, "err", err)
		st.emit(c, "probe", "failed: "+err.Error())
		return nil
	}
	want := 0
	for _, ts := range st.tools {
		want += len(ts)
	}
	st.mu.Lock()
	st.gatewayTools = len(tools)
	st.mu.Unlock()
	detail := fmt.Sprintf("%d tools from %d servers", len(tools), len(st.env.Servers))
	// Servers are private unless exposed, and db-mcp always is: their tools are known only
	// through the gateway. When every server was listed from here, the gateway lists at least
	// their tools (exactly them without db-mcp).
	dbmcp := st.env.ServiceDB != nil && st.env.ServiceDB.DBMCP.Enabled
	if len(st.tools) == len(st.env.Servers) && len(tools) != want && (!dbmcp || len(tools) < want) {
		detail += fmt.Sprintf(" (the servers list %d)", want)
		st.d.log.Warn("gateway tools differ from the servers'", "deployment", st.doc.ID, "gateway", len(tools), "servers", want)
	}
	st.emit(c, "probe", detail)
	return nil
}

// finish hands the deployment to its TTL and records it live.
func (st *stack) finish(ctx context.Context, mode string) (*Result, error) {
	recs, err := st.d.mgr.Ledger().List(ctx, agentenv.Filter{Deployment: st.doc.ID, States: []agentenv.State{agentenv.StateLive}})
	if err != nil {
		return nil, fmt.Errorf("list records: %w", err)
	}
	ids := make([]string, len(recs))
	for i, r := range recs {
		ids[i] = r.ID
	}
	doc := st.doc
	doc.State, doc.Winner, doc.Mode = agentenv.DeploymentLive, st.member, mode
	if !st.opts.Own {
		doc.Expires = time.Now().UTC().Add(st.opts.TTL).Truncate(time.Second)
		doc.Owner = agentenv.Owner{}
	}
	doc.GatewayURL = ""
	if st.env.Gateway.On() {
		doc.GatewayURL = baseURL(st.endpoints["gateway"]) + "/mcp"
	}
	doc.TokenHash = TokenHash(st.token)
	doc.TokenHashes = map[string]string{}
	for role, tok := range st.tokens {
		doc.TokenHashes[role] = TokenHash(tok)
	}
	doc.URLs = map[string]string{}
	for name, addr := range st.endpoints {
		if name != "servicedb" { // its URL carries a password; Result.DatabaseURL has the verifier's
			doc.URLs[name] = baseURL(addr)
		}
	}
	st.websiteURLs(doc.URLs)
	st.browserURLs(doc.URLs)
	for _, srv := range st.env.Servers {
		doc.Servers = append(doc.Servers, srv.Name)
		if srv.URL != "" {
			doc.URLs[srv.Name] = srv.URL
		}
	}
	for _, ts := range st.tools {
		doc.Tools += len(ts)
	}
	if st.gatewayTools > 0 {
		doc.Tools = st.gatewayTools // what a caller of the gateway sees, private servers' included
	}
	sort.Strings(doc.Servers)
	doc.Updated = time.Now().UTC()
	if err := st.d.mgr.Ledger().Deployments().Put(ctx, doc); err != nil {
		return nil, fmt.Errorf("record deployment: %w", err)
	}
	// The records pass to the TTL only once the document says live: a process killed between
	// the two leaves records it still owns, which gc collects, never records no one owns under
	// a document still deploying, which it would keep until their TTL.
	if !st.opts.Own {
		if err := st.d.mgr.Release(ctx, doc.Expires, ids...); err != nil {
			return nil, err
		}
	}
	return &Result{Doc: doc, Token: st.token, Tokens: maps.Clone(st.tokens), GatewayURL: doc.GatewayURL, DatabaseURL: st.dbURL, Endpoints: st.endpoints, Records: ids}, nil
}

// undo tears down everything this attempt created, on a detached bounded context: every record
// of the deployment, the components it added to a caller's VM among them (never the caller's
// VM, which is not one of them).
func (st *stack) undo(ctx context.Context) {
	cctx, cancel := cleanup.Context(ctx, undoTimeout)
	defer cancel()
	recs, err := st.d.mgr.Ledger().List(cctx, agentenv.Filter{Deployment: st.doc.ID})
	if err != nil {
		st.d.log.Warn("list records to undo a failed deploy; gc will find them by label", "deployment", st.doc.ID, "err", err)
		return
	}
	var mine []agentenv.Record
	for _, r := range recs {
		if r.State != agentenv.StateGone {
			mine = append(mine, r)
		}
	}
	if _, err := st.d.mgr.Teardown(ctx, mine); err != nil {
		st.d.log.Warn("undo a failed deploy", "deployment", st.doc.ID, "err", err)
	}
}

// baseURL makes an endpoint a URL: a provider gives host:port (a published port) or a whole URL
// (a cloud's tunnel, such as https://8080-ID.e2b.app).
func baseURL(endpoint string) string {
	if strings.Contains(endpoint, "://") {
		return strings.TrimSuffix(endpoint, "/")
	}
	return "http://" + endpoint
}

func allReady(after []string, ready map[string]bool) bool {
	for _, a := range after {
		if !ready[a] {
			return false
		}
	}
	return true
}

func names(cs []spec.Component) []string {
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}
