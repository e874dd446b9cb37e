package lifecycle

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/buildctx"
)

const (
	// DefaultBuildTimeout bounds an image build from a Dockerfile when BuildRequest.Timeout is
	// zero.
	DefaultBuildTimeout = 10 * time.Minute
	// BuildTTL is how long an image built from a Dockerfile lives for the builds of the same
	// context that follow, when BuildRequest.TTL is zero; gc removes it after.
	BuildTTL = 7 * 24 * time.Hour
	// buildReuseMargin: a built image that expires sooner than this is not reused, so that it
	// does not go while the sandboxes of the caller that found it still start from it.
	buildReuseMargin = time.Hour
)

// BuildRequest says what image to build from a Dockerfile, and where.
type BuildRequest struct {
	Provider string
	Build    agentenv.Build
	Timeout  time.Duration // bounds the build; DefaultBuildTimeout if zero
	TTL      time.Duration // how long the cached image lives; BuildTTL if zero
}

// BuildImage returns a live image record built from req.Build on req.Provider, reusing one
// built from the same digest when the ledger has it live; built says whether it built.
//
// The record is an image (Kind image, role agentenv.RoleBuild, id NewID("img")) labelled with
// the build's digest (agentenv.LabelBuildDigest, see buildctx.Digest); image is the reference
// sandboxes of it take (Attrs[agentenv.AttrImageRef]). It is created as Create creates, intent
// first and undone when cancelled, then released to its TTL: no run owns it. One that expires
// within the hour is not reused. Concurrent calls of one digest in this process build once. A
// provider that builds no images from a Dockerfile, and a context that cannot be read, are
// ErrInvalid.
func (m *Manager) BuildImage(ctx context.Context, req BuildRequest) (rec agentenv.Record, image string, built bool, err error) {
	b, err := m.backend(req.Provider)
	if err != nil {
		return agentenv.Record{}, "", false, fmt.Errorf("build image: %w", err)
	}
	if b.a.Imager == nil {
		return agentenv.Record{}, "", false, fmt.Errorf("build image: provider %s builds no images from a Dockerfile: %w", req.Provider, agentenv.ErrInvalid)
	}
	if req.Timeout < 0 || req.TTL < 0 {
		return agentenv.Record{}, "", false, fmt.Errorf("build image: timeout %s, ttl %s: want 0 (the default) or more: %w", req.Timeout, req.TTL, agentenv.ErrInvalid)
	}
	digest, err := buildctx.Digest(req.Build)
	if err != nil {
		return agentenv.Record{}, "", false, fmt.Errorf("build image: %w", err)
	}
	unlock, err := m.builds.LockContext(ctx, req.Provider+"/"+digest)
	if err != nil {
		return agentenv.Record{}, "", false, fmt.Errorf("build image: %w", err)
	}
	defer unlock()
	if rec, ok, err := m.builtImage(ctx, b, req.Provider, digest); err != nil || ok {
		if err != nil {
			return agentenv.Record{}, "", false, fmt.Errorf("build image: %w", err)
		}
		return rec, rec.Attrs[agentenv.AttrImageRef], false, nil
	}
	build := req.Build
	rec, sb, err := m.Create(ctx, CreateRequest{
		Provider: req.Provider, Kind: agentenv.KindImage, ID: NewID("img"), Role: agentenv.RoleBuild,
		TTL: cmp.Or(req.TTL, BuildTTL), Build: &build,
		labels:  map[string]string{agentenv.LabelBuildDigest: digest},
		timeout: cmp.Or(req.Timeout, DefaultBuildTimeout),
	})
	if err != nil {
		return rec, "", false, fmt.Errorf("build image: %w", err)
	}
	if err := m.Release(ctx, rec.Expires, rec.ID); err != nil {
		// Still owned by this process: its lease keeps it, and gc takes it once the lease is gone.
		return rec, "", false, fmt.Errorf("build image: %w", err)
	}
	rec.Owner, rec.LeaseUntil = agentenv.Owner{}, time.Time{}
	return rec, sb.Image, true, nil
}

