package lifecycle

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
)

// CreateRequest says what to create and under which record.
type CreateRequest struct {
	Provider   string        // the provider name; see CreateChain for a chain
	Kind       agentenv.Kind // sandbox (default), vm, network, volume, or image: Spec.Image with Spec.Files added
	ID         string        // record id; NewID("sb") if empty. A given id is claimed: taken by a record not gone, Create fails with ErrConflict
	Spec       agentenv.SandboxSpec
	Run        string
	Deployment string
	Role       agentenv.Role
	TTL        time.Duration // lifetime until gc may remove it; DefaultTTL if zero
	Attrs      map[string]string
	// Build, for an image (Kind image), builds it from a Dockerfile instead of Spec.Image with
	// Spec.Files: passed to the provider's CreateImage as ImageSpec.Build.
	Build *agentenv.Build
	// BuildTimeout bounds, for a sandbox whose Spec.Build its provider builds in its VM
	// (Capabilities.BuildInVM), the build (DefaultBuildTimeout if zero): that create is bounded
	// by the configured CreateTimeout plus it.
	BuildTimeout time.Duration

	labels  map[string]string // agentenv.* labels of the manager's own (BuildImage's digest)
	timeout time.Duration     // bound on the provider call; the configured CreateTimeout if zero
}

// pendingCreate is a provider create running on a detached context. The caller waiting for it
// may give up (abandon); whichever of the two sides sees the other finish first cleans up.
type pendingCreate struct {
	provider, image string
	where           string // the provider's Location, if it has one

	mu        sync.Mutex
	finished  bool
	abandoned bool
	sb        agentenv.Sandbox
	err       error
	done      chan struct{}
}

// Create writes an intent record, then calls the provider on a detached, bounded context. If
// the call succeeds the record becomes live. If it fails, whatever the provider still lists under
// the record is terminated and the record ends gone. If ctx is cancelled first, the create may
// still finish for up to ReclaimWait (less if ctx's hard stop fires), and what it made is then
// terminated; past that, the record is left abandoned for gc, and if the create finishes later in
// this process its sandbox is terminated then. A sandbox or VM created outside a slot (ctx not
// from Admit) first waits for one, before its record is written, and holds it for the call.
func (m *Manager) Create(ctx context.Context, req CreateRequest) (agentenv.Record, agentenv.Sandbox, error) {
	if b := m.backends[req.Provider]; b != nil && req.Spec.User != "" && !b.p.Capabilities().User {
		// Before any record: a provider that would run the sandbox as the image's user instead.
		return agentenv.Record{}, agentenv.Sandbox{}, fmt.Errorf("create: user %q: provider %s cannot run a sandbox as a given user: %w", req.Spec.User, req.Provider, agentenv.ErrInvalid)
	}
	if req.Spec.Build != nil {
		// Before any record: only a provider that builds in a bare sandbox's own VM takes one.
		var err error
		if req, err = m.buildInVM(req); err != nil {
			return agentenv.Record{}, agentenv.Sandbox{}, fmt.Errorf("create: %w", err)
		}
	}
	if req.Kind != agentenv.KindNetwork && req.Kind != agentenv.KindVolume && !Holds(ctx) && m.backends[req.Provider] != nil {
		actx, release, _, err := m.Admit(ctx, req.Provider)
		if err != nil {
			return agentenv.Record{}, agentenv.Sandbox{}, fmt.Errorf("create: %w", err)
		}
		defer release()
		ctx = actx
	}
	rec, err := m.intent(ctx, req)
	if err != nil {
		return agentenv.Record{}, agentenv.Sandbox{}, err
	}
	b, err := m.backend(req.Provider)
	if err != nil {
		m.finish(ctx, rec.ID, agentenv.StateGone, err.Error())
		return rec, agentenv.Sandbox{}, err
	}
	spec := req.Spec
	spec.Name = rec.ID
	spec.Labels = rec.Labels
	spec.Expires = rec.Expires

	pc := &pendingCreate{provider: req.Provider, image: spec.Image, where: b.where, done: make(chan struct{})}
	m.calls.Add(1)
	go m.run(ctx, pc, b, rec, spec, req)

	select {
	case <-pc.done:
		return m.settle(ctx, pc, b, rec)
	case <-ctx.Done():
	}
	// The caller gave up. Let the create finish, bounded, and undo it.
	m.log.Info("create cancelled; waiting for it to finish so it can be undone",
		"record_id", rec.ID, "provider", req.Provider, "image", spec.Image, "wait", m.cfg.ReclaimWait)
	wctx, cancel := cleanup.Context(ctx, m.cfg.ReclaimWait)
	defer cancel()
	select {
	case <-pc.done:
	case <-wctx.Done():
	}
	pc.mu.Lock()
	if !pc.finished {
		pc.abandoned = true
		m.mu.Lock()
		m.pending[rec.ID] = pc
		m.mu.Unlock()
		pc.mu.Unlock()
		m.log.Warn("gave up waiting for a cancelled create; the record stays for gc",
			"record_id", rec.ID, "provider", req.Provider, "image", spec.Image, "where", pc.where)
		m.finish(ctx, rec.ID, agentenv.StateAbandoned, "create still pending when its caller gave up")
		return rec, agentenv.Sandbox{}, fmt.Errorf("create %s: %w", rec.ID, context.Cause(ctx))
	}
	pc.mu.Unlock()
	m.reclaim(ctx, b, rec, pc.sb, pc.err)
	return rec, agentenv.Sandbox{}, fmt.Errorf("create %s: %w", rec.ID, context.Cause(ctx))
}

