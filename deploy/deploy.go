// Package deploy turns an env file into running sandboxes behind one MCP gateway, and back into
// nothing (ARCHITECTURE.md, "Deploying an env"): container mode (one sandbox per component on a
// private network, each recorded the moment it is created) or VM mode (one VM record owning the
// whole stack); readiness that means the real thing answers; every wait drawn from one deploy budget;
// and on any failure or cancellation, teardown of exactly what this attempt created, never a
// caller's sandbox or an earlier deployment's.
package deploy

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/spec"
)

// Modes.
const (
	ModeContainer = "container"
	ModeVM        = "vm"
)

// DefaultBudget bounds a whole deploy, every wait included but the wait for admission: it
// counts from the first admission (lifecycle.Manager.Admit).
const DefaultBudget = 5 * time.Minute

// Deployer deploys envs through a lifecycle manager. It is safe for concurrent use.
type Deployer struct {
	mgr *lifecycle.Manager
	log *slog.Logger
	// ready waits until a started component answers as its role requires: (*stack).ready,
	// which unit tests on the in-memory provider replace, since nothing answers MCP there.
	ready func(st *stack, ctx context.Context, c spec.Component, addr string) error
}

// New returns a Deployer; a nil logger discards.
func New(mgr *lifecycle.Manager, logger *slog.Logger) *Deployer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Deployer{mgr: mgr, log: logger, ready: (*stack).ready}
}

// Options tune one deploy.
type Options struct {
	Provider string        // provider or comma chain; required
	Mode     string        // container, vm, or "" to pick by the provider's capabilities
	TTL      time.Duration // lifetime after the deploying process lets go; lifecycle.DefaultTTL if 0
	Name     string        // deployment id; drawn once for all chain members if empty
	Run      string        // run id the sandboxes belong to, if any
	Into     string        // VM mode: an existing VM record to deploy into (never torn down by us)
	Budget   time.Duration // wall-clock bound on the deploy from its admission; DefaultBudget if 0
	Own      bool          // records stay owned by this process (a run tears them down itself) instead of passing to the TTL
	// PassEnv lists the variables of this process's environment that the env file's env:NAME
	// references may read; every other reference is refused before anything is created.
	PassEnv []string
	// GatewayMaxConns and GatewayMaxSessions, when positive, cap the gateway's connections and
	// MCP sessions over the env file's gateway.max_conns and max_sessions (the operator's
	// config keys gateway.max_conns and gateway.max_sessions).
	GatewayMaxConns, GatewayMaxSessions int
	Progress                            func(Event) // called as components are created, started and ready; may be nil
	// Store, if set, is the state store the service DB is a database of (store.go), where the
	// attempt's sandboxes can reach it; nil gives each deployment a service DB container.
	Store *Store
	// BridgeBinary is the static agentenv binary copied into stdio servers to run the bridge;
	// this executable if empty.
	BridgeBinary string
	// Pinned maps an image as the env names it to the same image pinned by digest in a
	// registry (host/repo@sha256:HEX: a bundle pushed with its images): each component of that
	// image is created with SandboxSpec.Pinned, which providers that can pull run from there,
	// and how it came is a progress event of phase "image".
	Pinned map[string]string
	// Logins gives the login that pulls a pinned image (SandboxSpec.PullAuth); nil pulls
	// anonymously.
	Logins agentenv.Logins
}

// Event is one progress report.
type Event struct {
	Component string        `json:"component"`
	Role      agentenv.Role `json:"role"`
	Phase     string        `json:"phase"` // created, ready, failed, probe, warning, image (how a pinned image came: pulled, or uploaded and why)
	Elapsed   time.Duration `json:"elapsed"`
	Detail    string        `json:"detail,omitempty"`
}

// String formats e as a progress line.
func (e Event) String() string {
	s := fmt.Sprintf("%-10s %-12s %-8s %6s", e.Component, e.Role, e.Phase, e.Elapsed.Round(time.Millisecond))
	if e.Detail != "" {
		s += "  " + e.Detail
	}
	return s
}

// Result is a live deployment.
type Result struct {
	Doc   agentenv.Deployment
	Token string // the gateway's admin bearer token; never written to the ledger
	// Tokens maps each role of the env (gateway.roles and the default role) to its role-bound
	// bearer token: the gateway fixes the role of a request bearing one and lets it use /mcp
	// and /step only. Never written to the ledger (only their hashes are).
	Tokens      map[string]string
	GatewayURL  string            // the MCP endpoint, http://127.0.0.1:PORT/mcp
	DatabaseURL string            // the service DB from this host as the read-only verifier role, if any
	Endpoints   map[string]string // component name -> host address of its main port
	Records     []string          // record ids owned by the deployment
	// Queued is how long the deploy waited for admission; Ready how long it took from
	// admission until the gateway listed every tool.
	Queued, Ready time.Duration
}

