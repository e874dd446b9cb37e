// Package emufault holds the faults an emulated cloud sandbox API (provider/e2b/e2bemu,
// provider/tensorlake/tensorlakeemu) plays on demand: a create refused, answered late, held
// until released or whose answer is lost, and a terminate that fails. The emulators are fakes of
// clouds that cannot be reached from here; this is the one copy of the part they share.
package emufault

import (
	"net/http"
	"sync"
	"time"
)

// Create makes a create request misbehave.
type Create struct {
	// Status, if set, is answered with Message and nothing is created (429 rate limit, 503
	// no capacity, 500, ...).
	Status  int
	Message string
	// Delay makes the server create the sandbox at once but answer only after Delay, whether or
	// not the client still waits: a create that completes after the client gave up.
	Delay time.Duration
	// Hang, if set, holds the request until it is closed; the sandbox is created then, even if
	// the client has gone: a create request that hangs.
	Hang <-chan struct{}
	// Lost makes the server create the sandbox and then drop the connection without answering:
	// the client never learns the id.
	Lost bool
	// Times is how many creates the fault applies to; 0 means every one.
	Times int
}

// Hold waits at a Hang fault until it is released (true) or closed is (false: the server
// closes and the request must end without an answer). Without a Hang it returns true at once;
// c may be nil.
func (c *Create) Hold(closed <-chan struct{}) bool {
	if c == nil || c.Hang == nil {
		return true
	}
	select {
	case <-c.Hang:
		return true
	case <-closed:
		return false
	}
}

// DropAnswer ends the request behind w without an answer, closing its connection.
func DropAnswer(w http.ResponseWriter) {
	if hj, ok := w.(http.Hijacker); ok {
		if conn, _, err := hj.Hijack(); err == nil {
			conn.Close()
			return
		}
	}
	panic(http.ErrAbortHandler)
}

// Faults is what is armed for the next creates and terminates. The zero value has none; its
// methods are safe for concurrent use.
type Faults struct {
	mu        sync.Mutex
	create    *Create
	killCode  int
	killTimes int
}

// SetCreate makes the next creates misbehave as c says; nil clears it.
func (f *Faults) SetCreate(c *Create) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.create = c
}

// SetKill makes the next times terminates (every one if times is 0) fail with HTTP status code;
// code 0 clears it.
func (f *Faults) SetKill(code, times int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.killCode, f.killTimes = code, times
	if times == 0 {
		f.killTimes = -1
	}
}

// TakeCreate returns the fault this create plays (nil for none), using up one of its Times.
func (f *Faults) TakeCreate() *Create {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := f.create
	if c != nil && c.Times > 0 {
		if c.Times--; c.Times == 0 {
			f.create = nil
		}
	}
	return c
}

// TakeKill returns the HTTP status this terminate fails with (0 for none), using up one of
// its times.
func (f *Faults) TakeKill() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.killCode == 0 || f.killTimes == 0 {
		return 0
	}
	if f.killTimes > 0 {
		f.killTimes--
	}
	return f.killCode
}

// Linger waits out a Delay fault, or until closed is closed; c may be nil.
func (c *Create) Linger(closed <-chan struct{}) {
	if c == nil || c.Delay <= 0 {
		return
	}
	select {
	case <-time.After(c.Delay):
	case <-closed:
	}
}
