package explorer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/httpserve"
	"github.com/agentenv/agentenv/task"
)

// startWait bounds how long a start request waits for the run's first episode to begin.
const startWait = 2 * time.Minute

// pollEvery is how often the live feed looks at the ledger for runs other processes write.
const pollEvery = time.Second

// Progress is what the explorer knows of a run it started: counts as its episodes end, and an
// estimate of the time left.
type Progress struct {
	Group     string    `json:"group"` // the run id of episode 1, once it started
	Task      string    `json:"task"`
	Total     int       `json:"total"` // episodes of the invocation; 0 until the first starts
	Started   int       `json:"started"`
	Ended     int       `json:"ended"`
	Passed    int       `json:"passed"`
	Since     time.Time `json:"since"`
	ETA       float64   `json:"eta_s,omitempty"` // seconds left, once an episode ended
	Done      bool      `json:"done"`
	Cancelled bool      `json:"cancelled,omitempty"`
	Error     string    `json:"error,omitempty"`
}

// Percent is the share of episodes that ended, for the progress bar.
func (p Progress) Percent() float64 {
	if p.Total == 0 {
		return 0
	}
	return float64(p.Ended) / float64(p.Total)
}

type launch struct {
	p      Progress
	cancel context.CancelFunc
	first  chan string // receives the group id once
}

// sseEvent is one server-sent event.
type sseEvent struct {
	name string
	data []byte
}

// live holds the runs this explorer started and the subscribers of the event stream.
type live struct {
	x        *Explorer
	mu       sync.Mutex
	launches map[string]*launch // by the run id of episode 1, and by its run group's id once known
	subs     map[chan sseEvent]struct{}
	polling  bool
}

func newLive(x *Explorer) *live {
	return &live{x: x, launches: map[string]*launch{}, subs: map[chan sseEvent]struct{}{}}
}

// progress returns the progress of the group the explorer started, or nil.
func (l *live) progress(group string) *Progress {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ln := l.launches[group]; ln != nil {
		p := ln.p
		return &p
	}
	return nil
}

// running returns the progress of every run the explorer started that has not ended.
func (l *live) running() []Progress {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Progress
	seen := map[*launch]bool{} // a launch is under its episode 1's run id and its group id
	for _, ln := range l.launches {
		if !ln.p.Done && !seen[ln] {
			seen[ln] = true
			out = append(out, ln.p)
		}
	}
	return out
}

// start runs req in the background and returns its group id once episode 1 began, or once
// the runner has handed the group to workers elsewhere.
func (l *live) start(req RunRequest) (string, error) {
	r := l.x.cfg.Runner
	if r == nil {
		return "", httpError{http.StatusNotImplemented, "this explorer cannot start runs"}
	}
	if strings.TrimSpace(req.Task) == "" {
		return "", fmt.Errorf("start: name a task file or folder: %w", agentenv.ErrInvalid)
	}
	ctx, cancel := context.WithCancel(l.x.baseCtx)
	ln := &launch{p: Progress{Task: req.Task, Since: time.Now()}, cancel: cancel, first: make(chan string, 1)}
	type ended struct {
		group string
		err   error
	}
	endc := make(chan ended, 1)
	l.x.wg.Add(1)
	go func() {
		defer l.x.wg.Done()
		defer cancel()
		group, err := r.Run(ctx, req, func(ev task.Event) { l.observe(ln, ev) })
		l.mu.Lock()
		ln.p.Done, ln.p.ETA = true, 0
		if err != nil {
			ln.p.Error = err.Error()
			ln.p.Cancelled = errors.Is(err, context.Canceled)
		}
		p := ln.p
		l.mu.Unlock()
		l.publish("launch", p)
		endc <- ended{group, err}
	}()
	t := time.NewTimer(startWait)
	defer t.Stop()
	select {
	case id := <-ln.first:
		return l.recorded(ln, id, t.C)
	case e := <-endc:
		select {
		case id := <-ln.first:
			return id, nil
		default:
		}
		if e.err == nil && e.group != "" {
			return e.group, nil // handed to workers, which run it after this returns
		}
		err := e.err
		if err == nil {
			err = errors.New("the run ended before its first episode began")
		}
		return "", httpError{http.StatusBadRequest, "start: " + err.Error()}
	case <-t.C:
		cancel()
		return "", fmt.Errorf("start: no episode began within %s; cancelled", startWait)
	}
}

// recorded waits until the ledger holds run id, episode 1 of launch ln (an episode announces
// itself just before its first write), so that the group page it leads to exists, and returns
// the launch's group id: the run group the episode belongs to (attrs.group), under which ln is
// then also found, or the run id for a run of no group.
func (l *live) recorded(ln *launch, id string, deadline <-chan time.Time) (string, error) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		doc, err := l.x.cfg.Ledger.Runs().Get(l.x.baseCtx, id)
		if err == nil {
			g := doc.Attrs[attrGroup]
			if g == "" {
				return id, nil
			}
			l.mu.Lock()
			ln.p.Group = g
			l.launches[g] = ln
			p := ln.p
			l.mu.Unlock()
			l.publish("launch", p)
			return g, nil
		} else if !errors.Is(err, agentenv.ErrNotFound) {
			return "", fmt.Errorf("start: %w", err)
		}
		select {
		case <-tick.C:
		case <-deadline:
			return "", fmt.Errorf("start: run %s began but is not in the ledger after %s", id, startWait)
		case <-l.x.baseCtx.Done():
			return "", fmt.Errorf("start: %w", l.x.baseCtx.Err())
		}
	}
}

