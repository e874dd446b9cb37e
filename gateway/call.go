package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/envproto"
)

// callInfo is one tool call as it reaches the gateway, from /mcp or /step.
type callInfo struct {
	via     string // "mcp" or "step"
	role    string
	session string
	tool    string // public name
	args    json.RawMessage
	meta    mcp.Meta
}

// forwardFunc sends a routed, gated call to its backend and returns the raw CallToolResult.
type forwardFunc func(ctx context.Context, r *route) (json.RawMessage, error)

// call gates, routes and forwards one tool call through the backend's SDK client session, and
// records it in the trajectory.
func (g *Gateway) call(ctx context.Context, ci callInfo) (*mcp.CallToolResult, error) {
	var res *mcp.CallToolResult
	out, err := g.dispatch(ctx, &ci, func(ctx context.Context, r *route) (json.RawMessage, error) {
		var err error
		res, err = r.backend.call(ctx, r.tool.Name, rawArgs(ci.args), stampMeta(ctx, ci.meta, ci.role, ci.session))
		if err != nil {
			return nil, err
		}
		if res.Content == nil {
			res.Content = []mcp.Content{} // the spec wants an array, never null
		}
		return json.Marshal(res)
	})
	if err != nil {
		return nil, err
	}
	if res == nil || out.rewritten { // a tool of the gateway's own, a screenshot or a trigger's message added
		res = new(mcp.CallToolResult)
		if err := json.Unmarshal(out.raw, res); err != nil {
			return nil, fmt.Errorf("decode result: %w", err)
		}
	}
	return res, nil
}

// dispatched is what dispatch returns: the CallToolResult as JSON, and whether it differs from
// what the forward func returned.
type dispatched struct {
	raw       json.RawMessage
	rewritten bool
}

// dispatch is the one path of every tool call, SDK or fast: it resolves the tool, applies the
// caller's role rules, waits for the call's lane in consistent mode, runs forward under the
// call timeout and records the call in the trajectory.
func (g *Gateway) dispatch(ctx context.Context, ci *callInfo, forward forwardFunc) (out dispatched, err error) {
	ci.role = normRole(ci.role)
	rec := envproto.CallRecord{
		Via: ci.via, Session: ci.session, Role: ci.role, Tool: ci.tool,
		Arguments: rawArgs(ci.args), Started: time.Now().UTC(),
	}
	defer func() {
		if rec.Server == "" {
			return // only calls to tools that exist are recorded
		}
		rec.DurationMS = float64(time.Since(rec.Started).Microseconds()) / 1000
		if err != nil {
			rec.Error = err.Error()
		} else {
			rec.Result = out.raw
		}
		g.traj.add(rec)
	}()

	if now, ok := g.clock.now(); ok {
		rec.VirtualTime = formatVirtual(now)
		ctx = withVirtualTime(ctx, rec.VirtualTime)
	}
	r := g.currentUnion().byName[ci.tool]
	if r == nil {
		return out, fmt.Errorf("%w: %q", ErrToolNotFound, ci.tool)
	}
	rec.Server, rec.ServerTool = r.backend.name, r.tool.Name
	if g.roles.disabled(ci.role, r.public, r.qualified, r.tool.Name) {
		return out, fmt.Errorf("%w: %q is disabled for role %q", ErrToolDisabled, ci.tool, ci.role)
	}
	// The call timeout covers the wait for the lane in consistent mode too.
	ctx, cancel := context.WithTimeout(withRole(ctx, ci.role), g.cfg.CallTimeout)
	defer cancel()
	if r.local != nil {
		out.raw, err = r.local(ctx, ci.args)
	} else {
		var release func()
		release, err = g.lanes.acquire(ctx, r.backend)
		if err != nil {
			return out, fmt.Errorf("wait for consistent mode: %w", err)
		}
		out.raw, err = forward(ctx, r)
		if err == nil && g.shots.after(r) {
			// In the call's lane, so that in consistent mode the screenshot is of the page
			// this call left; the trajectory records the result with it.
			out.raw, out.rewritten = g.attachScreenshot(ctx, r, out.raw, stampMeta(ctx, nil, ci.role, ci.session)), true
		}
		release() // before the triggers: their actions may call the same backend
	}
	if err != nil {
		return out, err
	}
	if g.trig != nil {
		raw := g.trig.afterCall(ctx, completedCall{Role: ci.role, Tool: ci.tool, Args: ci.args, Result: out.raw, Trigger: fromTrigger(ctx)})
		out.rewritten = out.rewritten || len(raw) != len(out.raw) || (len(raw) > 0 && &raw[0] != &out.raw[0])
		out.raw = raw
	}
	return out, nil
}

// stampMeta copies the caller's _meta and adds the role and session. A progress token is left
// out: progress notifications are not relayed through the shared backend session.
func stampMeta(ctx context.Context, in mcp.Meta, role, session string) mcp.Meta {
	out := make(mcp.Meta, len(in)+3)
	maps.Copy(out, in)
	delete(out, "progressToken")
	out[MetaRole] = role
	if session != "" {
		out[MetaSession] = session
	}
	if vt := virtualTimeOf(ctx); vt != "" {
		out[MetaVirtualTime] = vt
	}
	return out
}
