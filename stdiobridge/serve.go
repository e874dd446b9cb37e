package stdiobridge

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/httpserve"
)

// CloseTimeout bounds the HTTP side of Endpoint.Close; stopping the server has its own bound.
const CloseTimeout = 5 * time.Second

// Endpoint is a stdio server bridged in this process by [Serve].
type Endpoint struct {
	URL   string // the streamable HTTP MCP endpoint (http://127.0.0.1:PORT/mcp)
	Token string // the bearer token every request must carry
	// Close ends the HTTP server's sessions and calls, then stops the server, each bounded.
	// It is idempotent.
	Close func() error
}

// ServeOptions configure [Serve]. Zero values are documented defaults.
type ServeOptions struct {
	// Listen is the address to serve on; "127.0.0.1:0" if empty.
	Listen string
	// Logger receives the bridge's logs; nil discards.
	Logger *slog.Logger
	// StartTimeout bounds the server's initialize and first tools/list; zero means
	// DefaultStartTimeout.
	StartTimeout time.Duration
}

// Serve bridges p, a stdio MCP server already running, in this process: it initializes p,
// lists its tools and serves them (with the card and /healthz) over streamable HTTP on
// opts.Listen, refusing with 401 every request without Authorization: Bearer and the
// Endpoint's fresh random token. It returns once it serves. If it cannot, p is closed. The
// server runs until Endpoint.Close (or until p ends, after which calls fail with [ErrExited]);
// ctx bounds only the start.
func Serve(ctx context.Context, p Process, opts ServeOptions) (Endpoint, error) {
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("component", "stdio-bridge")
	addr := opts.Listen
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	var tb [32]byte
	if _, err := rand.Read(tb[:]); err != nil {
		_ = p.Close()
		return Endpoint{}, fmt.Errorf("stdiobridge: token: %w", err)
	}
	token := hex.EncodeToString(tb[:])
	b, err := start(ctx, p, log, orDefault(opts.StartTimeout, DefaultStartTimeout))
	if err != nil {
		return Endpoint{}, err
	}
	ln, err := httpserve.Listen(ctx, addr, 0)
	if err != nil {
		b.close()
		return Endpoint{}, fmt.Errorf("stdiobridge: %w", err)
	}
	base, stopBase := context.WithCancel(cleanup.Unbounded(ctx))
	stopFollow := b.followUntil(base)
	hs := httpserve.New(bearer(token, b.handler()), httpserve.Limits{})
	hs.BaseContext = func(net.Listener) context.Context { return base }
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = hs.Serve(ln) // ErrServerClosed once closed
	}()
	var once sync.Once
	var closeErr error
	closeFn := func() error {
		once.Do(func() {
			for ss := range b.server.Sessions() {
				_ = ss.Close()
			}
			sctx, cancel := cleanup.Context(context.Background(), CloseTimeout)
			defer cancel()
			if err := hs.Shutdown(sctx); err != nil {
				_ = hs.Close()
				if !errors.Is(err, context.DeadlineExceeded) {
					closeErr = fmt.Errorf("stdiobridge: close: %w", err)
				}
			}
			<-served // Serve returns as soon as Shutdown or Close began
			stopBase()
			stopFollow()
			b.close()
		})
		return closeErr
	}
	log.Info("serving", "addr", ln.Addr().String())
	return Endpoint{URL: "http://" + ln.Addr().String() + "/mcp", Token: token, Close: closeFn}, nil
}

// bearer passes on only requests whose Authorization is "Bearer token"; others get 401.
func bearer(token string, next http.Handler) http.Handler {
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agentenv-stdio-bridge"`)
			http.Error(w, "unauthorized: send Authorization: Bearer with the bridge's token", http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r)
	})
}
