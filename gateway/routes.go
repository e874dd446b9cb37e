package gateway

import (
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
// auth, then the bearer token on everything else.
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

	want := sha256.Sum256([]byte(g.cfg.Token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if o := r.Header.Get("Origin"); o != "" && !g.originAllowed(o) {
			writeError(w, http.StatusForbidden, "origin "+o+" not allowed")
			return
		}
		if r.URL.Path == HealthPath {
			g.serveHealth(w, r)
			return
		}
		if !authorized(r, want) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="agentenv"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token")
			return
		}
		mux.ServeHTTP(w, r)
	})
}

// authorized reports whether r carries the bearer token whose hash is want. Comparing hashes
// keeps the comparison constant-time in the token's length too.
func authorized(r *http.Request, want [sha256.Size]byte) bool {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return false
	}
	got := sha256.Sum256([]byte(strings.TrimSpace(token)))
	return subtle.ConstantTimeCompare(got[:], want[:]) == 1
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
		g.roles.set(role, req.Tools, disable)
		g.mcp.sync()
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
