// Package emuapi is the HTTP plumbing every emulator of a cloud sandbox API shares
// (provider/e2b/e2bemu, provider/tensorlake/tensorlakeemu, provider/vercel/vercelemu,
// provider/tenki/tenkiemu, provider/smolvm/smolvmemu): the loopback server and its routes,
// the API-key check and the count of calls per operation, JSON answers, the create and
// terminate faults of package emufault, and the real VMs of package emuvm behind sandboxes
// (started on a detached bounded context, kept by sandbox id, removed now or in the
// background, their ports reverse-proxied). The emulators are fakes of clouds that cannot be
// reached from here; what differs between them (routes, bodies, a sandbox's life) stays in each.
//
// A new emulator embeds a *Base made by New with its API's key check, adds its routes with
// Handle (checked and counted) or Open (a sandbox's ports, checked by the emulator itself),
// and keeps its own sandboxes under its own lock:
//
//	type Server struct {
//		*emuapi.Base
//		mu        sync.Mutex
//		sandboxes map[string]*sandbox
//	}
//
//	func Start(apiKey string) *Server {
//		s := &Server{Base: emuapi.New(emuapi.Bearer(apiKey), unauthorized), sandboxes: ...}
//		s.Handle("POST /sandboxes", "create", s.create)
//		...
//		s.Serve()
//		return s
//	}
//
// Its create takes the fault (TakeCreate), refuses with its Status, holds at a Hang
// (Hold(Closed())), makes the sandbox, starts its VM with StartVM and records it with SetVM
// (then, under its lock, removes it at once if the sandbox ended meanwhile), drops the answer
// for Lost (emufault.DropAnswer) and lingers for a Delay; its terminate takes TakeKill; a
// sandbox that ends calls RemoveVMLater; its ports call Proxy to a VM's port; Close ends its
// sandboxes and calls Base.Close. The embedding emulator gets URL, Calls, SetCreateFault,
// SetKillFault, Kills (once it names its terminates with SetKillOps), VM, DirectAddr and VMErrors
// as they are; with its own Running, Made and Expire it is a lifecycletest.Emulator.
package emuapi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/emufault"
	"github.com/agentenv/agentenv/internal/emuvm"
)

// VMStartBound bounds the start of a VM the emulator makes on its own behalf.
const VMStartBound = 3 * time.Minute

// Base is the part of an emulator every cloud's shares. Its methods are safe for concurrent
// use.
type Base struct {
	ts           *httptest.Server
	mux          *http.ServeMux
	closed       chan struct{}
	authorized   func(*http.Request) bool
	unauthorized http.HandlerFunc
	faults       emufault.Faults

	mu       sync.Mutex
	calls    map[string]int
	killOps  []string                 // the ops whose calls Kills counts
	vms      map[string]emuvm.Machine // by sandbox id, from its start to its removal
	reap     emuvm.Reaper
	stopping bool           // Close has begun: Handle routes take no new request
	handlers sync.WaitGroup // Handle routes running (their requests may outlive an HTTP/2 connection)
}

// New returns a Base whose Handle routes answer with unauthorized unless authorized accepts
// the request (see [Bearer], [Header]). Add the routes, then Serve.
func New(authorized func(*http.Request) bool, unauthorized http.HandlerFunc) *Base {
	return &Base{
		mux: http.NewServeMux(), closed: make(chan struct{}),
		authorized: authorized, unauthorized: unauthorized,
		calls: map[string]int{}, vms: map[string]emuvm.Machine{},
	}
}

// Bearer accepts a request carrying key as "Authorization: Bearer KEY".
func Bearer(key string) func(*http.Request) bool {
	return func(r *http.Request) bool { return r.Header.Get("Authorization") == "Bearer "+key }
}

// Header accepts a request carrying key in header name.
func Header(name, key string) func(*http.Request) bool {
	return func(r *http.Request) bool { return r.Header.Get(name) == key }
}

