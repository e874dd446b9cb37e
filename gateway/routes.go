package gateway

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentenv/agentenv/envproto"
)

// maxControlBody bounds the body of /step and /tools/*.
const maxControlBody = 4 << 20

// routes builds the gateway's handler: the Origin check on every route, then /healthz without
// auth, then the bearer token on everything else (or, on a route a person opens, its cookie: svc.go).
func (g *Gateway) routes() http.Handler {
	mux := http.NewServeMux()
	mux.Handle(envproto.MCPPath, g.mcp)
	mux.HandleFunc("GET "+envproto.CardPath, g.serveCard)
	mux.HandleFunc("GET "+StatePath, g.serveState)
	mux.HandleFunc("POST "+StepPath, g.serveStep)
	mux.HandleFunc("GET "+TrajectoryPath, g.serveTrajectory)
	mux.HandleFunc("POST "+DisablePath, g.serveGate(true))
	mux.HandleFunc("POST "+EnablePath, g.serveGate(false))
	mux.HandleFunc("POST "+envproto.DataPath, g.serveData)
	mux.HandleFunc("POST "+serverDataPrefix+"{name}"+envproto.DataPath, g.serveServerData)
	mux.HandleFunc("PUT "+ClockSetPath, g.serveClockSet)
	mux.HandleFunc("POST "+ClockClearPath, g.serveClockClear)
	mux.HandleFunc("GET "+ClockTimePath, g.serveClockTime)
	mux.HandleFunc("GET "+ClockStatePath, g.serveClockState)
	mux.HandleFunc("POST "+TriggersRegisterPath, g.serveTriggersRegister)
	mux.HandleFunc("POST "+TriggersRemovePath, g.serveTriggersRemove)
	mux.HandleFunc("POST "+TriggersClearPath, g.serveTriggersClear)
	mux.HandleFunc("GET "+TriggersStatePath, g.serveTriggersState)
	mux.Handle(SvcPrefix, http.HandlerFunc(g.serveSvc))
	mux.Handle(WebsitePrefix, http.HandlerFunc(g.serveWebsite))

	toks := newTokenTable(g.cfg.Token, g.cfg.RoleTokens)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A page the gateway serves to a person (noVNC under /svc/, a website) calls back to its
		// own origin, wherever the gateway is reached.
		if o := r.Header.Get("Origin"); o != "" && !g.originAllowed(o) && (personRoute(r.URL.Path) == "" || !sameOrigin(o, r)) {
			writeError(w, http.StatusForbidden, "origin "+o+" not allowed")
			return
		}
		if r.URL.Path == HealthPath {
			g.serveHealth(w, r)
			return
		}
		if svcLogin(w, r, toks, g.cfg.Token) {
			return
		}
		p, ok := toks.lookup(r)
		if !ok && svcCookieAuth(r, g.cfg.Token) {
			p, ok = principal{admin: true}, true
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agentenv"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		if !p.admin {
			if !roleRoute(r.URL.Path) {
				writeError(w, http.StatusForbidden, r.URL.Path+" needs the admin token")
				return
			}
			if h := r.Header.Get(RoleHeader); h != "" && normRole(h) != p.role {
				writeError(w, http.StatusForbidden, "the token is bound to role "+p.role+", not "+h)
				return
			}
			// Everything behind reads the role from the header: set it to the token's.
			r.Header.Set(RoleHeader, p.role)
			r = r.WithContext(context.WithValue(r.Context(), boundRoleKey{}, p.role))
		}
		mux.ServeHTTP(w, r)
	})
}

// roleRoute reports whether a role token may use path: /mcp, /step and the websites (whose
// handler applies the role's rules).
func roleRoute(path string) bool {
	return path == envproto.MCPPath || path == StepPath || strings.HasPrefix(path, WebsitePrefix)
}

// boundRoleKey is the context key of the role a request's role token fixes.
type boundRoleKey struct{}

