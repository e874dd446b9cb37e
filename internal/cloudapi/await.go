package cloudapi

import (
	"context"
	"fmt"
	"time"
)

// Await polls check until it reports done or fails: the wait of a create until the cloud says
// its sandbox runs. It waits 50 ms after the first call, doubling to at most 1 s between calls,
// and ends with ctx, which must carry the wall-clock deadline (a create's detached context,
// bounded by CreateTimeout). check returns what it read, the state it saw (for the error of a
// wait cut short), whether that is the end of the wait, and an error, which ends it too: Await
// then returns check's value and error as they are. Cut short by ctx, it returns the zero T and
// "waiting for WHAT to run (STATE)" wrapping ctx's error.
func Await[T any](ctx context.Context, what string, check func(context.Context) (v T, state string, done bool, err error)) (T, error) {
	wait := 50 * time.Millisecond
	for {
		v, state, done, err := check(ctx)
		if done || err != nil {
			return v, err
		}
		select {
		case <-ctx.Done():
			var zero T
			return zero, fmt.Errorf("waiting for %s to run (%s): %w", what, state, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, time.Second)
	}
}
