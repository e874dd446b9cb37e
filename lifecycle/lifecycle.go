// Package lifecycle implements the ledger-first rules (ARCHITECTURE.md, "The lifecycle
// contract") once, for every provider: intent before create, labels that carry the record,
// create-or-reclaim, teardown by id with a verified receipt, owner leases, and gc. Providers
// only create, list and terminate; everything that makes a sandbox impossible to forget lives
// here.
//
// The Manager is the one door to the providers: it alone holds them, and everything deploy,
// task and the CLI do to a backend (create, exec, files, logs, image checks, a VM's stack,
// health, listings) is a Manager method, guarded against panics, bounded by the configured
// timeouts and decorated once. Callers name sandboxes by record id and ask what a provider can
// do with Supports, never by holding or type-asserting it.
package lifecycle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/keylock"
	"github.com/agentenv/agentenv/internal/suggest"
)

// Defaults for the zero values of Config.
const (
	DefaultLease            = 60 * time.Second
	DefaultReclaimWait      = 30 * time.Second
	DefaultCreateTimeout    = 5 * time.Minute
	DefaultTerminateTimeout = 60 * time.Second
	DefaultTTL              = 3 * time.Hour
	DefaultCallTimeout      = 60 * time.Second
	DefaultExecTimeout      = 10 * time.Minute
)

// Admission (admission.go): MaxParallelCreates, Capacity and AdmitWait of Config.

// Config configures a Manager. Zero durations mean the defaults above.
type Config struct {
	Ledger    agentenv.Ledger
	Providers map[string]agentenv.Provider // by name; every name a record may carry
	Owner     agentenv.Owner               // this process; CurrentOwner() if zero

	Lease            time.Duration // how long an owner's claim lasts without renewal
	ReclaimWait      time.Duration // how long a cancelled create may still finish
	CreateTimeout    time.Duration // bound on one provider create call
	TerminateTimeout time.Duration // bound on one provider terminate call
	CallTimeout      time.Duration // bound on one other provider call (get, list, files, logs)
	ExecTimeout      time.Duration // bound on one command run in a sandbox or a VM's stack
	// MaxParallelCreates, if positive, is how many deploys (and creates outside one) each
	// provider admits at once; otherwise a provider with a Capacity is sized from it, and one
	// without is not limited.
	MaxParallelCreates int
	Capacity           map[string]CapacityFunc // by provider name; sizes its admission
	AdmitWait          time.Duration           // bound on a wait for a slot; DefaultAdmitWait if zero
	Logger             *slog.Logger
	Now                func() time.Time // for tests; time.Now if nil
}

// Manager applies the lifecycle rules. It is safe for concurrent use.
type Manager struct {
	cfg      Config
	log      *slog.Logger
	backends map[string]*backend // by provider name

	lease     sync.Once          // starts renewing the owner lease at the first create
	stopLease context.CancelFunc // ends the renewal, at Close

	mu      sync.Mutex
	pending map[string]*pendingCreate // creates still running after their caller gave up
	calls   sync.WaitGroup            // provider creates under way, each with its undoing if abandoned

	adm      sync.Mutex
	limiters map[string]*limiter // by provider name, made at the first admission; nil: no limit

	builds keylock.Set // by provider and build digest: BuildImage builds each once at a time
}

// backend is one configured provider as the manager holds it: decorated once (every call,
// abilities included, guarded against panics), with its abilities read once.
type backend struct {
	p     agentenv.Provider
	a     agentenv.Abilities
	where string // the provider's Location, if it has one
}

// New returns a Manager for cfg.
func New(cfg Config) (*Manager, error) {
	if cfg.Ledger == nil {
		return nil, fmt.Errorf("lifecycle: no ledger: %w", agentenv.ErrInvalid)
	}
	if cfg.Owner.IsZero() {
		o, err := CurrentOwner()
		if err != nil {
			return nil, fmt.Errorf("lifecycle: %w", err)
		}
		cfg.Owner = o
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.Lease, DefaultLease)
	def(&cfg.ReclaimWait, DefaultReclaimWait)
	def(&cfg.CreateTimeout, DefaultCreateTimeout)
	def(&cfg.TerminateTimeout, DefaultTerminateTimeout)
	def(&cfg.CallTimeout, DefaultCallTimeout)
	def(&cfg.ExecTimeout, DefaultExecTimeout)
	def(&cfg.AdmitWait, DefaultAdmitWait)
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Ledger = guardedLedger{cfg.Ledger}
	backends := make(map[string]*backend, len(cfg.Providers))
	for name, p := range cfg.Providers {
		g := guard(p)
		b := &backend{p: g, a: agentenv.AbilitiesOf(g)}
		if b.a.Locator != nil {
			b.where = b.a.Locator.Location()
		}
		backends[name] = b
	}
	return &Manager{cfg: cfg, log: log, backends: backends, stopLease: func() {}, pending: make(map[string]*pendingCreate), limiters: map[string]*limiter{}}, nil
}