// buildInVM checks req, whose Spec.Build is set: a bare sandbox on a provider that builds in
// its VM (Capabilities.BuildInVM), with a build timeout of 0 or more. It returns req bounded by
// the configured CreateTimeout plus the build's timeout.
func (m *Manager) buildInVM(req CreateRequest) (CreateRequest, error) {
	b, err := m.backend(req.Provider)
	if err != nil {
		return req, err
	}
	switch {
	case req.Kind != "" && req.Kind != agentenv.KindSandbox:
		return req, fmt.Errorf("a build in the sandbox's vm is for a sandbox, not a %s: %w", req.Kind, agentenv.ErrInvalid)
	case !b.p.Capabilities().BuildInVM:
		return req, fmt.Errorf("provider %s builds no image inside a sandbox's vm: %w", req.Provider, agentenv.ErrInvalid)
	case req.BuildTimeout < 0:
		return req, fmt.Errorf("build timeout %s: want 0 (the default, %s) or more: %w", req.BuildTimeout, DefaultBuildTimeout, agentenv.ErrInvalid)
	}
	if req.timeout == 0 {
		req.timeout = m.cfg.CreateTimeout + cmp.Or(req.BuildTimeout, DefaultBuildTimeout)
	}
	return req, nil
}

// intent validates req and writes the creating record.
func (m *Manager) intent(ctx context.Context, req CreateRequest) (agentenv.Record, error) {
	if err := ctx.Err(); err != nil {
		return agentenv.Record{}, fmt.Errorf("create: %w", err)
	}
	id := req.ID
	if id == "" {
		id = NewID("sb")
	}
	kind := req.Kind
	if kind == "" {
		kind = agentenv.KindSandbox
	}
	ttl := req.TTL
	switch {
	case ttl < 0:
		return agentenv.Record{}, fmt.Errorf("create: ttl %s: want more than 0 (0 for the default, %s): %w", ttl, DefaultTTL, agentenv.ErrInvalid)
	case ttl == 0:
		ttl = DefaultTTL
	}
	if err := req.Spec.Check(); err != nil {
		return agentenv.Record{}, fmt.Errorf("create: %w", err)
	}
	if len(req.Spec.Join) > 0 {
		// A provider that cannot join a second network would start the sandbox cut off from
		// it: refused before the record, like any spec the backend cannot run.
		if b := m.backends[req.Provider]; b != nil && !b.p.Capabilities().Join {
			return agentenv.Record{}, fmt.Errorf("create: provider %s cannot join a sandbox to more than one network: %w", req.Provider, agentenv.ErrInvalid)
		}
	}
	if len(req.Spec.Mounts) > 0 {
		// A sandbox started without the volume it shares would see none of its files.
		if b := m.backends[req.Provider]; b != nil && b.a.Volumer == nil {
			return agentenv.Record{}, fmt.Errorf("create: mounts: provider %s has no volumes to mount (docker has): %w", req.Provider, agentenv.ErrInvalid)
		}
	}
	for k, v := range req.Spec.Labels {
		if err := agentenv.ValidateLabel(k, v); err != nil {
			return agentenv.Record{}, fmt.Errorf("create: %w", err)
		}
	}
	now := m.cfg.Now().UTC()
	expires := now.Add(ttl).Truncate(time.Second)
	labels := maps.Clone(req.Spec.Labels)
	if labels == nil {
		labels = map[string]string{}
	}
	maps.Copy(labels, req.labels)
	labels[agentenv.LabelRecord] = id
	labels[agentenv.LabelRun] = req.Run
	labels[agentenv.LabelDeployment] = req.Deployment
	labels[agentenv.LabelOwner] = m.cfg.Owner.String()
	labels[agentenv.LabelExpires] = expires.Format(time.RFC3339)
	if req.Role != "" {
		labels[agentenv.LabelRole] = string(req.Role)
	}
	rec := agentenv.Record{
		ID: id, Kind: kind, Provider: req.Provider, Image: req.Spec.Image,
		Run: req.Run, Deployment: req.Deployment, Role: req.Role,
		State: agentenv.StateCreating, Owner: m.cfg.Owner, LeaseUntil: now.Add(m.cfg.Lease),
		Expires: expires, Labels: labels, Attrs: maps.Clone(req.Attrs), Created: now,
	}
	if req.timeout > 0 {
		if rec.Attrs == nil {
			rec.Attrs = map[string]string{}
		}
		rec.Attrs[agentenv.AttrCreateTimeout] = req.timeout.String()
	}
	m.keepAlive()
	var err error
	if req.ID != "" {
		err = m.claim(ctx, rec, func(r agentenv.Record) error {
			return fmt.Errorf("create: record %s is taken (%s): %w", r.ID, r.State, agentenv.ErrConflict)
		})
	} else {
		err = m.cfg.Ledger.Put(ctx, rec)
	}
	if errors.Is(err, agentenv.ErrConflict) {
		return agentenv.Record{}, err
	}
	if err != nil {
		return agentenv.Record{}, fmt.Errorf("create: record intent: %w", err)
	}
	return rec, nil
}

