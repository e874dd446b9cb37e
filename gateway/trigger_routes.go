package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/agentenv/agentenv/envproto"
)

// triggerKey is the context key of withTrigger.
type triggerKey struct{}

// withTrigger marks ctx as a trigger's own call, which no trigger watches.
func withTrigger(ctx context.Context) context.Context {
	return context.WithValue(ctx, triggerKey{}, true)
}

// fromTrigger reports whether ctx is a trigger's own call.
func fromTrigger(ctx context.Context) bool { v, _ := ctx.Value(triggerKey{}).(bool); return v }

// gatewayEffects are the trigger actions' effects on a gateway.
type gatewayEffects struct{ g *Gateway }

func (fx gatewayEffects) callTool(ctx context.Context, role, tool string, args json.RawMessage) (json.RawMessage, error) {
	res, err := fx.g.call(ctx, callInfo{via: "trigger", role: role, tool: tool, args: args})
	if err != nil {
		return nil, err
	}
	return json.Marshal(res)
}

func (fx gatewayEffects) setAccess(role string, patterns []string, disable bool) error {
	fx.g.setAccess(role, patterns, disable, "trigger")
	return nil
}

func (fx gatewayEffects) dataCall(ctx context.Context, server, method string, params json.RawMessage) (json.RawMessage, error) {
	g := fx.g
	var b *backend
	if server == "" {
		var err error
		if b, err = g.dataBackend(); err != nil {
			return nil, err
		}
	} else if b = g.byName[server]; b == nil {
		return nil, fmt.Errorf("no server %q", server)
	}
	b.mu.Lock()
	target := b.dataURL
	b.mu.Unlock()
	if target == "" {
		return nil, fmt.Errorf("server %s has no data plane", b.name)
	}
	if len(params) == 0 {
		params = json.RawMessage("{}")
	}
	body, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
	req, err := http.NewRequestWithContext(withRole(ctx, DefaultRole), http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := b.httpc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("server %s: %w: %v", b.name, ErrBackendUnavailable, err)
	}
	defer resp.Body.Close()
	var out struct {
		Result json.RawMessage `json:"result"`
		Error  *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxDataBody)).Decode(&out); err != nil {
		return nil, fmt.Errorf("server %s: %s: %s answered: %w", b.name, method, resp.Status, err)
	}
	if out.Error != nil {
		return nil, fmt.Errorf("server %s: %s: %d %s", b.name, method, out.Error.Code, out.Error.Message)
	}
	return out.Result, nil
}

// setAccess disables (or enables) patterns for role, tells the MCP sessions and records the
// change in the trajectory (via "control", by says who made it).
func (g *Gateway) setAccess(role string, patterns []string, disable bool, by string) {
	g.roles.set(role, patterns, disable)
	g.mcp.sync()
	path := EnablePath
	if disable {
		path = DisablePath
	}
	g.control(strings.TrimPrefix(path, "/"), role, map[string]any{"role": role, "tools": patterns, "by": by})
}

// control records a change made through the admin routes, or by a trigger, in the trajectory.
func (g *Gateway) control(what, role string, body any) {
	args, _ := json.Marshal(body)
	rec := envproto.CallRecord{Via: "control", Role: role, Tool: what, Arguments: args, Started: time.Now().UTC()}
	if vt, ok := g.clock.now(); ok {
		rec.VirtualTime = formatVirtual(vt)
	}
	g.traj.add(rec)
}

func (g *Gateway) serveTriggersRegister(w http.ResponseWriter, r *http.Request) {
	var req TriggerRegister
	if err := decodeStrict(w, r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	ids, err := g.trig.register(req)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	g.control("triggers/register", DefaultRole, map[string]any{"added": ids, "watch_roles": req.WatchRoles})
	all := []string{}
	for _, t := range g.trig.state().Triggers {
		all = append(all, t.ID)
	}
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "added": ids, "all": all})
}

func (g *Gateway) serveTriggersRemove(w http.ResponseWriter, r *http.Request) {
	var req TriggerRemove
	if err := decodeStrict(w, r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	if slices.Contains(req.IDs, "") || req.IDs == nil {
		writeError(w, http.StatusBadRequest, "ids: want a list of trigger ids")
		return
	}
	removed := g.trig.remove(req.IDs)
	g.control("triggers/remove", DefaultRole, map[string]any{"removed": removed})
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "removed": removed})
}

func (g *Gateway) serveTriggersClear(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		var req struct{}
		if err := decodeStrict(w, r, &req); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	g.trig.clear()
	g.control("triggers/clear", DefaultRole, struct{}{})
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

func (g *Gateway) serveTriggersState(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, g.trig.state())
}