// Ledger returns the ledger the manager writes.
func (m *Manager) Ledger() agentenv.Ledger { return m.cfg.Ledger.(guardedLedger).Ledger }

// Owner returns the owner the manager writes on records it creates.
func (m *Manager) Owner() agentenv.Owner { return m.cfg.Owner }

// backend returns the provider configured under name.
func (m *Manager) backend(name string) (*backend, error) {
	b, ok := m.backends[name]
	if !ok {
		names := slices.Sorted(maps.Keys(m.backends))
		return nil, fmt.Errorf("provider %q is not configured%s (configured: %s): %w",
			name, suggest.DidYouMean(name, names), strings.Join(names, ", "), agentenv.ErrInvalid)
	}
	return b, nil
}

// Supports reports whether the provider configured under name has ability x, such as
// agentenv.AbilityVMs for VM mode or agentenv.AbilityExec for commands in its sandboxes. It is
// an error wrapping ErrInvalid if no provider is configured under name.
func (m *Manager) Supports(name string, x agentenv.Ability) (bool, error) {
	b, err := m.backend(name)
	if err != nil {
		return false, err
	}
	return b.a.Has(x), nil
}

// Capabilities returns what the provider called name reports of itself (no I/O).
func (m *Manager) Capabilities(name string) (agentenv.Capabilities, error) {
	b, err := m.backend(name)
	if err != nil {
		return agentenv.Capabilities{}, err
	}
	return b.p.Capabilities(), nil
}

// NewID returns a fresh record id: prefix, a dash and 12 random hex digits. It is a valid
// container, pod and DNS name.
func NewID(prefix string) string {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand never fails on supported platforms
	}
	return prefix + "-" + hex.EncodeToString(b[:])
}

// keepAlive starts renewing the manager's owner lease, once, so that gc on another host leaves
// this process's records alone from its first create until Close.
func (m *Manager) keepAlive() {
	m.lease.Do(func() {
		ctx, cancel := context.WithCancel(context.Background())
		m.mu.Lock()
		m.stopLease = cancel
		m.mu.Unlock()
		go func() {
			t := time.NewTicker(m.cfg.Lease / 3)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if _, err := m.cfg.Ledger.RenewLease(ctx, m.cfg.Owner, m.cfg.Now().Add(m.cfg.Lease)); err != nil && ctx.Err() == nil {
						m.log.Warn("renew lease", "err", err)
					}
				}
			}
		}()
	})
}

// Release hands the records ids from this process to their expiry: they stay live after the
// process exits, and gc removes them once Expires passes. A non-zero until becomes their new
// Expires, so that a lifetime can count from the hand-over rather than from each create (a
// sandbox's expiry label keeps its creation-time value, which callers set no earlier).
func (m *Manager) Release(ctx context.Context, until time.Time, ids ...string) error {
	for _, id := range ids {
		_, err := m.cfg.Ledger.Update(ctx, id, func(r *agentenv.Record) error {
			if r.Owner == m.cfg.Owner {
				r.Owner = agentenv.Owner{}
				r.LeaseUntil = time.Time{}
				if !until.IsZero() {
					r.Expires = until.UTC()
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("release %s: %w", id, err)
		}
	}
	return nil
}

// Drain waits until every provider create and start in a VM this manager began has returned,
// and every one its caller gave up on has been undone, or until ctx ends, whose error it then
// returns. A process that can spare the time calls it before Close, so fewer records are left
// for gc.
func (m *Manager) Drain(ctx context.Context) error {
	if err := cleanup.Wait(ctx, &m.calls); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	return nil
}

// Close stops renewing the owner lease and logs every create that is still pending after its
// caller gave up: the process is about to exit and cannot clean up after it, so the warning
// names what gc will have to find.
func (m *Manager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stopLease()
	for id, p := range m.pending {
		m.log.Warn("exiting with a create still pending; gc will remove what it makes",
			"record_id", id, "provider", p.provider, "image", p.image, "where", p.where, "gc", "agentenv gc")
	}
}