// claim writes rec only if no record has its id or the one that has it is gone: an insert, or
// a replace decided inside one atomic update, so that of several claims of one id (a snapshot's
// or a local store's name, a container's name in a VM) exactly one wins. A record not yet gone
// keeps the id, and claim returns taken(that record), which must wrap ErrConflict.
func (m *Manager) claim(ctx context.Context, rec agentenv.Record, taken func(agentenv.Record) error) error {
	err := m.cfg.Ledger.Insert(ctx, rec)
	if errors.Is(err, agentenv.ErrConflict) {
		_, err = m.cfg.Ledger.Update(ctx, rec.ID, func(r *agentenv.Record) error {
			if r.State != agentenv.StateGone {
				return taken(*r)
			}
			*r = rec
			return nil
		})
	}
	return err
}

// run performs the provider call on a detached context and hands the result over, or, if the
// caller has abandoned the create, undoes it itself.
func (m *Manager) run(ctx context.Context, pc *pendingCreate, b *backend, rec agentenv.Record, spec agentenv.SandboxSpec, req CreateRequest) {
	defer m.calls.Done()
	cctx, cancel := cleanup.Detached(ctx, cmp.Or(req.timeout, m.cfg.CreateTimeout))
	defer cancel()
	if req.Build != nil || spec.Build != nil {
		// A build from a Dockerfile stops with its caller rather than run its minutes out: it
		// has no sandbox to hand back that only its answer names, and what a build cut short
		// leaves carries the record's labels (in a VM, is inside it), which the undo below
		// removes.
		defer context.AfterFunc(ctx, cancel)()
	}
	began := time.Now()
	sb, err := callCreate(cctx, b, rec.Kind, spec, req.Build)
	if err == nil && rec.Kind == agentenv.KindSandbox {
		m.observeStart(rec.Provider, time.Since(began))
	}
	pc.mu.Lock()
	pc.finished, pc.sb, pc.err = true, sb, err
	abandoned := pc.abandoned
	pc.mu.Unlock()
	close(pc.done)
	if abandoned {
		m.mu.Lock()
		delete(m.pending, rec.ID)
		m.mu.Unlock()
		m.reclaim(ctx, b, rec, sb, err)
	}
}

