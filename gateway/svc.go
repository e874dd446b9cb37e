package gateway

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/internal/httpserve"
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
	if upgrade(r) {
		// A stream (noVNC's websocket to the browser's screen) lasts as long as its viewer
		// watches: neither the call timeout nor the server's read and write deadlines cut it;
		// it ends with the viewer, the service, or the gateway.
		cancel()
		ctx, cancel = context.WithCancel(withRole(r.Context(), normRole(r.Header.Get(RoleHeader))))
		if err := httpserve.Stream(w); err != nil {
			cancel()
			writeError(w, http.StatusInternalServerError, err.Error())
			return
		}
	}
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

// A person's browser cannot send a bearer token, so the routes a person opens in one (a
// /svc/NAME/ route: the DB web UI, the browser's noVNC; and a /website/NAME/ route) also take
// the admin token once as the query parameter SvcTokenParam of a GET: the gateway answers with a
// cookie for that route alone and a redirect to the same URL without the token. The cookie holds
// not the token but an HMAC of the route under it, so it opens that route and nothing else, here
// or on another gateway of the same host (cookies do not tell ports apart); it is HttpOnly and
// SameSite=Strict, and the gateway never passes it on. On a /svc/ route it opens reads only
// (GET and HEAD: a websocket's upgrade is a GET), since an extension's other methods are control
// calls; on a website it opens every method, as a person using the site needs (its forms).
const (
	// SvcTokenParam is the query parameter that trades the admin token for a route's cookie.
	SvcTokenParam = "access_token"
	// svcCookie is that cookie's name.
	svcCookie = "agentenv-svc"
)

// personRoute returns the route of path that a person's browser may open with a cookie
// ("/svc/NAME/" or "/website/NAME/"), or "" if path is under none.
func personRoute(path string) string {
	for _, prefix := range []string{SvcPrefix, WebsitePrefix} {
		if rest, ok := strings.CutPrefix(path, prefix); ok {
			if name, _, _ := strings.Cut(rest, "/"); name != "" {
				return prefix + name + "/"
			}
		}
	}
	return ""
}

// svcMAC is the value of route's cookie for admin token admin.
func svcMAC(admin, route string) string {
	m := hmac.New(sha256.New, []byte(admin))
	m.Write([]byte("agentenv route cookie\x00" + route))
	return hex.EncodeToString(m.Sum(nil))
}

// svcCookieAuth reports whether r carries the cookie of its route for admin token admin, in a
// method that cookie opens.
func svcCookieAuth(r *http.Request, admin string) bool {
	route := personRoute(r.URL.Path)
	if route == "" || admin == "" {
		return false
	}
	if strings.HasPrefix(route, SvcPrefix) && r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	want := []byte(svcMAC(admin, route))
	ok := false
	for _, c := range r.CookiesNamed(svcCookie) {
		if hmac.Equal([]byte(c.Value), want) {
			ok = true
		}
	}
	return ok
}

// svcLogin handles a GET of a person's route with SvcTokenParam: the admin token sets the
// route's cookie and redirects to the URL without the parameter (true); any other value is
// refused (true, 401). Without the parameter it does nothing (false).
func svcLogin(w http.ResponseWriter, r *http.Request, t *tokenTable, admin string) bool {
	route := personRoute(r.URL.Path)
	q := r.URL.Query()
	if route == "" || r.Method != http.MethodGet || !q.Has(SvcTokenParam) {
		return false
	}
	p, ok := t.lookupToken(q.Get(SvcTokenParam))
	if !ok || !p.admin {
		writeError(w, http.StatusUnauthorized, "wrong "+SvcTokenParam+": "+route+" takes the admin token")
		return true
	}
	http.SetCookie(w, &http.Cookie{Name: svcCookie, Value: svcMAC(admin, route), Path: route,
		HttpOnly: true, SameSite: http.SameSiteStrictMode, Secure: r.TLS != nil})
	q.Del(SvcTokenParam)
	u := *r.URL
	u.RawQuery = q.Encode()
	w.Header().Set("Cache-Control", "no-store")
	http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
	return true
}

// withoutRouteCookie removes the gateway's own cookie from h's Cookie header, keeping the
// site's own cookies.
func withoutRouteCookie(h http.Header) {
	var keep []string
	for _, line := range h.Values("Cookie") {
		for _, c := range strings.Split(line, ";") {
			if name, _, _ := strings.Cut(strings.TrimSpace(c), "="); name != svcCookie && strings.TrimSpace(c) != "" {
				keep = append(keep, strings.TrimSpace(c))
			}
		}
	}
	h.Del("Cookie")
	if len(keep) > 0 {
		h.Set("Cookie", strings.Join(keep, "; "))
	}
}

// upgrade reports whether r asks to switch protocols (a websocket).
func upgrade(r *http.Request) bool {
	return r.Header.Get("Upgrade") != "" && strings.Contains(strings.ToLower(r.Header.Get("Connection")), "upgrade")
}

// sameOrigin reports whether a browser's origin is the gateway's own as r reached it.
func sameOrigin(origin string, r *http.Request) bool {
	u, err := url.Parse(origin)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && strings.EqualFold(u.Host, r.Host)
}