// Handle serves pattern with h for requests the key check accepts, counting each request as a
// call of op (see Calls) before the check. Close waits for h; a request arriving once Close has
// begun is answered 503.
func (b *Base) Handle(pattern, op string, h http.HandlerFunc) {
	b.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		b.mu.Lock()
		b.calls[op]++
		stopping := b.stopping
		if !stopping {
			b.handlers.Add(1)
		}
		b.mu.Unlock()
		if stopping {
			http.Error(w, "the emulator is closing", http.StatusServiceUnavailable)
			return
		}
		defer b.handlers.Done()
		if !b.authorized(r) {
			b.unauthorized(w, r)
			return
		}
		h(w, r)
	})
}

// Open serves pattern with h, neither checked nor counted (a sandbox's own ports).
func (b *Base) Open(pattern string, h http.HandlerFunc) { b.mux.HandleFunc(pattern, h) }

// Serve starts the server on a loopback port, until Close.
func (b *Base) Serve() {
	b.ts = httptest.NewUnstartedServer(b.mux)
	// Cleartext HTTP/2 (prior knowledge) beside HTTP/1.1: Connect's bidirectional streams, which
	// provider/tenki's emulator serves, need HTTP/2.
	b.ts.Config.Protocols = new(http.Protocols)
	b.ts.Config.Protocols.SetHTTP1(true)
	b.ts.Config.Protocols.SetUnencryptedHTTP2(true)
	b.ts.Start()
}

// ServeOn starts the server on l (a Unix socket's listener, for an API served there), until
// Close.
func (b *Base) ServeOn(l net.Listener) {
	b.ts = httptest.NewUnstartedServer(b.mux)
	b.ts.Listener.Close()
	b.ts.Listener = l
	b.ts.Start()
}

// URL is the server's base URL.
func (b *Base) URL() string { return b.ts.URL }

// Closed is closed when Close begins: requests held by faults end then.
func (b *Base) Closed() <-chan struct{} { return b.closed }

// Close releases requests held by faults, calls end (the emulator ends its sandboxes there),
// stops the server (waiting for its handlers: a create in flight removes its own VM), then
// removes every VM left, waiting for each removal, each bounded by a minute.
func (b *Base) Close(end func()) {
	close(b.closed)
	b.mu.Lock()
	b.stopping = true
	b.mu.Unlock()
	end()
	b.ts.Close()
	// The server waits for the handlers of its open connections; a handler whose HTTP/2
	// connection is gone (a client killed mid-create) is waited for here.
	b.handlers.Wait()
	b.mu.Lock()
	ids := make([]string, 0, len(b.vms))
	for id := range b.vms {
		ids = append(ids, id)
	}
	b.mu.Unlock()
	for _, id := range ids {
		b.RemoveVM(id)
	}
	b.reap.Wait()
}

// Count counts one call of op, for a call that is not a route of its own (a method of a
// stream route).
func (b *Base) Count(op string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.calls[op]++
}

// Calls returns how many requests of op arrived.
func (b *Base) Calls(op string) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.calls[op]
}

// SetKillOps names the ops (of Handle) that terminate a sandbox, whose calls Kills counts.
func (b *Base) SetKillOps(ops ...string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.killOps = slices.Clone(ops)
}

// Kills returns how many terminate requests arrived: the calls of the ops SetKillOps named.
func (b *Base) Kills() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, op := range b.killOps {
		n += b.calls[op]
	}
	return n
}

// SetCreateFault makes the next creates misbehave as f says; nil clears it.
func (b *Base) SetCreateFault(f *emufault.Create) { b.faults.SetCreate(f) }

// SetKillFault makes the next times terminates (every one if times is 0) fail with HTTP status
// code and leave the sandbox running; code 0 clears it.
func (b *Base) SetKillFault(code, times int) { b.faults.SetKill(code, times) }

// TakeCreate returns the fault this create plays, or nil (see emufault.Faults.TakeCreate).
func (b *Base) TakeCreate() *emufault.Create { return b.faults.TakeCreate() }