// observe folds one progress event of ln into its counts.
func (l *live) observe(ln *launch, ev task.Event) {
	if ev.Kind != task.EventEpisode {
		l.publish("step", map[string]string{"run": ev.Run, "step": ev.Step, "status": ev.Status})
		return
	}
	l.mu.Lock()
	ln.p.Total = ev.Episodes
	if ev.Status == "started" {
		ln.p.Started++
		if ev.Episode == 1 {
			ln.p.Group = ev.Run
			l.launches[ev.Run] = ln
			ln.first <- ev.Run
		}
	} else {
		ln.p.Ended++
		if ev.Status == string(task.OutcomePassed) {
			ln.p.Passed++
		}
		if left := ln.p.Total - ln.p.Ended; left > 0 {
			ln.p.ETA = time.Since(ln.p.Since).Seconds() / float64(ln.p.Ended) * float64(left)
		} else {
			ln.p.ETA = 0
		}
	}
	p := ln.p
	l.mu.Unlock()
	l.publish("launch", p)
}

// cancel cancels group: one the explorer started, whose episodes then tear down what they
// made, or one on workers elsewhere, through the Runner, once they have.
func (l *live) cancel(ctx context.Context, group string) error {
	l.mu.Lock()
	ln := l.launches[group]
	l.mu.Unlock()
	if ln != nil {
		ln.cancel()
		return nil
	}
	if r := l.x.cfg.Runner; r != nil {
		return r.Cancel(ctx, group)
	}
	return httpError{http.StatusConflict, "group " + group + " was not started by this explorer: cancel it where it runs (Ctrl-C)"}
}

// publish sends an event to every subscriber; a subscriber that is behind misses it (the page
// reloads its data on the next one anyway).
func (l *live) publish(name string, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.subs {
		select {
		case c <- sseEvent{name, b}:
		default:
		}
	}
}

// serve streams events to one client until it leaves or the explorer closes.
func (l *live) serve(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	c := make(chan sseEvent, 64)
	l.mu.Lock()
	l.subs[c] = struct{}{}
	if !l.polling {
		l.polling = true
		l.x.wg.Add(1)
		go l.poll()
	}
	l.mu.Unlock()
	defer func() {
		l.mu.Lock()
		delete(l.subs, c)
		l.mu.Unlock()
	}()
	_ = httpserve.Stream(w) // the stream outlives the server's write timeout
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	fmt.Fprint(w, "retry: 2000\n: agentenv explorer\n\n")
	fl.Flush()
	keep := time.NewTicker(15 * time.Second)
	defer keep.Stop()
	for {
		select {
		case ev := <-c:
			fmt.Fprintf(w, "event: %s\ndata: %s\n\n", ev.name, ev.data)
		case <-keep.C:
			fmt.Fprint(w, ": keep-alive\n\n")
		case <-r.Context().Done():
			return
		case <-l.x.baseCtx.Done():
			return
		}
		fl.Flush()
	}
}

// runState is what the poll compares to see that a run changed.
type runState struct {
	status string
	steps  string
}

// poll watches the ledger while anyone subscribes, and publishes a "run" event for each run
// that started or changed: the running ones, and the newest, so that runs of other processes
// show too.
func (l *live) poll() {
	defer l.x.wg.Done()
	seen := map[string]runState{}
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	first := true
	for {
		select {
		case <-t.C:
		case <-l.x.baseCtx.Done():
			return
		}
		l.mu.Lock()
		if len(l.subs) == 0 {
			l.polling = false
			l.mu.Unlock()
			return
		}
		l.mu.Unlock()
		ctx, cancel := cleanup.Context(l.x.baseCtx, 5*time.Second)
		now := map[string]agentenv.Run{}
		running, err1 := l.x.cfg.Ledger.Runs().Page(ctx, agentenv.DocQuery{States: agentenv.DocStates(agentenv.RunRunning), Limit: 500})
		newest, err2 := l.x.cfg.Ledger.Runs().Page(ctx, agentenv.DocQuery{Limit: 20})
		for _, r := range append(running.Docs, newest.Docs...) {
			now[r.ID] = r
		}
		for id, st := range seen {
			if _, ok := now[id]; !ok && st.status == string(agentenv.RunRunning) {
				if r, err := l.x.cfg.Ledger.Runs().Get(ctx, id); err == nil {
					now[id] = r
				}
			}
		}
		cancel()
		if err := errors.Join(err1, err2); err != nil {
			l.x.log.Warn("explorer: live poll", "err", err)
			continue
		}
		next := map[string]runState{}
		for id, r := range now {
			var b strings.Builder
			for _, s := range r.Steps {
				st := string(s.Status)
				b.WriteString(st[:min(2, len(st))])
			}
			st := runState{string(r.Status), b.String()}
			next[id] = st
			if !first && seen[id] != st {
				e := episodeOf(r, time.Now())
				l.publish("run", map[string]any{"id": e.ID, "status": e.Status, "outcome": e.Outcome, "step": e.Step, "episode": e.Episode})
			}
		}
		seen, first = next, false
	}
}
