package gateway

import (
	"context"
)

// Scopes of consistent mode, [Config.Serialize].
const (
	// SerializeServer runs one call at a time per backend; calls to different backends run
	// concurrently. The default: each server owns its own state (its tools, its schema of the
	// service DB), so one server's order is what a trajectory must keep, and a slow tool of one
	// server does not stall the others.
	SerializeServer = "server"
	// SerializeEnv runs one call at a time across the whole gateway, for envs whose servers
	// share state (db-mcp reading what another server writes, servers calling each other).
	SerializeEnv = "env"
)

// lanes serializes tool calls in consistent mode, one lane per backend or one for the whole
// gateway; in performance mode it admits every call at once.
type lanes struct {
	byBackend map[*backend]chan struct{} // nil in performance mode
}

// newLanes makes the lanes of mode and scope over backends.
func newLanes(mode, scope string, backends []*backend) *lanes {
	l := &lanes{}
	if mode != ModeConsistent {
		return l
	}
	l.byBackend = make(map[*backend]chan struct{}, len(backends))
	shared := make(chan struct{}, 1)
	for _, b := range backends {
		if scope == SerializeEnv {
			l.byBackend[b] = shared
		} else {
			l.byBackend[b] = make(chan struct{}, 1)
		}
	}
	return l
}

func noRelease() {}

// acquire waits until a call to b may run, or ctx ends, and returns the function that frees
// its lane.
func (l *lanes) acquire(ctx context.Context, b *backend) (func(), error) {
	sem := l.byBackend[b]
	if sem == nil {
		return noRelease, nil
	}
	select {
	case sem <- struct{}{}:
		return func() { <-sem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