// builtImage finds a live image record of provider built from digest, with an hour left to
// live and still listed by the provider: of several, the one that lives longest.
func (m *Manager) builtImage(ctx context.Context, b *backend, provider, digest string) (agentenv.Record, bool, error) {
	recs, err := m.BuiltImages(ctx)
	if err != nil {
		return agentenv.Record{}, false, err
	}
	now := m.cfg.Now()
	recs = slices.DeleteFunc(recs, func(r agentenv.Record) bool {
		return r.Provider != provider || r.Labels[agentenv.LabelBuildDigest] != digest ||
			r.Attrs[agentenv.AttrImageRef] == "" || r.Expires.Sub(now) < buildReuseMargin
	})
	slices.SortFunc(recs, func(a, b agentenv.Record) int { return b.Expires.Compare(a.Expires) })
	for _, r := range recs {
		lctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
		listed, err := b.p.List(lctx, map[string]string{agentenv.LabelRecord: r.ID})
		cancel()
		if err != nil {
			return agentenv.Record{}, false, fmt.Errorf("list %s: %w", r.ID, err)
		}
		if len(listed) > 0 {
			return r, true, nil
		}
		m.log.Warn("a built image's record is live but the provider no longer has it; not reused", "record_id", r.ID, "provider", provider)
	}
	return agentenv.Record{}, false, nil
}

// PruneSoon is how close to its expiry a built image must be for PruneBuilds to take it
// without All: it would soon go to gc anyway, and no build reuses it (see buildReuseMargin).
const PruneSoon = 24 * time.Hour

// BuiltImages returns the live image records built from a Dockerfile (role agentenv.RoleBuild),
// of every provider, the newest first: the cache of builds a user sees and prunes.
func (m *Manager) BuiltImages(ctx context.Context) ([]agentenv.Record, error) {
	recs, err := m.cfg.Ledger.List(ctx, agentenv.Filter{States: []agentenv.State{agentenv.StateLive}})
	if err != nil {
		return nil, fmt.Errorf("built images: %w", err)
	}
	recs = slices.DeleteFunc(recs, func(r agentenv.Record) bool {
		return r.Kind != agentenv.KindImage || r.Role != agentenv.RoleBuild
	})
	slices.SortFunc(recs, func(a, b agentenv.Record) int {
		return cmp.Or(b.Created.Compare(a.Created), cmp.Compare(a.ID, b.ID))
	})
	return recs, nil
}

// PruneOptions say which built images PruneBuilds removes.
type PruneOptions struct {
	All    bool // every built image, not only those expiring within PruneSoon
	DryRun bool // select, and tear nothing down
}

// PruneBuilds tears down built images (see BuiltImages) by record and returns what it selected
// and the verified receipt (empty with DryRun). It selects every one with All, else those that
// expire within PruneSoon; never one a live process still owns (a build being handed to its
// TTL). The error is the teardown's, non-nil when the receipt is not clean.
func (m *Manager) PruneBuilds(ctx context.Context, o PruneOptions) ([]agentenv.Record, agentenv.Receipt, error) {
	recs, err := m.BuiltImages(ctx)
	if err != nil {
		return nil, agentenv.Receipt{}, err
	}
	now := m.cfg.Now()
	recs = slices.DeleteFunc(recs, func(r agentenv.Record) bool {
		owned := !r.Owner.IsZero() && r.LeaseUntil.After(now)
		return owned || (!o.All && r.Expires.Sub(now) > PruneSoon)
	})
	if o.DryRun || len(recs) == 0 {
		return recs, agentenv.Receipt{Started: now.UTC(), Finished: now.UTC()}, nil
	}
	rc, err := m.Teardown(ctx, recs)
	if err != nil {
		return recs, rc, fmt.Errorf("prune built images: %w", err)
	}
	return recs, rc, nil
}
