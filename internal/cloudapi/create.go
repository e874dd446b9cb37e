package cloudapi

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"golang.org/x/time/rate"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/ctxerr"
)

// Gate holds creates to a cloud's rate limit and to a number in flight. It is safe for
// concurrent use.
type Gate struct {
	limiter *rate.Limiter
	slots   chan struct{}
}

// NewGate returns a Gate letting perSecond creates start each second (a burst of the whole
// part, at least 1) and concurrency run at once; both must be positive.
func NewGate(perSecond float64, concurrency int) *Gate {
	return &Gate{
		limiter: rate.NewLimiter(rate.Limit(perSecond), max(1, int(perSecond))),
		slots:   make(chan struct{}, concurrency),
	}
}

// Enter waits for the rate limit and then for a free slot; leave frees the slot and must be
// called once the create is over. Cancelled while waiting, it returns an error saying which
// wait it was cut from, wrapping the context's error.
func (g *Gate) Enter(ctx context.Context) (leave func(), err error) {
	if err := g.limiter.Wait(ctx); err != nil {
		return nil, fmt.Errorf("rate limit: %w", ctxerr.Prefer(ctx, err))
	}
	select {
	case g.slots <- struct{}{}:
		return func() { <-g.slots }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for a create slot: %w", ctx.Err())
	}
}

// Creates is how a cloud provider starts each create, made once in New.
type Creates struct {
	Prefix string // the provider's package name, which starts the errors ("e2b")
	Gate   *Gate
	// Check fails when the credential is missing (see [Client.CheckKey]); nil for a cloud with
	// none.
	Check   func() error
	Timeout time.Duration // Config.CreateTimeout: the bound on the request and the wait after it
}

// Begin starts a create of record: it fails if ctx has ended or Check does, then enters the
// Gate. It returns the create's own context, detached from ctx ([cleanup.Detached]) and bounded
// by Timeout, on which the request and the wait until the sandbox runs go, so that the create
// learns what the cloud made even when ctx ends; and end, which cancels that context and leaves
// the gate, to be called once the create is over. An error of ctx or of the gate is "PREFIX:
// create RECORD: ..."; Check's is returned as it is (it names what to set).
func (c Creates) Begin(ctx context.Context, record string) (cctx context.Context, end func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, fmt.Errorf("%s: create %s: %w", c.Prefix, record, err)
	}
	if c.Check != nil {
		if err := c.Check(); err != nil {
			return nil, nil, err
		}
	}
	leave, err := c.Gate.Enter(ctx)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: create %s: %w", c.Prefix, record, err)
	}
	cctx, cancel := cleanup.Detached(ctx, c.Timeout)
	return cctx, func() { cancel(); leave() }, nil
}

// Backstop is the lifetime a cloud sandbox is created with, so that one nobody tears down
// still ends.
type Backstop struct {
	Default time.Duration // when a spec has neither Timeout nor Expires
	Margin  time.Duration // added to a spec's time to Expires
	Max     time.Duration // the longest the cloud allows
}

// Seconds is spec's backstop in whole seconds, never zero: spec.Timeout, else the time to
// spec.Expires plus Margin, else Default; rounded, plus one second, at most Max.
func (b Backstop) Seconds(spec agentenv.SandboxSpec) int64 {
	t := spec.Timeout
	if t <= 0 && !spec.Expires.IsZero() {
		t = time.Until(spec.Expires) + b.Margin
	}
	if t <= 0 {
		t = b.Default
	}
	t = min(t.Round(time.Second)+time.Second, b.Max)
	return max(1, int64(t/time.Second))
}

// Releaser ends the sandbox of a create that will not be used: one that failed after the cloud
// made it, was cancelled, or whose answer was lost. Each call runs on a detached context
// bounded by Timeout (see [cleanup.Context]); a failure is logged naming the sandbox and gc,
// which finds it by its record label, and not returned: the create's own error is what counts.
type Releaser struct {
	Provider agentenv.Provider // its Terminate and List (by agentenv.LabelRecord)
	Log      *slog.Logger
	Timeout  time.Duration
}

// Release terminates sandbox id, made for record.
func (r Releaser) Release(ctx context.Context, id, record string) {
	cctx, cancel := cleanup.Context(ctx, r.Timeout)
	defer cancel()
	if err := r.Provider.Terminate(cctx, id); err != nil {
		r.Log.Warn("sandbox was not terminated after a failed or cancelled create; it runs until gc removes it (or its backstop lifetime ends, where the cloud has one)",
			"sandbox_id", id, "record_id", record, "err", err)
	}
}

// Record terminates whatever runs under record, after a create whose outcome is unknown.
func (r Releaser) Record(ctx context.Context, record string) {
	cctx, cancel := cleanup.Context(ctx, r.Timeout)
	defer cancel()
	sbs, err := r.Provider.List(cctx, map[string]string{agentenv.LabelRecord: record})
	if err != nil {
		r.Log.Warn("list after a failed create; gc will find the sandbox by its record label", "record_id", record, "err", err)
		return
	}
	for _, sb := range sbs {
		r.Release(ctx, sb.ID, record)
	}
}

// MaxPages bounds a listing, so that a server handing out next tokens forever cannot hold it.
const MaxPages = 1000

// Pages calls page with the token of each page in turn (the first is ""), until page returns an
// empty next token or an error. Past MaxPages it fails with ErrUnavailable.
func Pages(page func(token string) (next string, err error)) error {
	token := ""
	for range MaxPages {
		next, err := page(token)
		if err != nil || next == "" {
			return err
		}
		token = next
	}
	return fmt.Errorf("more than %d pages: %w", MaxPages, agentenv.ErrUnavailable)
}
