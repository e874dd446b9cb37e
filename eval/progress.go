package eval

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/agentenv/agentenv/task"
)

// Status is a group's progress at one moment.
type Status struct {
	Group    string        `json:"group"`
	Total    int           `json:"total"`   // slots this Run or Resume runs
	Done     int           `json:"done"`    // ended
	Running  int           `json:"running"` // started, not ended
	Queued   int           `json:"queued"`  // not started
	Passed   int           `json:"passed"`
	Finished int           `json:"finished"` // ended as a sample (not error or cancelled)
	Errors   int           `json:"errors"`
	CostUSD  float64       `json:"cost_usd"`
	Elapsed  time.Duration `json:"elapsed_ns"`
	ETA      time.Duration `json:"eta_ns"` // 0 until an episode ended
	Last     *task.Episode `json:"-"`      // the episode whose end this status follows, if any
	LastTask string        `json:"-"`
}

// PassRate is the fraction of finished episodes so far that passed (0 with none).
func (s Status) PassRate() float64 {
	if s.Finished == 0 {
		return 0
	}
	return float64(s.Passed) / float64(s.Finished)
}

// String formats s as one line: "group-…  12/100 done  4 running  84 queued  pass 91.7%  eta 1m2s".
func (s Status) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %d/%d done  %d running  %d queued  pass %.1f%%", s.Group, s.Done, s.Total, s.Running, s.Queued, 100*s.PassRate())
	if s.Errors > 0 {
		fmt.Fprintf(&b, "  %d error", s.Errors)
	}
	if s.CostUSD > 0 {
		fmt.Fprintf(&b, "  $%.4f", s.CostUSD)
	}
	if s.ETA > 0 {
		fmt.Fprintf(&b, "  eta %s", s.ETA.Round(time.Second))
	}
	return b.String()
}

// add counts an episode that ended: done, and passed, finished (a sample) or an error, and its
// model cost.
func (s *Status) add(ep task.Episode) {
	s.Done++
	switch {
	case ep.Outcome == task.OutcomePassed:
		s.Passed++
		s.Finished++
	case ep.Outcome == task.OutcomeError:
		s.Errors++
	case ep.Outcome.Finished():
		s.Finished++
	}
	s.CostUSD += episodeCost(ep)
}

// tracker counts a group's episodes as they start and end, admits episodes under the group's
// limit and cost cap, and reports every change.
type tracker struct {
	mu       sync.Mutex
	st       Status
	start    time.Time
	report   func(Status)
	spent    float64
	stopped  bool
	runNames map[string]bool
	tasks    []string
}

func newTracker(g Group, slots [][]task.Slot, report func(Status)) *tracker {
	n := 0
	for _, s := range slots {
		n += len(s)
	}
	t := &tracker{st: Status{Group: g.ID, Total: n, Queued: n}, start: time.Now(), report: report, runNames: map[string]bool{}}
	for _, gt := range g.Tasks {
		t.tasks = append(t.tasks, gt.Task)
	}
	return t
}

// admitter returns the task.RunOptions.Admit of every task of the group: at most limit
// episodes at once, none started once the cost passed maxCost (when > 0) or ctx is done.
func (t *tracker) admitter(ctx context.Context, limit int, maxCost float64) func(context.Context) (func(), error) {
	sem := make(chan struct{}, limit)
	return func(ectx context.Context) (func(), error) {
		if err := t.stop(maxCost); err != nil {
			return nil, err
		}
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-ectx.Done():
			return nil, ectx.Err()
		}
		if err := t.stop(maxCost); err != nil {
			<-sem
			return nil, err
		}
		return func() { <-sem }, nil
	}
}

func (t *tracker) stop(maxCost float64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if maxCost > 0 && t.spent > maxCost {
		t.stopped = true
		return ErrCostCap
	}
	return nil
}

func (t *tracker) capped() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.stopped
}

func (t *tracker) cost() float64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.spent
}

// event counts an episode's start.
func (t *tracker) event(ev task.Event) {
	if ev.Kind != task.EventEpisode || ev.Status != "started" {
		return
	}
	t.mu.Lock()
	t.st.Running++
	t.st.Queued--
	t.runNames[ev.Run] = true
	t.mu.Unlock()
	t.tick()
}

// done counts an episode's end.
func (t *tracker) done(ti int, ep task.Episode) {
	t.mu.Lock()
	t.st.LastTask = t.tasks[ti]
	if t.runNames[ep.Run] {
		t.st.Running--
	} else {
		t.st.Queued--
	}
	t.st.add(ep)
	t.spent = t.st.CostUSD
	t.st.Last = &ep
	t.mu.Unlock()
	t.tick()
}

// tick reports the current status.
func (t *tracker) tick() {
	if t.report == nil {
		return
	}
	t.mu.Lock()
	st := t.st
	t.st.Last = nil
	st.Elapsed = time.Since(t.start)
	if st.Done > 0 && st.Total > st.Done {
		st.ETA = time.Duration(float64(st.Elapsed) / float64(st.Done) * float64(st.Total-st.Done))
	}
	t.report(st) // under the lock: reports arrive in order
	t.mu.Unlock()
}
