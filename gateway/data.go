package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agentenv/agentenv/envproto"
)

// maxDataBody bounds a forwarded data plane request (data/add carries files inline).
const maxDataBody = 256 << 20

// dataBackend returns the one backend with a data plane.
func (g *Gateway) dataBackend() (*backend, error) {
	var found []*backend
	for _, b := range g.backends {
		b.mu.Lock()
		has := b.dataURL != ""
		b.mu.Unlock()
		if has {
			found = append(found, b)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("no server has a data plane")
	case 1:
		return found[0], nil
	}
	names := make([]string, len(found))
	for i, b := range found {
		names[i] = b.name
	}
	return nil, fmt.Errorf("servers %s have a data plane: use %s{name}%s", strings.Join(names, ", "), serverDataPrefix, envproto.DataPath)
}

func (g *Gateway) serveData(w http.ResponseWriter, r *http.Request) {
	b, err := g.dataBackend()
	if err != nil {
		writeRPCError(w, http.StatusNotFound, err.Error())
		return
	}
	g.forwardData(w, r, b)
}

func (g *Gateway) serveServerData(w http.ResponseWriter, r *http.Request) {
	b := g.byName[r.PathValue("name")]
	if b == nil {
		writeRPCError(w, http.StatusNotFound, fmt.Sprintf("no server %q", r.PathValue("name")))
		return
	}
	g.forwardData(w, r, b)
}

// forwardData forwards a data plane request to b and copies its answer back.
func (g *Gateway) forwardData(w http.ResponseWriter, r *http.Request, b *backend) {
	b.mu.Lock()
	target := b.dataURL
	b.mu.Unlock()
	if target == "" {
		writeRPCError(w, http.StatusNotFound, fmt.Sprintf("server %s has no data plane", b.name))
		return
	}
	ctx, cancel := context.WithTimeout(withRole(r.Context(), normRole(r.Header.Get(RoleHeader))), g.cfg.CallTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, http.MaxBytesReader(w, r.Body, maxDataBody))
	if err != nil {
		writeRPCError(w, http.StatusInternalServerError, err.Error())
		return
	}
	req.Header.Set("Content-Type", r.Header.Get("Content-Type"))
	resp, err := b.httpc.Do(req)
	if err != nil {
		writeRPCError(w, http.StatusBadGateway, fmt.Sprintf("server %s: %v: %v", b.name, ErrBackendUnavailable, err))
		return
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "" {
		w.Header().Set("Content-Type", ct)
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// writeRPCError answers a data plane request with a JSON-RPC error.
func writeRPCError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(envproto.Response{
		JSONRPC: "2.0", ID: json.RawMessage("null"),
		Error: &envproto.Error{Code: envproto.CodeInternalError, Message: msg},
	})
}
