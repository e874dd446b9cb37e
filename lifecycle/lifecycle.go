// Package lifecycle implements the ledger-first rules of DESIGN.md §3 once, for every provider:
// intent before create, labels that carry the record, create-or-reclaim, teardown by id with a
// verified receipt, owner leases, and gc. Providers only create, list and terminate; everything
// that makes a sandbox impossible to forget lives here.
package lifecycle

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
)

// Defaults for the zero values of Config.
const (
	DefaultLease            = 60 * time.Second
	DefaultReclaimWait      = 30 * time.Second
	DefaultCreateTimeout    = 5 * time.Minute
	DefaultTerminateTimeout = 60 * time.Second
	DefaultTTL              = 3 * time.Hour
)

// Config configures a Manager. Zero durations mean the defaults above.
type Config struct {
	Ledger    agentenv.Ledger
	Providers map[string]agentenv.Provider // by name; every name a record may carry
	Owner     agentenv.Owner               // this process; CurrentOwner() if zero

	Lease            time.Duration // how long an owner's claim lasts without renewal
	ReclaimWait      time.Duration // how long a cancelled create may still finish
	CreateTimeout    time.Duration // bound on one provider create call
	TerminateTimeout time.Duration // bound on one provider terminate call
	Logger           *slog.Logger
	Now              func() time.Time // for tests; time.Now if nil
}

// Manager applies the lifecycle rules. It is safe for concurrent use.
type Manager struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	pending map[string]*pendingCreate // creates still running after their caller gave up
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
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg.Ledger = guardedLedger{cfg.Ledger}
	return &Manager{cfg: cfg, log: log, pending: make(map[string]*pendingCreate)}, nil
}

// Ledger returns the ledger the manager writes.
func (m *Manager) Ledger() agentenv.Ledger { return m.cfg.Ledger.(guardedLedger).Ledger }

// Owner returns the owner the manager writes on records it creates.
func (m *Manager) Owner() agentenv.Owner { return m.cfg.Owner }

// Provider returns the provider configured under name.
func (m *Manager) Provider(name string) (agentenv.Provider, error) {
	p, ok := m.cfg.Providers[name]
	if !ok {
		return nil, fmt.Errorf("provider %q is not configured: %w", name, agentenv.ErrInvalid)
	}
	return p, nil
}

// guardedProvider returns the provider under name with panics turned into errors.
func (m *Manager) guardedProvider(name string) (guarded, error) {
	p, err := m.Provider(name)
	if err != nil {
		return guarded{}, err
	}
	return guarded{p}, nil
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

// KeepAlive renews the manager's owner lease until ctx ends, so that gc on another host leaves
// this process's records alone. It returns at once; renewal runs in the background.
func (m *Manager) KeepAlive(ctx context.Context) {
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

// Close logs every create that is still pending after its caller gave up: the process is about
// to exit and cannot clean up after it, so the warning names what gc will have to find.
func (m *Manager) Close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for id, p := range m.pending {
		m.log.Warn("exiting with a create still pending; gc will remove what it makes",
			"record_id", id, "provider", p.provider, "image", p.image, "where", p.where, "gc", "agentenv gc")
	}
}
