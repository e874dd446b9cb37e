package explorer

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
)

// ContentSecurityPolicy is sent with every response: scripts and styles only from files this
// server serves, no inline script or style, no frames, forms and fetches to this origin only.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"

// tokenCookie carries the --token once a page was opened with ?token=.
const tokenCookie = "agentenv_ui_token"

// csrfHeader carries the CSRF token of a state-changing request (or the form field csrf).
const csrfHeader = "X-CSRF-Token"

func randomToken() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", fmt.Errorf("explorer: random token: %w", err)
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}

// guard applies, in order: security headers; the Host allow-list (421, against DNS
// rebinding); the token, when one is set (401); and for every request that is not GET or
// HEAD, same-origin (Sec-Fetch-Site, else Origin) and the CSRF token (403).
func (x *Explorer) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", ContentSecurityPolicy)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("X-Frame-Options", "DENY")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cross-Origin-Resource-Policy", "same-origin")
		if !x.hostAllowed(r.Host) {
			http.Error(w, "misdirected request: host "+r.Host+" is not served here", http.StatusMisdirectedRequest)
			return
		}
		if x.cfg.Token != "" {
			if t := r.URL.Query().Get("token"); t != "" && r.Method == http.MethodGet && equal(t, x.cfg.Token) {
				http.SetCookie(w, &http.Cookie{Name: tokenCookie, Value: t, Path: "/", HttpOnly: true, SameSite: http.SameSiteStrictMode})
				u := *r.URL
				q := u.Query()
				q.Del("token")
				u.RawQuery = q.Encode()
				http.Redirect(w, r, u.RequestURI(), http.StatusSeeOther)
				return
			}
			if !x.tokenOK(r) {
				h.Set("WWW-Authenticate", `Bearer realm="agentenv ui"`)
				http.Error(w, "unauthorized: open the URL agentenv ui printed, or send Authorization: Bearer TOKEN", http.StatusUnauthorized)
				return
			}
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			if why := crossSite(r); why != "" {
				http.Error(w, "forbidden: "+why, http.StatusForbidden)
				return
			}
			got := r.Header.Get(csrfHeader)
			if got == "" {
				got = r.PostFormValue("csrf")
			}
			if !equal(got, x.csrf) {
				http.Error(w, "forbidden: missing or wrong CSRF token (GET /api/v1/session gives it)", http.StatusForbidden)
				return
			}
		}
		next.ServeHTTP(w, r)
	})
}

func equal(a, b string) bool { return subtle.ConstantTimeCompare([]byte(a), []byte(b)) == 1 }

func (x *Explorer) hostAllowed(host string) bool {
	return slices.ContainsFunc(x.cfg.Hosts, func(h string) bool { return strings.EqualFold(h, host) })
}

func (x *Explorer) tokenOK(r *http.Request) bool {
	if a, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok && equal(a, x.cfg.Token) {
		return true
	}
	c, err := r.Cookie(tokenCookie)
	return err == nil && equal(c.Value, x.cfg.Token)
}

// crossSite says why a state-changing request is not same-origin, or "" when it is. Browsers
// send Sec-Fetch-Site; older ones only Origin; a request with neither comes from a script,
// which the CSRF token still has to carry.
func crossSite(r *http.Request) string {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" {
		if s != "same-origin" {
			return "a " + s + " request may not change anything"
		}
		return ""
	}
	if o := r.Header.Get("Origin"); o != "" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return "origin " + o + " is not this server"
		}
	}
	return ""
}

// Hosts returns the Host header values to allow for a server listening on addr: the address
// itself, and for a loopback or unspecified address the loopback names with its port. extra
// names more (a DNS name the server is reached by, host:port).
func Hosts(addr string, extra ...string) ([]string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("explorer: listen address %q: %w", addr, err)
	}
	out := []string{}
	ip := net.ParseIP(host)
	if host == "localhost" || host == "" || (ip != nil && (ip.IsLoopback() || ip.IsUnspecified())) {
		out = append(out, net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("localhost", port), net.JoinHostPort("::1", port))
	}
	if host != "" && (ip == nil || !ip.IsUnspecified()) {
		out = append(out, net.JoinHostPort(host, port))
	}
	if ip != nil && ip.IsUnspecified() {
		addrs, _ := net.InterfaceAddrs()
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok {
				out = append(out, net.JoinHostPort(n.IP.String(), port))
			}
		}
	}
	for _, e := range extra {
		if !strings.Contains(e, ":") {
			e = net.JoinHostPort(e, port)
		}
		out = append(out, e)
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// Loopback reports whether addr (host:port) listens on loopback only.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