// TakeKill returns the status this terminate fails with, or 0 (see emufault.Faults.TakeKill).
func (b *Base) TakeKill() int { return b.faults.TakeKill() }

// StartVM starts a VM of backend named name with labels, on a context detached from r's
// cancellation and bounded by VMStartBound (a cloud finishes a create whether or not its client
// waits). It does not record it: SetVM does.
func (b *Base) StartVM(r *http.Request, backend emuvm.Backend, name string, labels map[string]string) (emuvm.Machine, error) {
	ctx, cancel := cleanup.Detached(r.Context(), VMStartBound)
	defer cancel()
	return backend.StartVM(ctx, name, labels)
}

// SetVM records vm as the VM behind sandbox id.
func (b *Base) SetVM(id string, vm emuvm.Machine) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.vms[id] = vm
}

// VM returns the VM behind sandbox id while it has one.
func (b *Base) VM(id string) (emuvm.Machine, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	vm, ok := b.vms[id]
	return vm, ok
}

// DirectAddr returns host:port at which this process reaches port of sandbox id's VM without
// the emulator's HTTP proxy (for protocols other than HTTP, which a cloud's port URLs do not
// carry), or "" if id has no VM.
func (b *Base) DirectAddr(id string, port int) string {
	vm, ok := b.VM(id)
	if !ok {
		return ""
	}
	return vm.Addr(port)
}

// RemoveVM removes sandbox id's VM, if it has one, and waits for it.
func (b *Base) RemoveVM(id string) {
	b.mu.Lock()
	vm, ok := b.vms[id]
	delete(b.vms, id)
	b.mu.Unlock()
	if ok {
		b.reap.Remove(id, vm)
	}
}

// RemoveVMLater removes sandbox id's VM, if it has one, in the background (Close waits for it).
// The emulator calls it when a sandbox ends, under its own lock.
func (b *Base) RemoveVMLater(id string) {
	if _, ok := b.VM(id); !ok {
		return
	}
	b.reap.Go(func() { b.RemoveVM(id) })
}

// VMErrors returns the errors of VM removals so far (a test asserts there are none).
func (b *Base) VMErrors() []error { return b.reap.Errors() }

// Proxy reverse-proxies r to port of vm, streaming (no buffering), with the path taken from
// r's "rest" path value (the route's {rest...}). A port that does not answer is answered by
// closed with a message naming it.
func Proxy(w http.ResponseWriter, r *http.Request, vm emuvm.Machine, port int, closed func(w http.ResponseWriter, msg string)) {
	target := &url.URL{Scheme: "http", Host: vm.Addr(port)}
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.URL.Path = "/" + strings.TrimPrefix(pr.In.PathValue("rest"), "/")
			pr.Out.URL.RawPath = ""
			pr.Out.Host = target.Host
		},
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			closed(w, fmt.Sprintf("port %d of the sandbox is not open: %v", port, err))
		},
	}
	rp.ServeHTTP(w, r)
}

// WhileAlive returns a context that ends with ctx, with stop closing, or once alive (polled
// every 100 ms) reports false: a process in a sandbox's VM ends with the sandbox. Call cancel
// when the process is over.
func WhileAlive(ctx context.Context, stop <-chan struct{}, alive func() bool) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-stop:
				cancel()
				return
			case <-t.C:
			}
			if !alive() {
				cancel()
				return
			}
		}
	}()
	return ctx, cancel
}

// WriteJSON answers code with v as JSON.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	json.NewEncoder(w).Encode(v)
}

// RandHex returns n random hex digits, for ids and tokens.
func RandHex(n int) string {
	b := make([]byte, (n+1)/2)
	rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// Running returns the ids of sandboxes for which alive reports true, sorted. Call it with the
// lock that guards sandboxes held.
func Running[S any](sandboxes map[string]*S, alive func(*S) bool) []string {
	var ids []string
	for id, sb := range sandboxes {
		if alive(sb) {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}
