package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/agentenv/agentenv/envproto"
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

// isoDurationRE is an ISO 8601 duration of weeks, days, hours, minutes and seconds.
var isoDurationRE = regexp.MustCompile(`^P(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$`)

// parseISODuration parses an ISO 8601 duration such as PT30M or P1DT6H.
func parseISODuration(s string) (time.Duration, error) {
	m := isoDurationRE.FindStringSubmatch(s)
	if m == nil || s == "P" || s == "PT" || strings.HasSuffix(s, "T") {
		return 0, fmt.Errorf("duration %q: want ISO 8601 such as PT30M, P1DT6H", s)
	}
	units := []float64{7 * 86400, 86400, 3600, 60, 1}
	var secs float64
	for i, u := range units {
		if m[i+1] != "" {
			v, err := strconv.ParseFloat(m[i+1], 64)
			if err != nil {
				return 0, fmt.Errorf("duration %q: %w", s, err)
			}
			secs += v * u
		}
	}
	if secs > float64(math.MaxInt64)/float64(time.Second) {
		return 0, fmt.Errorf("duration %q: too long", s)
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// checkSpec validates one trigger spec.
func checkSpec(s *TriggerSpec) error {
	w := s.When
	switch w.Type {
	case "action":
		if w.Tool == "" {
			return errors.New("when.tool: want a tool name pattern")
		}
		if w.Count != 0 || w.At != "" {
			return errors.New("when: count and at are not for action triggers")
		}
		for field, p := range w.Where {
			if err := checkPredicate(p); err != nil {
				return fmt.Errorf("when.where.%s: %w", field, err)
			}
		}
	case "turn":
		if w.Count <= 0 {
			return errors.New("when.count: want a positive number of calls")
		}
		if w.Tool != "" || w.Where != nil || w.At != "" || w.Repeat {
			return errors.New("when: a turn trigger takes count only")
		}
	case "time":
		if w.At == "" {
			return errors.New("when.at: want an RFC 3339 time or an ISO 8601 duration after the clock's start")
		}
		if w.Tool != "" || w.Where != nil || w.Count != 0 || w.Repeat {
			return errors.New("when: a time trigger takes at only")
		}
		if _, _, err := parseMark(w.At); err != nil {
			return fmt.Errorf("when.at: %w", err)
		}
	default:
		return fmt.Errorf("when.type %q: want action, turn or time", w.Type)
	}
	if b := s.Barrier; b != nil {
		if b.At != barrierAtProvokingCall {
			return fmt.Errorf("barrier.at %q: want %q", b.At, barrierAtProvokingCall)
		}
		if w.Type == "time" {
			return errors.New("barrier: a time trigger has no provoking call to hold")
		}
		if b.TimeoutSeconds < 0 || b.TimeoutSeconds > maxBarrierTimeout.Seconds() || math.IsNaN(b.TimeoutSeconds) {
			return fmt.Errorf("barrier.timeout_seconds: want 0 to %g", maxBarrierTimeout.Seconds())
		}
	}
	if len(s.Actions) == 0 {
		return errors.New("actions: want at least one")
	}
	for i, a := range s.Actions {
		if err := checkAction(a); err != nil {
			return fmt.Errorf("actions[%d]: %w", i, err)
		}
		for _, raw := range []json.RawMessage{a.Args, a.Params} {
			if w.Type == "time" && placeholderRE.Match(raw) {
				return fmt.Errorf("actions[%d]: ${args...} and ${result...} need a provoking call, which a time trigger has not", i)
			}
		}
	}
	return nil
}

// placeholderRE is a placeholder of a trigger's tool or data action: ${args.<path>} or
// ${result.<path>} (the provoking call's arguments, its result's structured content or text
// parsed as JSON); a trailing ? makes it optional (a missing value drops the key).
var placeholderRE = regexp.MustCompile(`\$\{(args|result)((?:\.[A-Za-z0-9_]+(?:\[\d+\])*)*)(\??)\}`)

// errDrop marks an optional placeholder with no value: its key (or list element) is left out.
var errDrop = errors.New("drop")

// fillPlaceholders replaces the placeholders in raw, a JSON value, from call: a string that is
// one placeholder becomes the value itself, one inside a string its text (JSON for a non-string).
// A required placeholder without a value is an error, so a tool never receives "${...}".
func fillPlaceholders(raw json.RawMessage, call *callData) (json.RawMessage, error) {
	if len(raw) == 0 || !placeholderRE.Match(raw) {
		return raw, nil
	}
	if call == nil {
		return nil, errors.New("placeholders need a provoking call")
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, err
	}
	out, err := fillValue(v, call)
	if errors.Is(err, errDrop) {
		return json.RawMessage("null"), nil
	}
	if err != nil {
		return nil, err
	}
	return json.Marshal(out)
}

func fillValue(v any, call *callData) (any, error) {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			f, err := fillValue(e, call)
			if errors.Is(err, errDrop) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out[k] = f
		}
		return out, nil
	case []any:
		out := make([]any, 0, len(x))
		for _, e := range x {
			f, err := fillValue(e, call)
			if errors.Is(err, errDrop) {
				continue
			}
			if err != nil {
				return nil, err
			}
			out = append(out, f)
		}
		return out, nil
	case string:
		lookup := func(m []string) (any, bool, error) {
			root := call.args
			if m[1] == "result" {
				root = call.result
			}
			got, ok := lookupPath(root, strings.TrimPrefix(m[2], "."))
			if !ok && m[3] == "" {
				return nil, false, fmt.Errorf("placeholder %s has no value in the provoking call", m[0])
			}
			return got, ok, nil
		}
		if m := placeholderRE.FindStringSubmatch(x); m != nil && m[0] == x {
			got, ok, err := lookup(m)
			if err != nil {
				return nil, err
			}
			if !ok {
				return nil, errDrop
			}
			return got, nil
		}
		var ferr error
		filled := placeholderRE.ReplaceAllStringFunc(x, func(p string) string {
			got, ok, err := lookup(placeholderRE.FindStringSubmatch(p))
			switch {
			case err != nil:
				ferr = err
				return p
			case !ok:
				return ""
			}
			if s, isStr := got.(string); isStr {
				return s
			}
			b, _ := json.Marshal(got)
			return string(b)
		})
		return filled, ferr
	}
	return v, nil
}

