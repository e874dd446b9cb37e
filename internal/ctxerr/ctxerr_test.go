package ctxerr_test

import (
	"context"
	"errors"
	"testing"

	"github.com/agentenv/agentenv/internal/ctxerr"
)

func TestPrefer(t *testing.T) {
	io := errors.New("use of closed network connection")
	if got := ctxerr.Prefer(t.Context(), io); got != io {
		t.Errorf("Prefer(live ctx) = %v, want the call's error", got)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if got := ctxerr.Prefer(ctx, io); got != context.Canceled {
		t.Errorf("Prefer(ended ctx) = %v, want context.Canceled", got)
	}
}
