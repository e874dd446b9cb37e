package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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

// call gates, routes and forwards one tool call, and records it in the trajectory.
func (g *Gateway) call(ctx context.Context, ci callInfo) (res *mcp.CallToolResult, err error) {
	ci.role = normRole(ci.role)
	rec := CallRecord{
		Via: ci.via, Session: ci.session, Role: ci.role, Tool: ci.tool,
		Arguments: rawArgs(ci.args), Started: time.Now().UTC(),
	}
	defer func() {
		rec.DurationMS = float64(time.Since(rec.Started).Microseconds()) / 1000
		if err != nil {
			rec.Error = err.Error()
		} else if b, merr := json.Marshal(res); merr == nil {
			rec.Result = b
		}
		g.traj.add(rec)
	}()

	r := g.currentUnion().byName[ci.tool]
	if r == nil {
		return nil, fmt.Errorf("%w: %q", ErrToolNotFound, ci.tool)
	}
	rec.Server, rec.ServerTool = r.backend.name, r.tool.Name
	if g.roles.disabled(ci.role, r.public, r.qualified) {
		return nil, fmt.Errorf("%w: %q is disabled for role %q", ErrToolDisabled, ci.tool, ci.role)
	}
	// The call timeout covers the wait for the gate in consistent mode too.
	ctx, cancel := context.WithTimeout(withRole(ctx, ci.role), g.cfg.CallTimeout)
	defer cancel()
	release, err := g.calls.acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("wait for consistent mode: %w", err)
	}
	defer release()
	res, err = r.backend.call(ctx, r.tool.Name, rawArgs(ci.args), stampMeta(ci.meta, ci.role, ci.session))
	if err == nil && res.Content == nil {
		res.Content = []mcp.Content{} // the spec wants an array, never null
	}
	return res, err
}

// stampMeta copies the caller's _meta and adds the role and session. A progress token is left
// out: progress notifications are not relayed through the shared backend session.
func stampMeta(in mcp.Meta, role, session string) mcp.Meta {
	out := make(mcp.Meta, len(in)+2)
	maps.Copy(out, in)
	delete(out, "progressToken")
	out[MetaRole] = role
	if session != "" {
		out[MetaSession] = session
	}
	return out
}

// callGate serializes tool calls in consistent mode; in performance mode it admits all.
type callGate struct{ sem chan struct{} }

func newCallGate(serialize bool) *callGate {
	if !serialize {
		return &callGate{}
	}
	return &callGate{sem: make(chan struct{}, 1)}
}

// acquire waits for the gate or ctx, and returns the function that releases it.
func (c *callGate) acquire(ctx context.Context) (func(), error) {
	if c.sem == nil {
		return func() {}, nil
	}
	select {
	case c.sem <- struct{}{}:
		return func() { <-c.sem }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}