// boundRole returns the role r's token fixes, or "" for the admin token.
func boundRole(r *http.Request) string {
	role, _ := r.Context().Value(boundRoleKey{}).(string)
	return role
}

// principal is who a bearer token speaks for: the admin, or one role.
type principal struct {
	admin bool
	role  string // the role a role token fixes; empty for the admin
}

// tokenTable maps the hashes of the deployment's bearer tokens to their principals.
type tokenTable struct {
	hashes []([sha256.Size]byte)
	who    []principal
}

func newTokenTable(admin string, roles map[string]string) *tokenTable {
	t := &tokenTable{}
	t.add(admin, principal{admin: true})
	for role, tok := range roles {
		t.add(tok, principal{role: normRole(role)})
	}
	return t
}

func (t *tokenTable) add(token string, p principal) {
	t.hashes = append(t.hashes, sha256.Sum256([]byte(token)))
	t.who = append(t.who, p)
}

// lookup returns the principal of r's bearer token. It compares the token's hash with every
// known hash in constant time and without stopping at a match, so the time taken tells
// nothing about which token, if any, matched.
func (t *tokenTable) lookup(r *http.Request) (principal, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return principal{}, false
	}
	return t.lookupToken(token)
}

// lookupToken returns the principal of token, as lookup.
func (t *tokenTable) lookupToken(token string) (principal, bool) {
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	found := -1
	for i := range t.hashes {
		if subtle.ConstantTimeCompare(got[:], t.hashes[i][:]) == 1 {
			found = i
		}
	}
	if found < 0 {
		return principal{}, false
	}
	return t.who[found], true
}

// originAllowed reports whether a browser origin may call the gateway: localhost origins and
// those in AllowedOrigins ("*" allows any).
func (g *Gateway) originAllowed(origin string) bool {
	for _, o := range g.cfg.AllowedOrigins {
		if o == "*" || strings.EqualFold(strings.TrimSuffix(o, "/"), origin) {
			return true
		}
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	host := u.Hostname()
	if host == "localhost" || strings.HasSuffix(host, ".localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (g *Gateway) serveCard(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, g.Card())
}

func (g *Gateway) serveHealth(w http.ResponseWriter, _ *http.Request) {
	servers := make(map[string]bool, len(g.backends))
	ok := true
	for _, b := range g.backends {
		h, _ := b.health()
		servers[b.name] = h
		ok = ok && h
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": ok, "servers": servers})
}

// Gate is the body of POST /tools/disable and /tools/enable.
type Gate struct {
	Role  string   `json:"role"` // empty means DefaultRole
	Tools []string `json:"tools"`
}

func (g *Gateway) serveGate(disable bool) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var req Gate
		if err := decodeStrict(w, r, &req); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		role := normRole(req.Role)
		if err := validRole(role); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		if len(req.Tools) == 0 {
			writeError(w, http.StatusBadRequest, "no tools")
			return
		}
		if err := validPatterns(req.Tools); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		g.setAccess(role, req.Tools, disable, "admin")
		rules := g.roles.snapshot()[role]
		if rules == nil {
			rules = []Rule{}
		}
		writeJSON(w, http.StatusOK, map[string]any{"role": role, "rules": rules})
	}
}

func (g *Gateway) serveTrajectory(w http.ResponseWriter, r *http.Request) {
	var after int64
	if s := r.URL.Query().Get("after"); s != "" {
		if err := json.Unmarshal([]byte(s), &after); err != nil {
			writeError(w, http.StatusBadRequest, "after: want a call id")
			return
		}
	}
	w.Header().Set("Content-Type", "application/x-ndjson")
	_ = g.traj.writeSince(w, after) // an error means the client went away

}

// decodeStrict decodes one JSON object of at most maxControlBody bytes with no unknown fields.
func decodeStrict(w http.ResponseWriter, r *http.Request, v any) error {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxControlBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("trailing data after the JSON object")
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, map[string]string{"error": msg})
}
