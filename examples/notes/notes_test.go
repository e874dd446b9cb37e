package notes_test

import (
	"context"
	"testing"
	"time"

	"github.com/agentenv/agentenv/envsdk"
	"github.com/agentenv/agentenv/examples/notes"
)

func TestConnect_GivesUpAtDeadline(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 700*time.Millisecond)
	defer cancel()
	start := time.Now()
	// Port 1 on loopback refuses connections, so Connect retries until the deadline.
	pool, err := envsdk.OpenDB(ctx, "postgres://nobody:x@127.0.0.1:1/none?sslmode=disable&connect_timeout=1", nil)
	if err == nil {
		pool.Close()
		t.Fatal("Connect to a closed port = nil error, want one")
	}
	if d := time.Since(start); d < 500*time.Millisecond || d > 5*time.Second {
		t.Errorf("Connect gave up after %v, want it to retry until the 700ms deadline", d)
	}
	if err := notes.Run(t.Context(), notes.Config{DatabaseURL: "::not a dsn"}, nil); err == nil {
		t.Error("Run with a malformed DSN = nil, want an error")
	}
}