func checkPredicate(p Predicate) error {
	n := 0
	if p.Regex != nil {
		n++
		if _, err := regexp.Compile(*p.Regex); err != nil {
			return fmt.Errorf("regex: %w", err)
		}
	}
	if len(p.Equals) > 0 {
		n++
	}
	if p.Exists != nil {
		n++
	}
	if n != 1 {
		return errors.New("want exactly one of regex, equals, exists")
	}
	return nil
}

func checkAction(a TriggerAction) error {
	switch a.Type {
	case "message":
		if a.Text == "" {
			return errors.New("text: want the message")
		}
	case "tool":
		if a.Tool == "" {
			return errors.New("tool: want a tool name")
		}
		if len(a.Args) > 0 {
			var obj map[string]json.RawMessage
			if err := json.Unmarshal(a.Args, &obj); err != nil {
				return errors.New("args: want a JSON object")
			}
		}
		if a.As != "" {
			if err := validRole(a.As); err != nil {
				return fmt.Errorf("as: %w", err)
			}
		}
	case "permission":
		if a.Action != "enable" && a.Action != "disable" {
			return fmt.Errorf("action %q: want enable or disable", a.Action)
		}
		if err := validRole(normRole(a.Role)); err != nil {
			return fmt.Errorf("role: %w", err)
		}
		pats, err := toolPatterns(a.Tools)
		if err != nil {
			return err
		}
		if err := validPatterns(pats); err != nil {
			return fmt.Errorf("tools: %w", err)
		}
	case "data":
		if !strings.HasPrefix(a.Method, "data/") {
			return fmt.Errorf("method %q: want a data plane method such as data/add", a.Method)
		}
	default:
		return fmt.Errorf("type %q: want message, tool, permission or data", a.Type)
	}
	return nil
}

// toolPatterns reads a permission action's tools: a list of patterns, or "*".
func toolPatterns(raw json.RawMessage) ([]string, error) {
	var all string
	if json.Unmarshal(raw, &all) == nil {
		if all != "*" {
			return nil, fmt.Errorf("tools %q: want a list of patterns or \"*\"", all)
		}
		return []string{"*"}, nil
	}
	var pats []string
	if err := json.Unmarshal(raw, &pats); err != nil || len(pats) == 0 {
		return nil, errors.New("tools: want a list of patterns or \"*\"")
	}
	return pats, nil
}

