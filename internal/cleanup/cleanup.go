// Package cleanup gives work that must outlive its caller's cancellation a context of its own,
// and is the one place that detaches a context from its parent's cancellation:
//
//   - Context, for teardown and undo work: detached from the cancellation of the operation being
//     undone, bounded by a timeout, and still stopped by a hard stop (the second Ctrl-C), which
//     a caller attaches to the context once with WithHardStop.
//   - Detached, for work that must be allowed to finish on its own bound even after a hard stop,
//     such as a provider's create request: stopping it half way would leave a sandbox whose
//     existence nobody knows.
//   - Unbounded, for a context whose end something else decides, such as the base context of
//     an http.Server, which its Shutdown ends.
package cleanup

import (
	"context"
	"sync"
	"time"
)

type hardStopKey struct{}

// WithHardStop returns a copy of ctx that carries stop. Cleanup contexts derived from it with
// Context end when stop is closed, even though they ignore ctx's own cancellation.
func WithHardStop(ctx context.Context, stop <-chan struct{}) context.Context {
	return context.WithValue(ctx, hardStopKey{}, stop)
}

// HardStop returns the hard-stop channel ctx carries, or nil (which never fires).
func HardStop(ctx context.Context) <-chan struct{} {
	stop, _ := ctx.Value(hardStopKey{}).(<-chan struct{})
	return stop
}

// Context returns a context for cleanup work on behalf of ctx: it keeps ctx's values, ignores
// ctx's cancellation, ends after d, and ends when ctx's hard stop fires. Call cancel when done.
func Context(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	c, cancel := Detached(ctx, d)
	stop := HardStop(ctx)
	if stop == nil {
		return c, cancel
	}
	go func() {
		select {
		case <-stop:
			cancel()
		case <-c.Done():
		}
	}()
	return c, cancel
}

// Do runs f on a cleanup Context of ctx bounded by d, and returns f's error. It suits a deferred
// undo: defer cleanup.Do(ctx, time.Second, tx.Rollback).
func Do(ctx context.Context, d time.Duration, f func(context.Context) error) error {
	c, cancel := Context(ctx, d)
	defer cancel()
	return f(c)
}

// Unbounded returns a context that keeps ctx's values and never ends: for a context whose end
// something else decides (an http.Server's base context, ended by its Shutdown; a command run
// under its own timeout). Anything that waits on it needs its own bound.
func Unbounded(ctx context.Context) context.Context {
	return context.WithoutCancel(ctx)
}

// Stopped reports whether ctx's hard stop has fired.
func Stopped(ctx context.Context) bool {
	select {
	case <-HardStop(ctx):
		return true
	default:
		return false
	}
}

// Detached returns a context for work that must be allowed to finish on its own bound after its
// caller gave up, such as a provider create whose result is then undone: it keeps ctx's values,
// ignores ctx's cancellation and its hard stop, and ends after d. Call cancel when done.
func Detached(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), d)
}

// Wait waits until wg's work is done or ctx ends, and then returns ctx's cause: for a close or a
// drain that gives work still under way a bounded time to finish.
func Wait(ctx context.Context, wg *sync.WaitGroup) error {
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}
