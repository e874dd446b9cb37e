package gateway

import (
	"context"
	"errors"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"github.com/agentenv/agentenv/envproto"
)

// SvcPrefix is where the gateway proxies its servers' own HTTP routes: /svc/<server>/<path>
// goes to <path> on the server's base URL (its MCP URL without /mcp), so a server's extension
// routes (the anchor's /agentenv/ext/<method>, advertised in its card's extensions) are reached
// through the gateway with the gateway's auth; so are the HTTP services of Config.Services (the
// DB web UI) at /svc/<service>/<path>, to <path> under their base URL. Only the admin token opens it: an extension may
// be a control path (fault injection, config) no agent should reach. The caller's
// Authorization header is not passed on; AgentEnv-Role and, while the clock is armed,
// AgentEnv-Virtual-Time are set. A call other than GET or HEAD is a trajectory record (via
// "control", tool "svc/<name>/<path>").
const SvcPrefix = "/svc/"

// svcAnchorPrefix is the anchor's spelling of a server under /svc/: /svc/mcp-<server>/, also
// accepted.
const svcAnchorPrefix = "mcp-"

func (g *Gateway) serveSvc(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, SvcPrefix)
	name, path, _ := strings.Cut(rest, "/")
	b := g.byName[name]
	if b == nil && strings.HasPrefix(name, svcAnchorPrefix) { // the anchor's /svc/mcp-<server>
		b = g.byName[strings.TrimPrefix(name, svcAnchorPrefix)]
	}
	var base *url.URL
	var err error
	switch svc := g.svcs[name]; {
	case b != nil:
		if base, err = cardURL(b.url); err == nil {
			base.Path = strings.TrimSuffix(base.Path, envproto.CardPath) // the server's base
		}
	case svc != nil:
		b = svc
		base, err = url.Parse(svc.url)
	default:
		writeError(w, http.StatusNotFound, "no server or service "+name)
		return
	}
	if err != nil {
		writeError(w, http.StatusInternalServerError, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(withRole(r.Context(), normRole(r.Header.Get(RoleHeader))), g.cfg.CallTimeout)
	defer cancel()
	if now, ok := g.clock.now(); ok {
		ctx = withVirtualTime(ctx, formatVirtual(now))
	}
	if r.Body != nil {
		r.Body = http.MaxBytesReader(w, r.Body, maxDataBody)
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = base.Scheme, base.Host
			pr.Out.URL.Path = strings.TrimSuffix(base.Path, "/") + "/" + path
			pr.Out.URL.RawPath = ""
			pr.Out.Host = base.Host
			pr.Out.Header.Del("Authorization")
			pr.Out.Header.Del("Cookie")
		},
		Transport: b.httpc.Transport,
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			status := http.StatusBadGateway
			if errors.Is(err, context.DeadlineExceeded) {
				status = http.StatusGatewayTimeout
			}
			writeError(w, status, "server "+name+": "+ErrBackendUnavailable.Error()+": "+err.Error())
		},
	}
	sw := &svcWriter{statusWriter{ResponseWriter: w}}
	proxy.ServeHTTP(sw, r.WithContext(ctx))
	if r.Method != http.MethodGet && r.Method != http.MethodHead { // a read changes nothing
		g.control("svc/"+b.name+"/"+path, normRole(r.Header.Get(RoleHeader)), map[string]any{"method": r.Method, "status": sw.status})
	}
}

// svcWriter notes the status of a proxied answer and lets the proxy flush through it.
type svcWriter struct{ statusWriter }

// Unwrap gives http.ResponseController the connection's writer, to flush streamed answers.
func (w *svcWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
