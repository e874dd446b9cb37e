package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Admission defaults, for a provider sized from its Capacity.
const (
	// DefaultAdmitWait bounds how long a deploy or create waits in the queue for a slot.
	DefaultAdmitWait = 30 * time.Minute
	// SlotsPerCPU is how many deploys may start at once per CPU of the backend: a deploy's
	// heavy part (a PostgreSQL initdb, servers starting) takes about half a CPU for seconds.
	SlotsPerCPU = 2
	// MemoryPerSlot is the memory a deploy under way is counted to take.
	MemoryPerSlot = 512 << 20
	// StartTarget is the container start latency (one provider create call) under which the
	// backend counts as keeping up; past it, fewer slots are open in proportion.
	StartTarget = 2 * time.Second
)

// Capacity is what a provider's backend has to run sandboxes on; zero fields are unknown.
type Capacity struct {
	CPUs   int   // CPUs of the engine or host
	Memory int64 // bytes of memory
}

// CapacityFunc reports a backend's capacity. It is called once, at the first admission to the
// provider.
type CapacityFunc func(ctx context.Context) (Capacity, error)

// Slots returns how many deploys may start at once on c: SlotsPerCPU per CPU, no more than
// its memory holds at MemoryPerSlot each, at least 1; 0 when c says nothing.
func (c Capacity) Slots() int {
	n := SlotsPerCPU * c.CPUs
	if m := int(c.Memory / MemoryPerSlot); c.Memory > 0 && (n == 0 || m < n) {
		n = m
	}
	if n < 1 && (c.CPUs > 0 || c.Memory > 0) {
		n = 1
	}
	return n
}

// Admitted is how long one caller waited for its slot, and how the provider's queue stood.
type Admitted struct {
	Provider string        // the provider admitted to
	Waited   time.Duration // from the request to the slot
	Slots    int           // open slots at admission; 0 means no limit
	Waiting  int           // callers still queued behind it
	Start    time.Duration // the measured container start latency (smoothed), 0 if none yet
}

// String formats a for progress lines.
func (a Admitted) String() string {
	if a.Slots == 0 {
		return "no limit"
	}
	s := fmt.Sprintf("waited %s for 1 of %d slots, %d queued behind", a.Waited.Round(time.Millisecond), a.Slots, a.Waiting)
	if a.Start > 0 {
		s += fmt.Sprintf(", container start %s", a.Start.Round(time.Millisecond))
	}
	return s
}

// admittedKey marks a context whose caller holds a slot: nothing done on it waits for
// another, which is what keeps admission free of deadlock.
type admittedKey struct{}

// Holds reports whether ctx carries a slot from Admit.
func Holds(ctx context.Context) bool { return ctx.Value(admittedKey{}) != nil }

// Admit waits in provider's queue, first come first served, until one of its slots is free,
// and returns a context that carries the slot, its release (idempotent) and how long it took.
// A caller that already holds a slot (ctx from Admit) is admitted at once without another, so
// a holder never waits for a second slot. A cancelled caller leaves the queue at once; the
// wait is bounded by Config.AdmitWait. The slot is the caller's until release: hold it from
// the first create to ready, and let go before waiting on anything else.
func (m *Manager) Admit(ctx context.Context, provider string) (context.Context, func(), Admitted, error) {
	if _, err := m.backend(provider); err != nil {
		return ctx, func() {}, Admitted{}, err
	}
	if Holds(ctx) {
		return ctx, func() {}, Admitted{Provider: provider}, nil
	}
	l := m.limiter(ctx, provider)
	if l == nil {
		return context.WithValue(ctx, admittedKey{}, provider), func() {}, Admitted{Provider: provider}, nil
	}
	wctx, cancel := context.WithTimeoutCause(ctx, m.cfg.AdmitWait, errAdmitWait)
	defer cancel()
	start := time.Now()
	if err := l.acquire(wctx); err != nil {
		st := l.state()
		if errors.Is(context.Cause(wctx), errAdmitWait) && ctx.Err() == nil {
			return ctx, func() {}, Admitted{}, fmt.Errorf("admission to %s: no slot of %d within %s (lifecycle.admit_wait; lifecycle.max_parallel_creates sets the slots): %w",
				provider, st.Slots, m.cfg.AdmitWait, context.DeadlineExceeded)
		}
		return ctx, func() {}, Admitted{}, fmt.Errorf("admission to %s: %w", provider, context.Cause(ctx))
	}
	var once sync.Once
	release := func() { once.Do(l.release) }
	a := l.state()
	a.Provider, a.Waited = provider, time.Since(start)
	return context.WithValue(ctx, admittedKey{}, provider), release, a, nil
}

