package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Triggers (the anchor's urn:agentenv:triggers/v1, a subset of its shapes plus turn triggers
// and message actions). A trigger watches the tool calls of the watched roles (watch_roles,
// default ["default"]) and fires when
//
//   - when.type "action": a call whose tool matches when.tool ('*' matches any run of
//     characters) succeeds and every when.where predicate holds ({regex}, {equals} or {exists}
//     on "args.<path>", "result.<path>" (the result's text parsed as JSON) or a bare argument
//     name); once, or on every match with when.repeat;
//   - when.type "turn": the when.count-th call of the watched roles since the first
//     registration (after a clear) completes;
//   - when.type "time": the virtual clock reaches when.at (RFC 3339, or an ISO 8601 duration
//     such as "PT30M" after the time the clock was armed at). Time triggers are evaluated on
//     every watched call and once a second while the clock is armed.
//
// Its actions run in order: "message" {text} is appended as a text content to the result of
// the next watched call that completes after it ran (so with a barrier, to the provoking call's
// own); "tool" {tool, args, as} calls a tool through the gateway as role as (default
// "default"), recorded in the trajectory with via "trigger" and never itself watched;
// The args of a tool action and the params of a data action may hold ${args.<path>} and
// ${result.<path>} placeholders (the provoking call's arguments and result; ? at the end makes
// one optional), so an action can mirror what the agent wrote; time triggers have none.
// "permission" {action: enable|disable, role, tools: [patterns] or "*"} changes tool gating as
// /tools/enable|disable does; "data" {server, method, params} sends one data plane request to a
// server. A barrier {at: "provoking_call", timeout_seconds} on an action or turn trigger holds
// the provoking call's answer until the actions have run (at most timeout_seconds, default
// 30), so the agent's next move sees their effect.
const (
	TriggersRegisterPath = "/triggers/register"
	TriggersRemovePath   = "/triggers/remove"
	TriggersClearPath    = "/triggers/clear"
	TriggersStatePath    = "/triggers/state"
)

// Bounds of the trigger engine.
const (
	maxTriggers            = 1024
	maxTriggerEvents       = 10_000
	defaultBarrierTimeout  = 30 * time.Second
	maxBarrierTimeout      = 10 * time.Minute
	triggerActionTimeout   = 60 * time.Second
	triggerDriveInterval   = time.Second
	maxPendingMessages     = 1024
	barrierAtProvokingCall = "provoking_call"
)

// Trigger statuses, as GET /triggers/state reports them.
const (
	TriggerArmed  = "armed"
	TriggerFiring = "firing"
	TriggerFired  = "fired"
	TriggerFailed = "failed"
)

// TriggerRegister is the body of POST /triggers/register: triggers added by id (an identical
// re-add is a no-op, a different spec under a known id is refused).
type TriggerRegister struct {
	WatchRoles []string      `json:"watch_roles,omitempty"`
	Triggers   []TriggerSpec `json:"triggers"`
}

// TriggerSpec is one trigger.
type TriggerSpec struct {
	ID      string          `json:"id"`
	When    TriggerWhen     `json:"when"`
	Actions []TriggerAction `json:"actions"`
	Barrier *TriggerBarrier `json:"barrier,omitempty"`
}

// TriggerWhen is what fires a trigger; see the package's trigger documentation.
type TriggerWhen struct {
	Type   string               `json:"type"`            // "action", "turn" or "time"
	Tool   string               `json:"tool,omitempty"`  // action: a tool name pattern
	Where  map[string]Predicate `json:"where,omitempty"` // action
	Repeat bool                 `json:"repeat,omitempty"`
	Count  int                  `json:"count,omitempty"` // turn
	At     string               `json:"at,omitempty"`    // time
}

// Predicate tests one value: exactly one of its fields is set.
type Predicate struct {
	Regex  *string         `json:"regex,omitempty"`
	Equals json.RawMessage `json:"equals,omitempty"`
	Exists *bool           `json:"exists,omitempty"`
}

// TriggerAction is one thing a trigger does when it fires.
type TriggerAction struct {
	Type   string          `json:"type"`           // "message", "tool", "permission" or "data"
	Text   string          `json:"text,omitempty"` // message
	Tool   string          `json:"tool,omitempty"` // tool
	Args   json.RawMessage `json:"args,omitempty"` // tool: a JSON object
	As     string          `json:"as,omitempty"`   // tool: the role it calls as
	Action string          `json:"action,omitempty"`
	Role   string          `json:"role,omitempty"`  // permission
	Tools  json.RawMessage `json:"tools,omitempty"` // permission: ["pattern", ...] or "*"
	Server string          `json:"server,omitempty"`
	Method string          `json:"method,omitempty"` // data
	Params json.RawMessage `json:"params,omitempty"` // data
}

// TriggerBarrier holds the provoking call until the trigger's actions have run.
type TriggerBarrier struct {
	At             string  `json:"at"`
	TimeoutSeconds float64 `json:"timeout_seconds,omitempty"`
}

// TriggerRemove is the body of POST /triggers/remove.
type TriggerRemove struct {
	IDs []string `json:"ids"`
}

// TriggerState is the answer of GET /triggers/state.
type TriggerState struct {
	Config          TriggerConfig   `json:"config"`
	Triggers        []TriggerStatus `json:"triggers"`
	Events          []TriggerEvent  `json:"events"`
	EventsDropped   int64           `json:"events_dropped"`
	PendingMessages int             `json:"pending_messages"`
	Turns           int             `json:"turns"` // calls of the watched roles since the first register
}

// TriggerConfig is the engine's configuration in TriggerState.
type TriggerConfig struct {
	WatchRoles []string `json:"watch_roles"`
}

// TriggerStatus is one trigger in TriggerState.
type TriggerStatus struct {
	ID           string          `json:"id"`
	Type         string          `json:"type"`
	When         TriggerWhen     `json:"when"`
	Status       string          `json:"status"`
	DetectedAt   string          `json:"detected_at,omitempty"`
	FiredAt      string          `json:"fired_at,omitempty"`
	FireCount    int             `json:"fire_count"`
	FailureCount int             `json:"failure_count"`
	Barrier      *TriggerBarrier `json:"barrier,omitempty"`
	NextMark     string          `json:"next_mark,omitempty"` // time triggers, once resolved
}

// TriggerEvent is one entry of the firing log.
type TriggerEvent struct {
	Seq         int64  `json:"seq"`
	Kind        string `json:"kind"` // added, removed, detected, action_ok, action_failed, fired, failed
	Trigger     string `json:"trigger"`
	At          string `json:"at"` // real time, UTC
	VirtualTime string `json:"virtual_time,omitempty"`
	Detail      any    `json:"detail,omitempty"`
}

// completedCall is one tool call that completed, as the trigger engine sees it.
type completedCall struct {
	Role    string
	Tool    string
	Args    json.RawMessage
	Result  json.RawMessage // the CallToolResult
	Trigger bool            // made by a trigger's tool action: never watched
}

// triggerEffects is how fired actions act on the gateway.
type triggerEffects interface {
	// callTool calls tool with args as role through the gateway's one call path, gated and
	// recorded as a trigger's call, and returns the CallToolResult.
	callTool(ctx context.Context, role, tool string, args json.RawMessage) (json.RawMessage, error)
	// setAccess disables (or enables) the tools matching patterns for role, as
	// /tools/disable|enable does, and records the change.
	setAccess(role string, patterns []string, disable bool) error
	// dataCall sends one data plane JSON-RPC request to server and returns its result.
	dataCall(ctx context.Context, server, method string, params json.RawMessage) (json.RawMessage, error)
}

// trigger is one registered trigger and its state.
type trigger struct {
	spec       TriggerSpec
	canon      []byte // the spec encoded, to tell an identical re-add
	status     string
	detectedAt string
	firedAt    string
	fires      int
	failures   int
	// time triggers: the virtual instant it fires at, resolved against the clock generation gen.
	mark     time.Time
	resolved bool
	gen      uint64
}

// triggerEngine holds the triggers of a gateway. Safe for concurrent use.
type triggerEngine struct {
	base  context.Context // bounds the actions of fires (the gateway's life)
	clock *virtualClock
	now   func() time.Time // real time, for the log
	fx    triggerEffects
	log   *slog.Logger

	mu         sync.Mutex
	watch      []string
	configured bool
	order      []string
	byID       map[string]*trigger
	turns      int
	messages   []string
	events     []TriggerEvent
	seq        int64
	dropped    int64
	inflight   sync.WaitGroup
}

func newTriggerEngine(base context.Context, clock *virtualClock, now func() time.Time, fx triggerEffects, log *slog.Logger) *triggerEngine {
	if now == nil {
		now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &triggerEngine{base: base, clock: clock, now: now, fx: fx, log: log,
		watch: []string{DefaultRole}, byID: make(map[string]*trigger)}
}

// register adds the triggers of req; nothing is added when any is refused.
func (e *triggerEngine) register(req TriggerRegister) ([]string, error) {
	for _, r := range req.WatchRoles {
		if r == "" {
			return nil, errors.New("watch_roles: empty role")
		}
		if err := validRole(r); err != nil {
			return nil, fmt.Errorf("watch_roles: %w", err)
		}
	}
	if req.Triggers == nil {
		return nil, errors.New("triggers: want a list")
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	watch := e.watch
	if req.WatchRoles != nil {
		w := slices.Clone(req.WatchRoles)
		slices.Sort(w)
		w = slices.Compact(w)
		if e.configured && !slices.Equal(w, e.watch) {
			return nil, fmt.Errorf("watch_roles %v conflicts with the registered %v: clear to change it", w, e.watch)
		}
		watch = w
	}
	var ids []string
	var add []*trigger
	seen := map[string]bool{}
	for i := range req.Triggers {
		s := req.Triggers[i]
		if s.ID == "" {
			return nil, fmt.Errorf("triggers[%d]: want an id", i)
		}
		if seen[s.ID] {
			return nil, fmt.Errorf("trigger %q: duplicate id", s.ID)
		}
		seen[s.ID] = true
		if err := checkSpec(&s); err != nil {
			return nil, fmt.Errorf("trigger %q: %w", s.ID, err)
		}
		canon, _ := json.Marshal(s)
		ids = append(ids, s.ID)
		if old, ok := e.byID[s.ID]; ok {
			if !bytes.Equal(old.canon, canon) {
				return nil, fmt.Errorf("trigger %q: already registered with another spec: remove it first or use a new id", s.ID)
			}
			continue
		}
		add = append(add, &trigger{spec: s, canon: canon, status: TriggerArmed})
	}
	if len(e.byID)+len(add) > maxTriggers {
		return nil, fmt.Errorf("more than %d triggers", maxTriggers)
	}
	e.watch, e.configured = watch, true
	for _, t := range add {
		e.byID[t.spec.ID] = t
		e.order = append(e.order, t.spec.ID)
		e.emitLocked("added", t.spec.ID, nil)
	}
	return ids, nil
}

// remove deletes the triggers of ids; unknown ids are ignored.
func (e *triggerEngine) remove(ids []string) []string {
	e.mu.Lock()
	defer e.mu.Unlock()
	removed := []string{}
	for _, id := range ids {
		if _, ok := e.byID[id]; ok {
			delete(e.byID, id)
			e.order = slices.DeleteFunc(e.order, func(x string) bool { return x == id })
			removed = append(removed, id)
			e.emitLocked("removed", id, nil)
		}
	}
	return removed
}

// clear removes every trigger, the configuration, the pending messages and the log.
func (e *triggerEngine) clear() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.watch, e.configured = []string{DefaultRole}, false
	e.order, e.byID = nil, make(map[string]*trigger)
	e.turns, e.messages, e.events, e.seq, e.dropped = 0, nil, nil, 0, 0
}

// state reports the engine.
func (e *triggerEngine) state() TriggerState {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := TriggerState{
		Config:   TriggerConfig{WatchRoles: slices.Clone(e.watch)},
		Triggers: []TriggerStatus{}, Events: slices.Clone(e.events),
		EventsDropped: e.dropped, PendingMessages: len(e.messages), Turns: e.turns,
	}
	if st.Events == nil {
		st.Events = []TriggerEvent{}
	}
	for _, id := range e.order {
		t := e.byID[id]
		ts := TriggerStatus{ID: id, Type: t.spec.When.Type, When: t.spec.When, Status: t.status,
			DetectedAt: t.detectedAt, FiredAt: t.firedAt, FireCount: t.fires, FailureCount: t.failures,
			Barrier: t.spec.Barrier}
		if t.resolved && t.status == TriggerArmed {
			ts.NextMark = formatVirtual(t.mark)
		}
		st.Triggers = append(st.Triggers, ts)
	}
	return st
}

// emitLocked appends one event to the log, dropping the oldest past the bound.
func (e *triggerEngine) emitLocked(kind, id string, detail any) {
	e.seq++
	ev := TriggerEvent{Seq: e.seq, Kind: kind, Trigger: id, At: e.now().UTC().Format(time.RFC3339Nano), Detail: detail}
	if vt, ok := e.clock.now(); ok {
		ev.VirtualTime = formatVirtual(vt)
	}
	if len(e.events) >= maxTriggerEvents {
		e.events = e.events[1:]
		e.dropped++
	}
	e.events = append(e.events, ev)
}

func (e *triggerEngine) emit(kind, id string, detail any) {
	e.mu.Lock()
	e.emitLocked(kind, id, detail)
	e.mu.Unlock()
}

// afterCall runs after every successful tool call: it counts a watched role's turn, fires the
// triggers the call (or the virtual time) makes due, waits for those with a barrier, and
// returns the call's result with the pending messages appended.
func (e *triggerEngine) afterCall(ctx context.Context, c completedCall) json.RawMessage {
	if c.Trigger {
		return c.Result
	}
	e.mu.Lock()
	if !e.configured || !slices.Contains(e.watch, c.Role) {
		e.mu.Unlock()
		return c.Result
	}
	e.turns++
	var due []*trigger
	var hold time.Duration
	failed := resultIsError(c.Result)
	var data callData
	for _, id := range e.order {
		t := e.byID[id]
		if t.status != TriggerArmed {
			continue
		}
		w := t.spec.When
		switch {
		case w.Type == "turn" && e.turns == w.Count:
		case w.Type == "action" && !failed && match(w.Tool, c.Tool):
			if data.args == nil {
				data = readCall(c)
			}
			if !data.holds(w.Where) {
				continue
			}
		default:
			continue
		}
		due = append(due, t)
		if b := t.spec.Barrier; b != nil {
			d := defaultBarrierTimeout
			if b.TimeoutSeconds > 0 {
				d = time.Duration(b.TimeoutSeconds * float64(time.Second))
			}
			hold = max(hold, d)
		}
	}
	due = append(due, e.dueByTimeLocked()...)
	provoking := map[string]string{"tool": c.Tool, "role": c.Role}
	if data.args == nil {
		data = readCall(c)
	}
	var held []chan struct{}
	for _, t := range due {
		d := &data
		if t.spec.When.Type == "time" {
			d = nil // not caused by this call
		}
		done := e.startLocked(t, provoking, d)
		if t.spec.Barrier != nil {
			held = append(held, done)
		}
	}
	e.mu.Unlock()

	if len(held) > 0 {
		wait, cancel := context.WithTimeout(ctx, hold)
		for _, done := range held {
			select {
			case <-done:
			case <-wait.Done():
			}
		}
		cancel()
	}
	return e.deliver(c.Result)
}

// tick fires the time triggers that are due; the gateway calls it once a second.
func (e *triggerEngine) tick() {
	e.mu.Lock()
	for _, t := range e.dueByTimeLocked() {
		e.startLocked(t, map[string]string{"source": "clock"}, nil)
	}
	e.mu.Unlock()
}

// drive ticks until ctx ends.
func (e *triggerEngine) drive(ctx context.Context) {
	tk := time.NewTicker(triggerDriveInterval)
	defer tk.Stop()
	for {
		select {
		case <-ctx.Done():
			e.inflight.Wait()
			return
		case <-tk.C:
			e.tick()
		}
	}
}

// dueByTimeLocked returns the armed time triggers the virtual time has reached, resolving a
// relative mark against the clock's t0 (again after the clock is re-armed).
func (e *triggerEngine) dueByTimeLocked() []*trigger {
	now, ok := e.clock.now()
	if !ok {
		return nil
	}
	t0, gen, _ := e.clock.origin()
	var due []*trigger
	for _, id := range e.order {
		t := e.byID[id]
		if t.spec.When.Type != "time" || t.status != TriggerArmed {
			continue
		}
		if !t.resolved || t.gen != gen {
			abs, rel, _ := parseMark(t.spec.When.At) // checked at register
			if abs.IsZero() {
				abs = t0.Add(rel)
			}
			t.mark, t.resolved, t.gen = abs, true, gen
		}
		if !now.Before(t.mark) {
			due = append(due, t)
		}
	}
	return due
}

// startLocked marks t firing and runs its actions in the background; the channel closes when
// they are done.
func (e *triggerEngine) startLocked(t *trigger, provoking map[string]string, call *callData) chan struct{} {
	t.status = TriggerFiring
	t.detectedAt = e.now().UTC().Format(time.RFC3339Nano)
	e.emitLocked("detected", t.spec.ID, map[string]any{"provoking": provoking})
	done := make(chan struct{})
	e.inflight.Add(1)
	go func() {
		defer e.inflight.Done()
		defer close(done)
		e.fire(t, call)
	}()
	return done
}

// fire runs t's actions in order, with the provoking call's arguments and result (nil for a
// time trigger) for their placeholders, and settles its status.
func (e *triggerEngine) fire(t *trigger, call *callData) {
	ctx, cancel := context.WithTimeout(e.base, triggerActionTimeout)
	defer cancel()
	var ferr error
	for i, a := range t.spec.Actions {
		if err := e.act(ctx, a, call); err != nil {
			e.emit("action_failed", t.spec.ID, map[string]any{"action": i, "type": a.Type, "error": err.Error()})
			ferr = err
			break
		}
		e.emit("action_ok", t.spec.ID, map[string]any{"action": i, "type": a.Type})
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if ferr != nil {
		t.failures++
		t.status = TriggerFailed
		e.emitLocked("failed", t.spec.ID, map[string]any{"error": ferr.Error()})
	} else {
		t.fires++
		t.firedAt = e.now().UTC().Format(time.RFC3339Nano)
		t.status = TriggerFired
		e.emitLocked("fired", t.spec.ID, nil)
	}
	if t.spec.When.Repeat {
		t.status = TriggerArmed
	}
}

// act runs one action.
func (e *triggerEngine) act(ctx context.Context, a TriggerAction, call *callData) error {
	switch a.Type {
	case "message":
		e.mu.Lock()
		defer e.mu.Unlock()
		if len(e.messages) >= maxPendingMessages {
			return fmt.Errorf("more than %d messages pending", maxPendingMessages)
		}
		e.messages = append(e.messages, a.Text)
		return nil
	case "tool":
		args, err := fillPlaceholders(a.Args, call)
		if err != nil {
			return err
		}
		res, err := e.fx.callTool(withTrigger(ctx), normRole(a.As), a.Tool, args)
		if err != nil {
			return err
		}
		if resultIsError(res) {
			return fmt.Errorf("tool %s returned an error", a.Tool)
		}
		return nil
	case "permission":
		pats, _ := toolPatterns(a.Tools) // checked at register
		return e.fx.setAccess(normRole(a.Role), pats, a.Action == "disable")
	case "data":
		params, err := fillPlaceholders(a.Params, call)
		if err != nil {
			return err
		}
		_, err = e.fx.dataCall(ctx, a.Server, a.Method, params)
		return err
	}
	return fmt.Errorf("unknown action %q", a.Type)
}

// deliver appends the pending messages to result as text contents.
func (e *triggerEngine) deliver(result json.RawMessage) json.RawMessage {
	e.mu.Lock()
	msgs := e.messages
	e.messages = nil
	e.mu.Unlock()
	if len(msgs) == 0 {
		return result
	}
	var res map[string]json.RawMessage
	var content []json.RawMessage
	if json.Unmarshal(result, &res) != nil || res == nil {
		return result
	}
	_ = json.Unmarshal(res["content"], &content)
	for _, m := range msgs {
		b, _ := json.Marshal(struct {
			Type string `json:"type"`
			Text string `json:"text"`
		}{"text", m})
		content = append(content, b)
	}
	res["content"], _ = json.Marshal(content)
	out, err := json.Marshal(res)
	if err != nil {
		return result
	}
	return out
}
