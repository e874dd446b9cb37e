package gateway

import (
	"context"
	"encoding/json"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// sessions is the table of the gateway's own MCP sessions that the fast path serves: each one
// the SDK created and initialized, with its role, its negotiated protocol version and the
// _meta members stamped on its forwarded calls. The table also owns the idle timeout, since
// the SDK's timer sees only the requests the SDK serves. Safe for concurrent use.
type sessions struct {
	timeout time.Duration
	mu      sync.Mutex
	byID    map[string]*session
}

// session is one gateway MCP session as the fast path knows it.
type session struct {
	id, role string
	ss       *mcp.ServerSession
	version  atomic.Pointer[string] // negotiated MCP protocol version
	meta     []byte                 // `"agentenv.io/role":…,"agentenv.io/session":…`, stamped in _meta
	ready    atomic.Bool            // the client sent notifications/initialized

	mu       sync.Mutex
	refs     int         // POSTs in progress; the idle timer runs only at 0
	timer    *time.Timer // nil once the session is gone
	inflight map[string]context.CancelFunc
}

func newSessions(timeout time.Duration) *sessions {
	return &sessions{timeout: timeout, byID: make(map[string]*session)}
}

// add records ss, just initialized (or discovered) for role at protocol version, starts its
// idle timer and forgets it when it ends. Adding a known session updates its version.
func (t *sessions) add(ss *mcp.ServerSession, role, version string, ready bool) {
	id := ss.ID()
	if id == "" {
		return
	}
	t.mu.Lock()
	if s := t.byID[id]; s != nil && s.ss == ss {
		s.version.Store(&version)
		s.ready.Store(ready)
		t.mu.Unlock()
		return
	}
	t.mu.Unlock()
	r, _ := json.Marshal(role)
	sid, _ := json.Marshal(id)
	s := &session{
		id: id, role: role, ss: ss,
		meta:     []byte(`"` + MetaRole + `":` + string(r) + `,"` + MetaSession + `":` + string(sid)),
		inflight: make(map[string]context.CancelFunc),
	}
	s.version.Store(&version)
	s.ready.Store(ready)
	s.timer = time.AfterFunc(t.timeout, func() {
		t.remove(s)
		_ = ss.Close()
	})
	t.mu.Lock()
	t.byID[id] = s
	t.mu.Unlock()
	go func() {
		_ = ss.Wait()
		t.remove(s)
	}()
}

// protocol returns the session's negotiated protocol version, "" before initialize.
func (s *session) protocol() string { return *s.version.Load() }

// len returns the number of sessions in the table.
func (t *sessions) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byID)
}

// get returns the live session of id, or nil.
func (t *sessions) get(id string) *session {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.byID[id]
}

// remove forgets s, stops its timer and cancels its calls in flight, so that its next request
// reaches the SDK (which answers 404 once the session is closed).
func (t *sessions) remove(s *session) {
	t.mu.Lock()
	if t.byID[s.id] == s {
		delete(t.byID, s.id)
	}
	t.mu.Unlock()
	s.mu.Lock()
	if s.timer != nil {
		s.timer.Stop()
		s.timer = nil
	}
	for _, cancel := range s.inflight {
		cancel()
	}
	s.mu.Unlock()
}

// begin marks a POST of s in progress, pausing its idle timer.
func (s *session) begin() {
	s.mu.Lock()
	if s.refs == 0 && s.timer != nil {
		s.timer.Stop()
	}
	s.refs++
	s.mu.Unlock()
}

// end marks a POST of s done, restarting its idle timer when it was the last.
func (s *session) end(timeout time.Duration) {
	s.mu.Lock()
	s.refs--
	if s.refs == 0 && s.timer != nil {
		s.timer.Reset(timeout)
	}
	s.mu.Unlock()
}

// track registers the cancel of a fast-path call by its JSON-RPC id, for
// notifications/cancelled; the returned function unregisters it.
func (s *session) track(id string, cancel context.CancelFunc) func() {
	s.mu.Lock()
	s.inflight[id] = cancel
	s.mu.Unlock()
	return func() {
		s.mu.Lock()
		delete(s.inflight, id)
		s.mu.Unlock()
	}
}

// cancel cancels the fast-path call with JSON-RPC id, if it is in flight.
func (s *session) cancel(id string) {
	s.mu.Lock()
	c := s.inflight[id]
	s.mu.Unlock()
	if c != nil {
		c()
	}
}