// parseMark reads a time trigger's at: an absolute time, or a duration after the clock's t0.
func parseMark(at string) (abs time.Time, rel time.Duration, err error) {
	if strings.HasPrefix(at, "P") {
		rel, err = parseISODuration(at)
		return time.Time{}, rel, err
	}
	abs, err = parseVirtualTime(at)
	return abs, 0, err
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

// resultIsError reports whether a CallToolResult is a tool error.
func resultIsError(result json.RawMessage) bool {
	var r struct {
		IsError bool `json:"isError"`
	}
	return json.Unmarshal(result, &r) == nil && r.IsError
}

// callData is a call's arguments and result as values where predicates read.
type callData struct {
	args   any
	result any
}

func readCall(c completedCall) callData {
	d := callData{args: map[string]any{}}
	if len(c.Args) > 0 {
		var a any
		if json.Unmarshal(c.Args, &a) == nil && a != nil {
			d.args = a
		}
	}
	var r struct {
		Content []struct {
			Type string `json:"type"`
			Text string `json:"text"`
		} `json:"content"`
		Structured any `json:"structuredContent"`
	}
	if json.Unmarshal(c.Result, &r) == nil {
		var texts []string
		for _, c := range r.Content {
			if c.Type == "text" {
				texts = append(texts, c.Text)
			}
		}
		text := strings.Join(texts, "\n")
		var v any
		switch {
		case r.Structured != nil:
			d.result = r.Structured
		case json.Unmarshal([]byte(text), &v) == nil:
			d.result = v
		case text != "":
			d.result = text
		}
	}
	return d
}

// holds reports whether every predicate of where holds on the call.
func (d callData) holds(where map[string]Predicate) bool {
	for field, p := range where {
		var v any
		var ok bool
		switch {
		case field == "args" || strings.HasPrefix(field, "args."):
			v, ok = lookupPath(d.args, strings.TrimPrefix(strings.TrimPrefix(field, "args"), "."))
		case field == "result" || strings.HasPrefix(field, "result."):
			v, ok = lookupPath(d.result, strings.TrimPrefix(strings.TrimPrefix(field, "result"), "."))
		default:
			v, ok = lookupPath(d.args, field)
		}
		if !p.holds(v, ok) {
			return false
		}
	}
	return true
}

// lookupPath follows a dot path with [n] indices into v; "" is v itself.
func lookupPath(v any, path string) (any, bool) {
	if path == "" {
		return v, v != nil
	}
	for seg := range strings.SplitSeq(path, ".") {
		key, rest, _ := strings.Cut(seg, "[")
		if key != "" {
			m, ok := v.(map[string]any)
			if !ok {
				return nil, false
			}
			if v, ok = m[key]; !ok {
				return nil, false
			}
		}
		for rest != "" {
			idx, after, ok := strings.Cut(rest, "]")
			n, err := strconv.Atoi(idx)
			l, isList := v.([]any)
			if !ok || err != nil || !isList || n < 0 || n >= len(l) {
				return nil, false
			}
			v = l[n]
			rest = strings.TrimPrefix(after, "[")
		}
	}
	return v, true
}

// holds tests v (found says whether the path led anywhere).
func (p Predicate) holds(v any, found bool) bool {
	switch {
	case p.Exists != nil:
		nonEmpty := found && v != nil && v != "" && !isEmptyList(v)
		return nonEmpty == *p.Exists
	case p.Regex != nil:
		if !found {
			return false
		}
		s, ok := v.(string)
		if !ok {
			b, _ := json.Marshal(v)
			s = string(b)
		}
		re, err := regexp.Compile(*p.Regex)
		return err == nil && re.MatchString(s)
	case len(p.Equals) > 0:
		var want any
		if !found || json.Unmarshal(p.Equals, &want) != nil {
			return false
		}
		a, _ := json.Marshal(v)
		b, _ := json.Marshal(want)
		return bytes.Equal(a, b)
	}
	return false
}

func isEmptyList(v any) bool {
	l, ok := v.([]any)
	return ok && len(l) == 0
}

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
