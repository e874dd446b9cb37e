package cloudapi

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestCreatesBeginChecksThenHoldsASlotOnADetachedBoundedContext(t *testing.T) {
	noKey := errors.New("acme: no API key")
	c := Creates{Prefix: "acme", Gate: NewGate(1000, 1), Timeout: time.Minute}

	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	if _, _, err := c.Begin(cancelled, "rec"); !errors.Is(err, context.Canceled) || !strings.HasPrefix(err.Error(), "acme: create rec: ") {
		t.Errorf("Begin on an ended ctx = %v, want its error prefixed", err)
	}
	c.Check = func() error { return noKey }
	if _, _, err := c.Begin(context.Background(), "rec"); err != noKey {
		t.Errorf("Begin without a key = %v, want Check's error as it is", err)
	}
	c.Check = nil

	ctx, cancelCtx := context.WithCancel(context.Background())
	cctx, end, err := c.Begin(ctx, "rec")
	if err != nil {
		t.Fatal(err)
	}
	if dl, ok := cctx.Deadline(); !ok || time.Until(dl) > time.Minute {
		t.Errorf("the create's context has deadline %v, %v; want within Timeout", dl, ok)
	}
	cancelCtx()
	if cctx.Err() != nil {
		t.Error("the create's context ended with the caller's")
	}
	full, cancelFull := context.WithTimeout(context.Background(), 30*time.Millisecond)
	defer cancelFull()
	if _, _, err := c.Begin(full, "rec2"); !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "acme: create rec2: waiting for a create slot") {
		t.Errorf("Begin with the one slot taken = %v, want the slot wait prefixed", err)
	}
	end()
	if cctx.Err() == nil {
		t.Error("end left the create's context running")
	}
	_, end2, err := c.Begin(context.Background(), "rec3")
	if err != nil {
		t.Fatalf("Begin after end = %v, want the slot free", err)
	}
	end2()
}