// Deploy deploys env and returns once its gateway serves the card and lists every tool. On
// failure or cancellation everything this deploy created has been torn down (and the deployment
// document says failed) before Deploy returns; a deploy that finished in the instant its caller
// cancelled is undone too, so a cancelled Deploy never returns a deployment.
func (d *Deployer) Deploy(ctx context.Context, env *spec.Env, opts Options) (*Result, error) {
	if opts.Budget <= 0 {
		opts.Budget = DefaultBudget
	}
	if opts.TTL <= 0 {
		opts.TTL = lifecycle.DefaultTTL
	}
	if opts.GatewayMaxConns > 0 || opts.GatewayMaxSessions > 0 {
		e := *env // the caller's env stays as it was loaded
		if opts.GatewayMaxConns > 0 {
			e.Gateway.MaxConns = opts.GatewayMaxConns
		}
		if opts.GatewayMaxSessions > 0 {
			e.Gateway.MaxSessions = opts.GatewayMaxSessions
		}
		env = &e
	}
	members, err := d.mgr.ParseChain(opts.Provider)
	if err != nil {
		return nil, err
	}
	if opts.Into != "" && len(members) > 1 {
		return nil, fmt.Errorf("deploy --into takes one provider, not a chain: %w", agentenv.ErrInvalid)
	}
	id := opts.Name
	if id == "" {
		id = lifecycle.NewID("dep")
	}
	if _, err := d.mgr.Ledger().Deployments().Get(ctx, id); err == nil {
		return nil, fmt.Errorf("deployment %s exists already: %w", id, agentenv.ErrConflict)
	}
	now := time.Now().UTC()
	doc := agentenv.Deployment{
		ID: id, Env: env.Name, EnvFile: env.File, EnvDigest: env.Digest(), Provider: opts.Provider,
		State: agentenv.DeploymentDeploying, Run: opts.Run, Owner: d.mgr.Owner(), Created: now, Expires: now.Add(opts.TTL).Truncate(time.Second), Updated: now,
		VM: opts.Into,
	}
	if err := d.mgr.Ledger().Deployments().Put(ctx, doc); err != nil {
		return nil, fmt.Errorf("deploy %s: record deployment: %w", env.Name, err)
	}
	var errs []error
	var deadline time.Time // the budget's end, set at the first admission
	for i, member := range members {
		if i > 0 {
			d.log.Warn("deploy failed on a chain member; trying the next", "deployment", id, "failed", members[i-1], "next", member, "err", errs[len(errs)-1])
		}
		res, err := d.admitted(ctx, env, member, doc, opts, &deadline)
		if err == nil && ctx.Err() == nil {
			return res, nil
		}
		if err == nil {
			// Cancelled as its last step finished: the caller no longer wants it.
			cctx, cancel := cleanup.Context(ctx, undoTimeout)
			rc, terr := d.Teardown(cctx, res.Doc.ID)
			cancel()
			if terr != nil || !rc.Clean() {
				d.log.Warn("undo of a deploy finished as it was cancelled", "deployment", id, "clean", rc.Clean(), "err", terr)
			}
			return nil, fmt.Errorf("deploy %s: %w", env.Name, context.Cause(ctx))
		}
		errs = append(errs, fmt.Errorf("%s: %w", member, err))
		if ctx.Err() != nil {
			break
		}
	}
	err = errors.Join(errs...)
	if ctx.Err() != nil {
		err = fmt.Errorf("deploy %s: %w (%w)", env.Name, context.Cause(ctx), err)
	} else {
		err = fmt.Errorf("deploy %s: %w", env.Name, err)
	}
	doc.State, doc.Error, doc.Updated = agentenv.DeploymentFailed, err.Error(), time.Now().UTC()
	d.putDoc(ctx, doc)
	return nil, err
}

// admitted waits for a slot of member's admission (lifecycle.Manager.Admit), then makes one
// attempt on it. The deploy budget counts from the first admission, not from the queue: the
// first call sets *deadline, later chain members share it. The slot is let go when the attempt
// has returned (its undo included), so a deploy holds at most one at a time.
func (d *Deployer) admitted(ctx context.Context, env *spec.Env, member string, doc agentenv.Deployment, opts Options, deadline *time.Time) (*Result, error) {
	actx, release, adm, err := d.mgr.Admit(ctx, member)
	if err != nil {
		return nil, err
	}
	defer release()
	began := time.Now()
	if deadline.IsZero() {
		*deadline = began.Add(opts.Budget)
	}
	if adm.Slots > 0 && opts.Progress != nil {
		opts.Progress(Event{Component: "admission", Phase: "admitted", Elapsed: adm.Waited, Detail: adm.String()})
	}
	bctx, cancel := context.WithDeadline(actx, *deadline)
	defer cancel()
	res, err := d.attempt(bctx, env, member, doc, opts)
	if err != nil {
		return nil, err
	}
	res.Queued, res.Ready = adm.Waited, time.Since(began)
	return res, nil
}