// callCreate calls the provider's Create, CreateNetwork, CreateVM, CreateImage (of build, if
// set) or CreateVolume, by kind. A sandbox of a pinned image whose provider says nothing of it
// gets an ImageNote saying that it ran the image as named.
func callCreate(ctx context.Context, b *backend, kind agentenv.Kind, spec agentenv.SandboxSpec, build *agentenv.Build) (agentenv.Sandbox, error) {
	switch kind {
	case agentenv.KindNetwork:
		if b.a.Networker == nil {
			return agentenv.Sandbox{}, fmt.Errorf("%s has no private networks: %w", b.p.Name(), agentenv.ErrInvalid)
		}
		return b.a.Networker.CreateNetwork(ctx, agentenv.NetworkSpec{Name: spec.Name, Labels: spec.Labels, Egress: spec.Egress, Isolated: spec.Isolated})
	case agentenv.KindVM:
		if b.a.VMHost == nil {
			return agentenv.Sandbox{}, fmt.Errorf("%s cannot host VMs: %w", b.p.Name(), agentenv.ErrInvalid)
		}
		return b.a.VMHost.CreateVM(ctx, spec)
	case agentenv.KindImage:
		if b.a.Imager == nil {
			return agentenv.Sandbox{}, fmt.Errorf("%s cannot build images: %w", b.p.Name(), agentenv.ErrInvalid)
		}
		return b.a.Imager.CreateImage(ctx, agentenv.ImageSpec{Name: spec.Name, Base: spec.Image, Files: spec.Files, Labels: spec.Labels, Build: build})
	case agentenv.KindVolume:
		if b.a.Volumer == nil {
			return agentenv.Sandbox{}, fmt.Errorf("%s has no volumes: %w", b.p.Name(), agentenv.ErrInvalid)
		}
		return b.a.Volumer.CreateVolume(ctx, agentenv.VolumeSpec{Name: spec.Name, Labels: spec.Labels})
	}
	sb, err := b.p.Create(ctx, spec)
	if err == nil && spec.Pinned != "" && sb.ImageNote == "" {
		// A provider that pulls nothing by digest (a cloud running images of its own store)
		// ran the image as named: say so, as a pull that failed is said.
		sb.ImageNote = fmt.Sprintf("%s pulls no image by digest: ran %s as named, not %s", b.p.Name(), spec.Image, spec.Pinned)
	}
	return sb, err
}

// settle records the outcome of a create its caller waited for.
func (m *Manager) settle(ctx context.Context, pc *pendingCreate, b *backend, rec agentenv.Record) (agentenv.Record, agentenv.Sandbox, error) {
	if pc.err != nil {
		m.reclaim(ctx, b, rec, agentenv.Sandbox{}, pc.err)
		return rec, agentenv.Sandbox{}, fmt.Errorf("create %s on %s: %w", rec.ID, b.p.Name(), pc.err)
	}
	sb := pc.sb
	upd, err := m.cfg.Ledger.Update(ctx, rec.ID, func(r *agentenv.Record) error {
		r.State = agentenv.StateLive
		r.SandboxID = sb.ID
		if (len(sb.Endpoints) > 0 || sb.Image != "") && r.Attrs == nil {
			r.Attrs = map[string]string{}
		}
		for port, addr := range sb.Endpoints {
			r.Attrs["endpoint."+port] = addr
		}
		if sb.Image != "" {
			r.Attrs[agentenv.AttrImageRef] = sb.Image
		}
		return nil
	})
	if err != nil {
		// A sandbox the ledger cannot name as live must not outlive this call.
		m.reclaim(ctx, b, rec, sb, nil)
		return rec, agentenv.Sandbox{}, fmt.Errorf("create %s: record live: %w", rec.ID, err)
	}
	if ctx.Err() != nil {
		// Cancelled in the instant the create returned: undo it all the same.
		m.reclaim(ctx, b, upd, sb, nil)
		return upd, agentenv.Sandbox{}, fmt.Errorf("create %s: %w", rec.ID, context.Cause(ctx))
	}
	return upd, sb, nil
}

