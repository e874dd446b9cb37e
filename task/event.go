package task

import (
	"fmt"
	"strings"
	"time"
)

// EventKind says what an Event is about.
type EventKind string

// Event kinds.
const (
	EventStep     EventKind = "step"     // a step changed status
	EventEpisode  EventKind = "episode"  // an episode started or ended
	EventRetry    EventKind = "retry"    // an episode or a span of its steps runs again after an infrastructure error
	EventTeardown EventKind = "teardown" // an episode's final teardown ended
)

// Event is one line of progress, for the CLI to print. Runner.Progress receives them in order
// within an episode; events of concurrent episodes interleave.
type Event struct {
	Kind     EventKind     `json:"kind"`
	Time     time.Time     `json:"time"`
	Run      string        `json:"run"`               // the episode's run id
	Episode  int           `json:"episode"`           // 1-based, over the whole Run call
	Episodes int           `json:"episodes"`          // how many the Run call has
	Step     string        `json:"step,omitempty"`    // step events: the step id
	Type     string        `json:"type,omitempty"`    // step events: the step type
	Status   string        `json:"status"`            // step status, episode outcome, or teardown result
	Score    *float64      `json:"score,omitempty"`   // a verifier's or an episode's score
	Elapsed  time.Duration `json:"elapsed,omitempty"` // how long the step, episode or teardown took
	Queued   time.Duration `json:"queued,omitempty"`  // deploy_env: of Elapsed, the wait for admission
	Error    string        `json:"error,omitempty"`
}

// String formats e as one progress line, such as
// "[1/4] run-3f2a… greeting_file (file_contains) passed score=1 3ms".
func (e Event) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "[%d/%d] %s", e.Episode, e.Episodes, e.Run)
	switch e.Kind {
	case EventStep:
		fmt.Fprintf(&b, " %s (%s) %s", e.Step, e.Type, e.Status)
	case EventTeardown:
		fmt.Fprintf(&b, " teardown %s", e.Status)
	case EventRetry:
		fmt.Fprintf(&b, " retry: %s", e.Status)
	default:
		fmt.Fprintf(&b, " episode %s", e.Status)
	}
	if e.Score != nil {
		fmt.Fprintf(&b, " score=%s", formatScore(*e.Score))
	}
	if e.Elapsed > 0 {
		fmt.Fprintf(&b, " %s", e.Elapsed.Round(time.Millisecond))
	}
	if e.Queued > 0 {
		fmt.Fprintf(&b, " (queued %s)", e.Queued.Round(time.Millisecond))
	}
	if e.Error != "" {
		fmt.Fprintf(&b, ": %s", e.Error)
	}
	return b.String()
}
