package lifecycle

import (
	"testing"
	"time"
)

// Slow container starts close slots in proportion; fast ones open them again, never below one
// and never above the base.
func TestLimiterAdaptsToStartLatency(t *testing.T) {
	l := newLimiter(8, true)
	steps := []struct {
		start time.Duration
		want  int
	}{
		{time.Second, 8},
		{4 * StartTarget, 2},   // first figure taken as is: 8 × 1/4
		{100 * StartTarget, 1}, // smoothed, far past the target: one slot
	}
	for _, s := range steps {
		l.observe(s.start)
		if got := l.state().Slots; got != s.want {
			t.Errorf("after a start of %s (smoothed %s): slots = %d, want %d", s.start, l.start, got, s.want)
		}
		l = newLimiter(8, true)
	}
	for range 40 {
		l.observe(100 * time.Millisecond)
	}
	if got := l.state().Slots; got != 8 {
		t.Errorf("after fast starts: slots = %d, want 8", got)
	}
	fixed := newLimiter(3, false)
	fixed.observe(time.Hour)
	if got := fixed.state().Slots; got != 3 {
		t.Errorf("a configured limit adapted to %d, want 3", got)
	}
}