var errAdmitWait = errors.New("admission wait over")

// limiter returns provider's limiter, made at the first call: nil when the provider has no
// limit (no max_parallel_creates and no capacity to size it from).
func (m *Manager) limiter(ctx context.Context, provider string) *limiter {
	m.adm.Lock()
	defer m.adm.Unlock()
	if l, ok := m.limiters[provider]; ok {
		return l
	}
	var l *limiter
	switch size := m.cfg.Capacity[provider]; {
	case m.cfg.MaxParallelCreates > 0:
		l = newLimiter(m.cfg.MaxParallelCreates, false)
	case size != nil:
		cctx, cancel := context.WithTimeout(ctx, m.cfg.CallTimeout)
		c, err := size(cctx)
		cancel()
		n := c.Slots()
		if err != nil && ctx.Err() != nil {
			return newLimiter(2*SlotsPerCPU, true) // this caller's own end; size again at the next
		}
		if err != nil || n == 0 {
			// Without a size, admit as if on a small machine rather than not at all.
			n = 2 * SlotsPerCPU
			m.log.Warn("cannot size admission from the provider; assuming a 2-CPU machine (set lifecycle.max_parallel_creates)",
				"provider", provider, "slots", n, "err", err)
		}
		m.log.Debug("admission sized", "provider", provider, "cpus", c.CPUs, "memory", c.Memory, "slots", n)
		l = newLimiter(n, true)
	}
	m.limiters[provider] = l
	return l
}

// observeStart feeds one sandbox create's latency on provider to its limiter.
func (m *Manager) observeStart(provider string, d time.Duration) {
	m.adm.Lock()
	l := m.limiters[provider]
	m.adm.Unlock()
	if l != nil {
		l.observe(d)
	}
}

// limiter is a FIFO counting semaphore whose size may shrink while the backend's container
// start latency stays above StartTarget (adapt), and grows back as it falls.
type limiter struct {
	mu    sync.Mutex
	base  int // slots when the backend keeps up
	adapt bool
	start time.Duration // smoothed container start latency
	inUse int
	queue []*waiter
}

type waiter struct {
	ready   chan struct{}
	granted bool
}

func newLimiter(n int, adapt bool) *limiter { return &limiter{base: n, adapt: adapt} }

// slots returns how many slots are open now. Callers hold l.mu.
func (l *limiter) slots() int {
	if !l.adapt || l.start <= StartTarget {
		return l.base
	}
	n := int(int64(l.base) * int64(StartTarget) / int64(l.start))
	return max(n, 1)
}

// acquire waits for a slot, first come first served, until ctx ends.
func (l *limiter) acquire(ctx context.Context) error {
	l.mu.Lock()
	if len(l.queue) == 0 && l.inUse < l.slots() {
		l.inUse++
		l.mu.Unlock()
		return nil
	}
	w := &waiter{ready: make(chan struct{})}
	l.queue = append(l.queue, w)
	l.mu.Unlock()
	select {
	case <-w.ready:
		return nil
	case <-ctx.Done():
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if w.granted {
		// Granted in the instant ctx ended: hand the slot on.
		l.inUse--
		l.grant()
		return context.Cause(ctx)
	}
	for i, q := range l.queue {
		if q == w {
			l.queue = append(l.queue[:i], l.queue[i+1:]...)
			break
		}
	}
	return context.Cause(ctx)
}

// release frees a slot and grants it to the head of the queue.
func (l *limiter) release() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.inUse--
	l.grant()
}

// grant hands open slots to the queue's head, in order. Callers hold l.mu.
func (l *limiter) grant() {
	for len(l.queue) > 0 && l.inUse < l.slots() {
		w := l.queue[0]
		l.queue = l.queue[1:]
		w.granted = true
		l.inUse++
		close(w.ready)
	}
}

// observe folds one container start latency into the smoothed one (weight 1/4) and opens
// slots the new figure allows.
func (l *limiter) observe(d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.start == 0 {
		l.start = d
	} else {
		l.start += (d - l.start) / 4
	}
	l.grant()
}

// state reports the limiter's slots and queue.
func (l *limiter) state() Admitted {
	l.mu.Lock()
	defer l.mu.Unlock()
	return Admitted{Slots: l.slots(), Waiting: len(l.queue), Start: l.start}
}

// Queue reports how provider's admission stands now: its open slots (0: no limit, or none
// made yet) and how many callers wait.
func (m *Manager) Queue(provider string) Admitted {
	m.adm.Lock()
	l := m.limiters[provider]
	m.adm.Unlock()
	if l == nil {
		return Admitted{Provider: provider}
	}
	a := l.state()
	a.Provider = provider
	return a
}