// reclaim undoes a create that will not be used: it terminates what the provider made (the
// returned sandbox, or whatever it lists under the record after a failure) and closes the record.
func (m *Manager) reclaim(ctx context.Context, b *backend, rec agentenv.Record, sb agentenv.Sandbox, createErr error) {
	p := b.p
	cctx, cancel := cleanup.Context(ctx, m.cfg.TerminateTimeout)
	defer cancel()
	ids, err := m.resolve(cctx, p, rec, sb.ID)
	var errs []error
	switch {
	case err != nil && sb.ID == "" && errors.Is(createErr, agentenv.ErrInvalid):
		// Refused up front (Provider.Create's contract: nothing was made), by a backend that
		// cannot be listed either, typically for the same missing credential: nothing to find.
		m.log.Debug("create refused as invalid and the provider cannot list; nothing was made",
			"record_id", rec.ID, "provider", p.Name(), "list_err", err)
	case err != nil:
		errs = append(errs, err)
	}
	for _, id := range ids {
		if err := p.Terminate(cctx, id); err != nil {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		err := errors.Join(errs...)
		m.log.Warn("sandbox was not terminated after a failed or cancelled create; gc will retry",
			"record_id", rec.ID, "provider", p.Name(), "err", err)
		m.finish(ctx, rec.ID, agentenv.StateTerminateFailed, err.Error())
		return
	}
	msg := ""
	if createErr != nil {
		msg = createErr.Error()
	}
	m.finish(ctx, rec.ID, agentenv.StateGone, msg)
}

// resolve returns the provider ids that belong to rec: known, or found by listing the record
// label (a create whose response was lost is still found this way).
func (m *Manager) resolve(ctx context.Context, p agentenv.Provider, rec agentenv.Record, known string) ([]string, error) {
	if known == "" {
		known = rec.SandboxID
	}
	listed, err := p.List(ctx, map[string]string{agentenv.LabelRecord: rec.ID})
	if err != nil {
		if known != "" {
			return []string{known}, nil
		}
		return nil, fmt.Errorf("list %s: %w", rec.ID, err)
	}
	var ids []string
	seen := map[string]bool{}
	for _, sb := range listed {
		if !seen[sb.ID] {
			seen[sb.ID] = true
			ids = append(ids, sb.ID)
		}
	}
	if known != "" && !seen[known] && len(listed) == 0 {
		// Not listed: already gone. Terminate is idempotent, so saying it again is harmless
		// but not needed.
		return nil, nil
	}
	return ids, nil
}

// finish moves a record to state on a detached context, so that a cancelled caller still leaves
// the ledger right.
func (m *Manager) finish(ctx context.Context, id string, state agentenv.State, msg string) {
	cctx, cancel := cleanup.Context(ctx, 10*time.Second)
	defer cancel()
	_, err := m.cfg.Ledger.Update(cctx, id, func(r *agentenv.Record) error {
		r.State = state
		r.Error = truncate(msg, 2000)
		if state == agentenv.StateGone {
			r.LeaseUntil = time.Time{}
		}
		return nil
	})
	if err != nil {
		m.log.Warn("ledger update failed; gc will reconcile by label", "record_id", id, "state", state, "err", err)
	}
}

func truncate(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}
