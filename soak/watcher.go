package soak

import (
	"context"
	"sort"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
)

// pollEvery is how often a watcher lists the engine.
const pollEvery = 250 * time.Millisecond

// watcher lists a round's resources on the engine while its runner lives, to know which episodes
// are under way, which containers to kill, and which host ports the round's containers were given.
type watcher struct {
	engine Engine
	labels map[string]string
	done   chan struct{}

	mu      sync.Mutex
	latest  []Resource
	ports   map[int]bool
	started map[string]bool // runs seen with a running container at any poll
	polls   int
	errs    int
	lastErr error
	changed chan struct{} // closed and replaced after every poll
}

func newWatcher(e Engine, labels map[string]string) *watcher {
	return &watcher{engine: e, labels: labels, done: make(chan struct{}), ports: map[int]bool{}, started: map[string]bool{}, changed: make(chan struct{})}
}

// run polls until stop is closed, then polls once more.
func (w *watcher) run(stop <-chan struct{}) {
	defer close(w.done)
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for {
		w.poll()
		select {
		case <-stop:
			w.poll()
			return
		case <-t.C:
		}
	}
}

func (w *watcher) poll() {
	ctx, cancel := context.WithTimeout(context.Background(), engineTimeout)
	rs, err := w.engine.List(ctx, w.labels)
	cancel()
	w.mu.Lock()
	defer w.mu.Unlock()
	w.polls++
	if err != nil {
		w.errs++
		w.lastErr = err
	} else {
		w.latest = rs
		for _, r := range rs {
			for _, p := range r.Ports {
				w.ports[p] = true
			}
			if r.Kind == "container" && r.Running && r.Labels[agentenv.LabelRun] != "" {
				w.started[r.Labels[agentenv.LabelRun]] = true
			}
		}
	}
	close(w.changed)
	w.changed = make(chan struct{})
}

// failure returns an error when no poll at all succeeded.
func (w *watcher) failure() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.errs > 0 && w.errs == w.polls {
		return w.lastErr
	}
	return nil
}

// running returns the running containers of each episode (run) under way, as last listed.
func (w *watcher) running() map[string][]Resource {
	w.mu.Lock()
	defer w.mu.Unlock()
	byRun := map[string][]Resource{}
	for _, r := range w.latest {
		if r.Kind == "container" && r.Running && r.Labels[agentenv.LabelRun] != "" {
			run := r.Labels[agentenv.LabelRun]
			byRun[run] = append(byRun[run], r)
		}
	}
	return byRun
}

// runningRuns returns how many episodes have a running container.
func (w *watcher) runningRuns() int { return len(w.running()) }

// waitStarted waits until n episodes have had a running container and one has one now, ctx
// ends, stop is closed or deadline passes, and reports whether the first happened. Under admission control
// only a few episodes deploy at once, so "half of the round is under way" is counted over the
// round, not at one instant.
func (w *watcher) waitStarted(ctx context.Context, n int, stop <-chan struct{}, deadline time.Time) bool {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	for {
		w.mu.Lock()
		changed, started := w.changed, len(w.started)
		w.mu.Unlock()
		if started >= n && w.runningRuns() > 0 {
			return true
		}
		select {
		case <-changed:
		case <-stop:
			return false
		case <-ctx.Done():
			return false
		case <-t.C:
			return false
		}
	}
}

// seenPorts returns every host port a container of the round published, sorted.
func (w *watcher) seenPorts() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]int, 0, len(w.ports))
	for p := range w.ports {
		out = append(out, p)
	}
	sort.Ints(out)
	return out
}
