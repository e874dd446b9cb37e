package cleanup_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/agentenv/agentenv/internal/cleanup"
)

type key struct{}

// waitDone fails t unless c ends within d.
func waitDone(t *testing.T, c context.Context, d time.Duration, what string) {
	t.Helper()
	select {
	case <-c.Done():
	case <-time.After(d):
		t.Fatalf("%s: the context did not end within %s", what, d)
	}
}

// alive fails t if c has ended.
func alive(t *testing.T, c context.Context, what string) {
	t.Helper()
	if err := c.Err(); err != nil {
		t.Fatalf("%s: the context ended: %v", what, err)
	}
}

func TestContextIgnoresCancellationButNotTheHardStop(t *testing.T) {
	stop := make(chan struct{})
	parent, cancelParent := context.WithCancel(cleanup.WithHardStop(context.WithValue(t.Context(), key{}, "v"), stop))
	c, cancel := cleanup.Context(parent, time.Hour)
	defer cancel()
	cancelParent()
	alive(t, c, "after the parent's cancellation")
	if c.Value(key{}) != "v" {
		t.Error("the cleanup context lost the parent's values")
	}
	close(stop)
	waitDone(t, c, 5*time.Second, "after the hard stop")
	if !cleanup.Stopped(parent) {
		t.Error("Stopped = false after the hard stop")
	}
}

func TestContextEndsAtItsBound(t *testing.T) {
	c, cancel := cleanup.Context(t.Context(), 10*time.Millisecond)
	defer cancel()
	waitDone(t, c, 5*time.Second, "at its bound")
	if c.Err() != context.DeadlineExceeded {
		t.Errorf("Err = %v, want DeadlineExceeded", c.Err())
	}
}

func TestDetachedIgnoresCancellationAndTheHardStop(t *testing.T) {
	stop := make(chan struct{})
	parent, cancelParent := context.WithCancel(cleanup.WithHardStop(context.WithValue(t.Context(), key{}, "v"), stop))
	c, cancel := cleanup.Detached(parent, 200*time.Millisecond)
	defer cancel()
	cancelParent()
	close(stop)
	time.Sleep(20 * time.Millisecond) // a hard stop that ended it would have done so by now
	alive(t, c, "after the parent's cancellation and the hard stop")
	if c.Value(key{}) != "v" {
		t.Error("the detached context lost the parent's values")
	}
	if _, ok := c.Deadline(); !ok {
		t.Error("the detached context has no deadline")
	}
	waitDone(t, c, 5*time.Second, "at its bound")
}

func TestUnboundedKeepsValuesAndNeverEnds(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.WithValue(t.Context(), key{}, "v"))
	c := cleanup.Unbounded(parent)
	cancelParent()
	alive(t, c, "after the parent's cancellation")
	if _, ok := c.Deadline(); ok {
		t.Error("the unbounded context has a deadline")
	}
	if c.Value(key{}) != "v" {
		t.Error("the unbounded context lost the parent's values")
	}
}

func TestDoRunsOnACleanupContext(t *testing.T) {
	parent, cancelParent := context.WithCancel(t.Context())
	cancelParent()
	var saw error
	var deadline bool
	err := cleanup.Do(parent, time.Minute, func(c context.Context) error {
		saw = c.Err()
		_, deadline = c.Deadline()
		return context.Canceled
	})
	if saw != nil || !deadline {
		t.Errorf("f saw Err %v, deadline %v; want a live context with a deadline", saw, deadline)
	}
	if err != context.Canceled {
		t.Errorf("Do = %v, want f's error", err)
	}
}

func TestWaitEndsWithTheWorkOrAtTheBound(t *testing.T) {
	var wg sync.WaitGroup
	release := make(chan struct{})
	wg.Go(func() { <-release })
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	if err := cleanup.Wait(ctx, &wg); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait with the work under way = %v, want the deadline", err)
	}
	close(release)
	if err := cleanup.Wait(t.Context(), &wg); err != nil {
		t.Fatalf("Wait after the work ended = %v", err)
	}
}