// attempt deploys env on one provider. Whatever it fails with, it first tears down every
// record it created (the deployment's records: earlier attempts have already torn theirs down).
func (d *Deployer) attempt(ctx context.Context, env *spec.Env, member string, doc agentenv.Deployment, opts Options) (res *Result, err error) {
	containers, err := d.mgr.Supports(member, agentenv.AbilityNetworks)
	if err != nil {
		return nil, err
	}
	vms, _ := d.mgr.Supports(member, agentenv.AbilityVMs)
	mode := opts.Mode
	switch {
	case mode == "" && containers && opts.Into == "":
		mode = ModeContainer
	case mode == "":
		mode = ModeVM
	case mode != ModeContainer && mode != ModeVM:
		return nil, fmt.Errorf("mode %q: want container or vm: %w", mode, agentenv.ErrInvalid)
	}
	if mode == ModeContainer && !containers || mode == ModeVM && !vms {
		return nil, fmt.Errorf("provider %s does not support %s mode: %w", member, mode, agentenv.ErrInvalid)
	}
	token, err := newToken()
	if err != nil {
		return nil, err
	}
	tokens := map[string]string{}
	for _, role := range env.TokenRoles() {
		if tokens[role], err = newToken(); err != nil {
			return nil, err
		}
	}
	st := &stack{
		d: d, env: env, member: member, doc: doc, opts: opts, token: token, tokens: tokens, start: time.Now(),
		endpoints: map[string]string{}, private: map[string]string{}, records: map[string]string{}, tools: map[string][]string{},
	}
	defer func() {
		if err != nil {
			st.undo(ctx)
		}
	}()
	if err := st.fromSnapshot(ctx, mode); err != nil {
		return nil, err
	}
	if mode == ModeContainer {
		err = st.upContainers(ctx)
	} else {
		err = st.upVM(ctx)
	}
	if err != nil {
		return nil, err
	}
	if err = st.websites(ctx); err != nil {
		return nil, err
	}
	if err = st.browserScreen(ctx); err != nil {
		return nil, err
	}
	if err := st.probe(ctx); err != nil {
		return nil, err
	}
	return st.finish(ctx, mode)
}

// Teardown tears down every sandbox of deployment id and records the receipt.
func (d *Deployer) Teardown(ctx context.Context, id string) (agentenv.Receipt, error) {
	doc, err := d.mgr.Ledger().Deployments().Get(ctx, id)
	if err != nil {
		return agentenv.Receipt{}, fmt.Errorf("teardown %s: %w", id, err)
	}
	recs, err := d.mgr.Ledger().List(ctx, agentenv.Filter{Deployment: id})
	if err != nil {
		return agentenv.Receipt{}, fmt.Errorf("teardown %s: %w", id, err)
	}
	var up []agentenv.Record
	for _, r := range recs {
		if r.State != agentenv.StateGone { // gone records are history (a failed chain member's)
			up = append(up, r)
		}
	}
	// A deployment into a caller's VM removes the components it started there, and only them:
	// each has an in_vm record, torn down with the others; a name without one (a deployment
	// recorded before those records) is removed by name.
	var vmErrs []error
	recorded := map[string]bool{}
	for _, r := range recs {
		recorded[r.ID] = true
	}
	if doc.VM != "" && doc.State != agentenv.DeploymentTornDown {
		for _, name := range doc.InVM {
			if recorded[agentenv.InVMRecordID(doc.VM, name)] {
				continue
			}
			if err := d.mgr.RemoveFromVM(ctx, doc.VM, name); err != nil && !errors.Is(err, agentenv.ErrNotFound) && !errors.Is(err, agentenv.ErrGone) {
				vmErrs = append(vmErrs, fmt.Errorf("remove %s from vm %s: %w", name, doc.VM, err))
			}
		}
	}
	rc, terr := d.mgr.Teardown(ctx, up)
	if len(vmErrs) > 0 {
		terr = errors.Join(append(vmErrs, terr)...)
	}
	doc.Receipt = &rc
	if rc.Clean() && len(vmErrs) == 0 {
		doc.State = agentenv.DeploymentTornDown
	}
	doc.Updated = time.Now().UTC()
	d.putDoc(ctx, doc)
	return rc, terr
}

// undoTimeout bounds the undo of a deploy that finished as it was cancelled.
const undoTimeout = 2 * time.Minute

func (d *Deployer) putDoc(ctx context.Context, doc agentenv.Deployment) {
	cctx, cancel := cleanup.Context(ctx, 10*time.Second)
	defer cancel()
	if err := d.mgr.Ledger().Deployments().Put(cctx, doc); err != nil {
		d.log.Warn("ledger: write deployment", "deployment", doc.ID, "err", err)
	}
}

func newToken() (string, error) {
	var b [24]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("token: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// TokenHash is what the ledger keeps of a token.
func TokenHash(token string) string {
	h := sha256.Sum256([]byte(token))
	return "sha256:" + hex.EncodeToString(h[:])
}
