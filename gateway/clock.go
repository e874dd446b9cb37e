package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The virtual clock (the anchor's urn:agentenv:clock/v1). Off by default; PUT /clock/set-time
// arms it at a virtual time advancing at a rate of virtual seconds per real second (0 freezes
// it). Reads derive t0 + real elapsed × rate, so time advances on its own and a read never
// changes it. While armed the gateway serves a get_time tool and stamps every forwarded tool
// call with the virtual time: the VirtualTimeHeader header and the MetaVirtualTime _meta key.
const (
	ClockSetPath   = "/clock/set-time"
	ClockClearPath = "/clock/clear"
	ClockTimePath  = "/clock/time"
	ClockStatePath = "/clock/state"

	// GetTimeTool is the tool the gateway serves while the clock is armed.
	GetTimeTool = "get_time"
	// VirtualTimeHeader carries the virtual time (RFC 3339) on calls forwarded while armed.
	VirtualTimeHeader = "AgentEnv-Virtual-Time"
	// MetaVirtualTime is the _meta key of the virtual time on calls forwarded while armed.
	MetaVirtualTime = "agentenv.io/virtual_time"

	// MaxClockRate is the fastest virtual clock: one real second is one virtual day.
	MaxClockRate = 86400.0
)

// localServer is the server name of the tools the gateway serves itself (get_time).
const localServer = "gateway"

// localBackend stands for the gateway as the server of its own tools, in the union, /state,
// the card and the trajectory. It is never connected or forwarded to.
var localBackend = &backend{name: localServer}

// getTimeDescription tells the agent to trust this clock, not its host's.
const getTimeDescription = "Returns the current date and time for this environment. The clock of " +
	"the machine you run on is not synchronized with this environment: call this tool and " +
	"derive from its value every date or time you pass to another tool or resolve (today, " +
	"this week, overdue). Time advances while you work; read it again before each write."

// ClockSet is the body of PUT /clock/set-time.
type ClockSet struct {
	VirtualTime string   `json:"virtual_time"` // RFC 3339, e.g. 2026-01-05T09:00:00Z
	Rate        *float64 `json:"virtual_seconds_per_real_second,omitempty"`
}

// ClockState is the answer of GET /clock/state (and of set-time).
type ClockState struct {
	Armed       bool     `json:"armed"`
	T0          string   `json:"t0,omitempty"`
	Rate        *float64 `json:"virtual_seconds_per_real_second,omitempty"`
	VirtualTime string   `json:"virtual_time,omitempty"`
}

// rfc3339RE is the grammar a virtual time must follow: seconds mandatory, offset Z or ±hh:mm.
var rfc3339RE = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$`)

// parseVirtualTime parses an RFC 3339 virtual time into UTC.
func parseVirtualTime(s string) (time.Time, error) {
	if !rfc3339RE.MatchString(s) {
		return time.Time{}, fmt.Errorf("virtual_time %q: want RFC 3339, YYYY-MM-DDThh:mm:ss[.fff](Z|+hh:mm)", s)
	}
	t, err := time.Parse(time.RFC3339Nano, s[:10]+"T"+s[11:])
	if err != nil {
		return time.Time{}, fmt.Errorf("virtual_time %q: %w", s, err)
	}
	return t.UTC(), nil
}

// formatVirtual renders a virtual time at second precision, as every reader sees it.
func formatVirtual(t time.Time) string { return t.UTC().Truncate(time.Second).Format(time.RFC3339) }

// virtualClock is the gateway's virtual clock. Safe for concurrent use.
type virtualClock struct {
	real func() time.Time // the real clock; time.Now outside tests

	mu     sync.Mutex
	armed  bool
	t0     time.Time // virtual time at anchor
	anchor time.Time // real time of arming
	rate   float64
	gen    uint64 // bumped on every arm and clear
}

func newVirtualClock(real func() time.Time) *virtualClock {
	if real == nil {
		real = time.Now
	}
	return &virtualClock{real: real, rate: 1}
}

// set arms the clock at vt advancing at rate (1 if nil).
func (c *virtualClock) set(vt string, rate *float64) (ClockState, error) {
	t0, err := parseVirtualTime(vt)
	if err != nil {
		return ClockState{}, err
	}
	r := 1.0
	if rate != nil {
		r = *rate
	}
	if math.IsNaN(r) || math.IsInf(r, 0) || r < 0 || r > MaxClockRate {
		return ClockState{}, fmt.Errorf("virtual_seconds_per_real_second %g: want 0 to %g", r, MaxClockRate)
	}
	c.mu.Lock()
	c.armed, c.t0, c.anchor, c.rate = true, t0, c.real(), r
	c.gen++
	c.mu.Unlock()
	return c.state(), nil
}

// clear disarms the clock; it is idempotent.
func (c *virtualClock) clear() {
	c.mu.Lock()
	c.armed, c.t0, c.anchor, c.rate = false, time.Time{}, time.Time{}, 1
	c.gen++
	c.mu.Unlock()
}

// now returns the virtual time, or false while unarmed.
func (c *virtualClock) now() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.nowLocked()
}

func (c *virtualClock) nowLocked() (time.Time, bool) {
	if !c.armed {
		return time.Time{}, false
	}
	elapsed := c.real().Sub(c.anchor).Seconds() * c.rate
	const maxSeconds = float64(math.MaxInt64 / int64(time.Second))
	if elapsed > maxSeconds {
		elapsed = maxSeconds
	}
	return c.t0.Add(time.Duration(elapsed * float64(time.Second))), true
}

// origin returns the virtual time the clock was armed at and its generation.
func (c *virtualClock) origin() (t0 time.Time, gen uint64, armed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t0, c.gen, c.armed
}

func (c *virtualClock) state() ClockState {
	c.mu.Lock()
	defer c.mu.Unlock()
	now, ok := c.nowLocked()
	if !ok {
		return ClockState{Armed: false}
	}
	rate := c.rate
	return ClockState{Armed: true, T0: formatVirtual(c.t0), Rate: &rate, VirtualTime: formatVirtual(now)}
}

func (g *Gateway) serveClockSet(w http.ResponseWriter, r *http.Request) {
	var req ClockSet
	if err := decodeStrict(w, r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	st, err := g.clock.set(req.VirtualTime, req.Rate)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	g.control("clock/set-time", DefaultRole, req)
	g.refreshUnion()
	writeJSON(w, http.StatusOK, st)
}

func (g *Gateway) serveClockClear(w http.ResponseWriter, r *http.Request) {
	if r.ContentLength != 0 {
		var req struct{}
		if err := decodeStrict(w, r, &req); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
	}
	g.clock.clear()
	g.control("clock/clear", DefaultRole, struct{}{})
	g.refreshUnion()
	writeJSON(w, http.StatusOK, map[string]any{"ok": true, "armed": false})
}

func (g *Gateway) serveClockTime(w http.ResponseWriter, _ *http.Request) {
	now, ok := g.clock.now()
	if !ok {
		writeError(w, http.StatusNotFound, "clock is not armed")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"virtual_time": formatVirtual(now)})
}

func (g *Gateway) serveClockState(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, g.clock.state())
}

// getTime is the get_time tool: {"current_time": RFC 3339} as text and structured content.
func (g *Gateway) getTime(context.Context, json.RawMessage) (json.RawMessage, error) {
	now, ok := g.clock.now()
	if !ok {
		return json.Marshal(errorResult(errors.New("time service unavailable")))
	}
	v := map[string]string{"current_time": formatVirtual(now)}
	text, _ := json.Marshal(v)
	return json.Marshal(&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}, StructuredContent: v})
}

// getTimeTool is get_time as the gateway lists it.
var getTimeTool = &mcp.Tool{
	Name:        GetTimeTool,
	Description: getTimeDescription,
	InputSchema: map[string]any{"type": "object", "properties": map[string]any{}, "additionalProperties": false},
	Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
}

// withLocal returns u with the gateway's own tools added: get_time while the clock is armed,
// list_website_urls when the env has websites; a tool a backend serves under the same name
// stays the backend's (and it is logged).
func (g *Gateway) withLocal(u *union) *union {
	var locals []*route
	add := func(tool *mcp.Tool, call func(context.Context, json.RawMessage) (json.RawMessage, error)) {
		if _, taken := u.byName[tool.Name]; taken {
			g.log.Warn("a server serves a tool of the gateway's own: the gateway's is not added", "tool", tool.Name)
			return
		}
		print, _ := json.Marshal(tool)
		toolJSON, _ := json.Marshal(tool.Name)
		locals = append(locals, &route{public: tool.Name, qualified: localServer + prefixSep + tool.Name, backend: localBackend,
			tool: tool, exposed: tool, print: string(print), toolJSON: toolJSON, local: call})
	}
	if _, _, armed := g.clock.origin(); armed {
		add(getTimeTool, g.getTime)
	}
	if len(g.cfg.Websites) > 0 {
		add(listWebsiteURLsTool, g.listWebsiteURLs)
	}
	if len(locals) == 0 {
		return u
	}
	out := &union{tools: append(append([]*route(nil), u.tools...), locals...), byName: make(map[string]*route, len(u.byName)+len(locals))}
	for k, v := range u.byName {
		out.byName[k] = v
	}
	for _, r := range locals {
		out.byName[r.public] = r
	}
	slices.SortFunc(out.tools, func(a, b *route) int { return strings.Compare(a.public, b.public) })
	return out
}

// refreshUnion rebuilds the union after the gateway's own tools changed (the clock armed or
// cleared) and tells the MCP sessions.
func (g *Gateway) refreshUnion() {
	g.mu.Lock()
	u, err := buildUnion(g.cfg.ToolNames, g.backends)
	if err != nil { // the backends' union did not change: keep it, recompute the local part
		g.mu.Unlock()
		g.log.Warn("rebuild tools", "err", err)
		return
	}
	g.union = g.withLocal(u)
	g.mu.Unlock()
	g.mcp.sync()
}

type virtualTimeKey struct{}

// withVirtualTime stores the virtual time a forwarded call carries.
func withVirtualTime(ctx context.Context, vt string) context.Context {
	return context.WithValue(ctx, virtualTimeKey{}, vt)
}

// virtualTimeOf returns the virtual time ctx carries, or "".
func virtualTimeOf(ctx context.Context) string {
	vt, _ := ctx.Value(virtualTimeKey{}).(string)
	return vt
}

// stampClock adds the virtual time of ctx, if any, to a forwarded call's raw _meta object.
func stampClock(ctx context.Context, meta json.RawMessage) json.RawMessage {
	vt := virtualTimeOf(ctx)
	if vt == "" {
		return meta
	}
	var m map[string]json.RawMessage
	if json.Unmarshal(meta, &m) != nil || m == nil {
		m = map[string]json.RawMessage{}
	}
	m[MetaVirtualTime], _ = json.Marshal(vt)
	b, err := json.Marshal(m)
	if err != nil {
		return meta
	}
	return b
}
