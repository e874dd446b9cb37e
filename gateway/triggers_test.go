package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"
)

// fakeClock is a settable real clock, injected into the virtual clock and the trigger engine.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// recordingEffects records the effects of fired actions; a tool action blocks while hold is set
// and not yet closed, so a test can tell whether a call waited for it.
type recordingEffects struct {
	mu      sync.Mutex
	calls   []string
	access  []string
	data    []string
	entered chan struct{} // closed when a tool action starts, if set
	hold    chan struct{} // a tool action waits for it, if set
}

func (fx *recordingEffects) callTool(ctx context.Context, role, tool string, args json.RawMessage) (json.RawMessage, error) {
	if fx.entered != nil {
		close(fx.entered)
	}
	if fx.hold != nil {
		select {
		case <-fx.hold:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	if !fromTrigger(ctx) {
		panic("a trigger's tool call must carry the trigger mark")
	}
	fx.mu.Lock()
	defer fx.mu.Unlock()
	fx.calls = append(fx.calls, role+":"+tool+":"+string(args))
	return json.RawMessage(`{"content":[{"type":"text","text":"ok"}]}`), nil
}

func (fx *recordingEffects) setAccess(role string, pats []string, disable bool) error {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	verb := "enable"
	if disable {
		verb = "disable"
	}
	fx.access = append(fx.access, verb+":"+role+":"+strings.Join(pats, ","))
	return nil
}

func (fx *recordingEffects) dataCall(_ context.Context, server, method string, params json.RawMessage) (json.RawMessage, error) {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	fx.data = append(fx.data, server+":"+method+":"+string(params))
	return json.RawMessage(`{}`), nil
}

func (fx *recordingEffects) snapshot() (calls, access, data []string) {
	fx.mu.Lock()
	defer fx.mu.Unlock()
	return append([]string(nil), fx.calls...), append([]string(nil), fx.access...), append([]string(nil), fx.data...)
}

func newTestEngine(t *testing.T) (*triggerEngine, *fakeClock, *recordingEffects) {
	t.Helper()
	fc := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	fx := &recordingEffects{}
	e := newTriggerEngine(context.Background(), newVirtualClock(fc.Now), fc.Now, fx, nil)
	t.Cleanup(e.inflight.Wait)
	return e, fc, fx
}

func mustRegister(t *testing.T, e *triggerEngine, body string) {
	t.Helper()
	var req TriggerRegister
	dec := json.NewDecoder(strings.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		t.Fatalf("decode %s: %v", body, err)
	}
	if _, err := e.register(req); err != nil {
		t.Fatalf("register: %v", err)
	}
}

const okResult = `{"content":[{"type":"text","text":"{\"id\":\"n1\",\"title\":\"groceries\"}"}]}`

func call(e *triggerEngine, role, tool, args string) string {
	return string(e.afterCall(context.Background(), completedCall{Role: role, Tool: tool, Args: json.RawMessage(args), Result: json.RawMessage(okResult)}))
}

func status(e *triggerEngine, id string) TriggerStatus {
	for _, t := range e.state().Triggers {
		if t.ID == id {
			return t
		}
	}
	return TriggerStatus{}
}

func TestTriggerActionPattern(t *testing.T) {
	e, _, fx := newTestEngine(t)
	mustRegister(t, e, `{"triggers":[{"id":"t1","when":{"type":"action","tool":"add_*","where":{"args.title":{"regex":"^groc"},"result.id":{"equals":"n1"}}},
		"actions":[{"type":"tool","tool":"audit","args":{"k":1},"as":"system"},{"type":"permission","action":"disable","role":"default","tools":["delete_*"]},{"type":"data","server":"notes","method":"data/add","params":{"parts":[]}}],
		"barrier":{"at":"provoking_call"}}]}`)

	call(e, "default", "list_notes", `{}`)                // tool does not match
	call(e, "default", "add_note", `{"title":"work"}`)    // where does not hold
	call(e, "other", "add_note", `{"title":"groceries"}`) // role not watched
	if st := status(e, "t1"); st.Status != TriggerArmed || st.FireCount != 0 {
		t.Fatalf("fired on a call that does not match: %+v", st)
	}
	call(e, "default", "add_note", `{"title":"groceries"}`) // fires; the barrier waits for it
	calls, access, data := fx.snapshot()
	if len(calls) != 1 || calls[0] != `system:audit:{"k":1}` {
		t.Errorf("tool actions = %q", calls)
	}
	if len(access) != 1 || access[0] != "disable:default:delete_*" {
		t.Errorf("permission actions = %q", access)
	}
	if len(data) != 1 || data[0] != `notes:data/add:{"parts":[]}` {
		t.Errorf("data actions = %q", data)
	}
	if st := status(e, "t1"); st.Status != TriggerFired || st.FireCount != 1 {
		t.Fatalf("after the matching call: %+v", st)
	}
	call(e, "default", "add_note", `{"title":"groceries"}`) // once only, without repeat
	if calls, _, _ := fx.snapshot(); len(calls) != 1 {
		t.Errorf("a trigger without repeat fired again: %q", calls)
	}
}

func TestTriggerRepeatAndErrors(t *testing.T) {
	e, _, fx := newTestEngine(t)
	mustRegister(t, e, `{"triggers":[{"id":"r","when":{"type":"action","tool":"add_note","repeat":true},"actions":[{"type":"tool","tool":"audit"}],"barrier":{"at":"provoking_call"}}]}`)
	call(e, "default", "add_note", `{}`)
	call(e, "default", "add_note", `{}`)
	// An error result does not fire an action trigger.
	e.afterCall(context.Background(), completedCall{Role: "default", Tool: "add_note", Result: json.RawMessage(`{"isError":true,"content":[]}`)})
	// A trigger's own call is never watched.
	e.afterCall(context.Background(), completedCall{Role: "default", Tool: "add_note", Result: json.RawMessage(okResult), Trigger: true})
	if calls, _, _ := fx.snapshot(); len(calls) != 2 {
		t.Errorf("repeat trigger fired %d times, want 2: %q", len(calls), calls)
	}
	if st := status(e, "r"); st.Status != TriggerArmed || st.FireCount != 2 {
		t.Errorf("repeat trigger: %+v", st)
	}
}

func TestTriggerTurn(t *testing.T) {
	e, _, _ := newTestEngine(t)
	mustRegister(t, e, `{"watch_roles":["agent"],"triggers":[{"id":"third","when":{"type":"turn","count":3},"actions":[{"type":"message","text":"a new email arrived"}],"barrier":{"at":"provoking_call","timeout_seconds":5}}]}`)
	for i := range 2 {
		if out := call(e, "agent", "any", `{}`); strings.Contains(out, "new email") {
			t.Fatalf("call %d got the message early: %s", i+1, out)
		}
		call(e, "default", "any", `{}`) // not watched: not a turn
	}
	out := call(e, "agent", "any", `{}`)
	if !strings.Contains(out, `{"type":"text","text":"a new email arrived"}`) {
		t.Fatalf("third call's result lacks the message: %s", out)
	}
	if strings.Contains(call(e, "agent", "any", `{}`), "new email") {
		t.Error("the message was delivered twice")
	}
	if st := e.state(); st.Turns != 4 || st.PendingMessages != 0 {
		t.Errorf("turns %d pending %d, want 4 and 0", st.Turns, st.PendingMessages)
	}
}

func TestTriggerTime(t *testing.T) {
	e, fc, fx := newTestEngine(t)
	mustRegister(t, e, `{"triggers":[
		{"id":"rel","when":{"type":"time","at":"PT1H"},"actions":[{"type":"tool","tool":"tick"}]},
		{"id":"abs","when":{"type":"time","at":"2026-03-01T12:00:00Z"},"actions":[{"type":"message","text":"noon"}]}]}`)
	e.tick() // clock unarmed: nothing is due
	rate := 60.0
	if _, err := e.clock.set("2026-03-01T11:00:00Z", &rate); err != nil {
		t.Fatal(err)
	}
	fc.advance(59 * time.Second) // 59 virtual minutes
	e.tick()
	e.inflight.Wait()
	if calls, _, _ := fx.snapshot(); len(calls) != 0 {
		t.Fatalf("fired before its time: %q", calls)
	}
	if st := status(e, "rel"); st.NextMark != "2026-03-01T12:00:00Z" {
		t.Errorf("next mark %q, want 12:00", st.NextMark)
	}
	fc.advance(time.Second)
	out := call(e, "default", "read", `{}`) // a watched call evaluates time triggers too
	e.inflight.Wait()
	if calls, _, _ := fx.snapshot(); len(calls) != 1 {
		t.Fatalf("time trigger at PT1H did not fire once: %q", calls)
	}
	if !strings.Contains(out, "noon") && !strings.Contains(call(e, "default", "read", `{}`), "noon") {
		t.Error("the time trigger's message reached neither this call nor the next")
	}

	// Re-arming the clock re-resolves a relative mark against the new start.
	mustRegister(t, e, `{"triggers":[{"id":"rel2","when":{"type":"time","at":"PT10M"},"actions":[{"type":"tool","tool":"tock"}]}]}`)
	e.tick()
	e.inflight.Wait() // 12:00 + 10 min is past 11:00+PT10M: rel2 fires on the old axis
	if _, err := e.clock.set("2026-03-02T00:00:00Z", &rate); err != nil {
		t.Fatal(err)
	}
	mustRegister(t, e, `{"triggers":[{"id":"rel3","when":{"type":"time","at":"PT10M"},"actions":[{"type":"tool","tool":"tock3"}]}]}`)
	e.tick()
	if st := status(e, "rel3"); st.Status != TriggerArmed || st.NextMark != "2026-03-02T00:10:00Z" {
		t.Errorf("after a re-arm: %+v", st)
	}
}

func TestTriggerBarrierHoldsTheCall(t *testing.T) {
	e, _, fx := newTestEngine(t)
	fx.entered, fx.hold = make(chan struct{}), make(chan struct{})
	mustRegister(t, e, `{"triggers":[{"id":"b","when":{"type":"action","tool":"add_note"},"actions":[{"type":"tool","tool":"mirror"},{"type":"message","text":"mirrored"}],"barrier":{"at":"provoking_call","timeout_seconds":600}}]}`)
	returned := make(chan string)
	go func() { returned <- call(e, "default", "add_note", `{}`) }()
	<-fx.entered
	select {
	case out := <-returned:
		t.Fatalf("the provoking call returned before its trigger's effect landed: %s", out)
	default:
	}
	close(fx.hold)
	out := <-returned
	if calls, _, _ := fx.snapshot(); len(calls) != 1 {
		t.Fatalf("effect not landed when the call returned: %q", calls)
	}
	if !strings.Contains(out, "mirrored") {
		t.Errorf("the provoking call's result lacks the trigger's message: %s", out)
	}
}

func TestTriggerWithoutBarrierDoesNotHold(t *testing.T) {
	e, _, fx := newTestEngine(t)
	fx.entered, fx.hold = make(chan struct{}), make(chan struct{})
	mustRegister(t, e, `{"triggers":[{"id":"nb","when":{"type":"action","tool":"add_note"},"actions":[{"type":"tool","tool":"mirror"}]}]}`)
	call(e, "default", "add_note", `{}`) // would deadlock (the test's timeout) if it waited for hold
	<-fx.entered
	if st := status(e, "nb"); st.Status != TriggerFiring {
		t.Errorf("status %q while the action runs, want firing", st.Status)
	}
	close(fx.hold)
	e.inflight.Wait()
	if st := status(e, "nb"); st.Status != TriggerFired {
		t.Errorf("status %q after the action, want fired", st.Status)
	}
}

func TestTriggerRegisterRefuses(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		{`{"triggers":[{"id":"x","when":{"type":"state"},"actions":[{"type":"message","text":"m"}]}]}`, "when.type"},
		{`{"triggers":[{"when":{"type":"turn","count":1},"actions":[{"type":"message","text":"m"}]}]}`, "want an id"},
		{`{"triggers":[{"id":"x","when":{"type":"turn","count":0},"actions":[{"type":"message","text":"m"}]}]}`, "count"},
		{`{"triggers":[{"id":"x","when":{"type":"time","at":"tomorrow"},"actions":[{"type":"message","text":"m"}]}]}`, "when.at"},
		{`{"triggers":[{"id":"x","when":{"type":"time","at":"PT1H"},"actions":[{"type":"message","text":"m"}],"barrier":{"at":"provoking_call"}}]}`, "no provoking call"},
		{`{"triggers":[{"id":"x","when":{"type":"action","tool":"a","where":{"args.a":{"regex":"("}}},"actions":[{"type":"message","text":"m"}]}]}`, "regex"},
		{`{"triggers":[{"id":"x","when":{"type":"action","tool":"a"},"actions":[{"type":"permission","action":"hide","role":"r","tools":"*"}]}]}`, "enable or disable"},
		{`{"triggers":[{"id":"x","when":{"type":"action","tool":"a"},"actions":[]}]}`, "at least one"},
		{`{"triggers":[{"id":"x","when":{"type":"action","tool":"a"},"actions":[{"type":"message","text":"m"}]},{"id":"x","when":{"type":"action","tool":"a"},"actions":[{"type":"message","text":"m"}]}]}`, "duplicate"},
	} {
		e, _, _ := newTestEngine(t)
		var req TriggerRegister
		if err := json.Unmarshal([]byte(tc.body), &req); err != nil {
			t.Fatal(err)
		}
		_, err := e.register(req)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want one naming %q", tc.body, err, tc.want)
		}
		if len(e.state().Triggers) != 0 {
			t.Errorf("%s: a refused batch added triggers", tc.body)
		}
	}

	e, _, _ := newTestEngine(t)
	body := `{"triggers":[{"id":"x","when":{"type":"turn","count":2},"actions":[{"type":"message","text":"m"}]}]}`
	mustRegister(t, e, body)
	mustRegister(t, e, body) // an identical re-add is a no-op
	var other TriggerRegister
	_ = json.Unmarshal([]byte(`{"triggers":[{"id":"x","when":{"type":"turn","count":3},"actions":[{"type":"message","text":"m"}]}]}`), &other)
	if _, err := e.register(other); err == nil || !strings.Contains(err.Error(), "another spec") {
		t.Errorf("a changed spec under a known id: %v", err)
	}
	_ = json.Unmarshal([]byte(`{"watch_roles":["agent"],"triggers":[]}`), &other)
	if _, err := e.register(other); err == nil || !strings.Contains(err.Error(), "watch_roles") {
		t.Errorf("changed watch_roles: %v", err)
	}
	if got := e.remove([]string{"x", "nope"}); len(got) != 1 {
		t.Errorf("remove = %q", got)
	}
}

func TestParseISODuration(t *testing.T) {
	for in, want := range map[string]time.Duration{"PT30M": 30 * time.Minute, "P1DT6H": 30 * time.Hour, "P1W": 7 * 24 * time.Hour, "PT1.5S": 1500 * time.Millisecond} {
		if got, err := parseISODuration(in); err != nil || got != want {
			t.Errorf("%s = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"P", "PT", "P1M2", "1H", "P1DT"} {
		if _, err := parseISODuration(bad); err == nil {
			t.Errorf("%s: no error", bad)
		}
	}
}

func TestVirtualClock(t *testing.T) {
	fc := &fakeClock{now: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newVirtualClock(fc.Now)
	if _, ok := c.now(); ok {
		t.Fatal("an unarmed clock has a time")
	}
	rate := 3600.0
	st, err := c.set("2026-05-01T08:00:00+02:00", &rate)
	if err != nil || st.VirtualTime != "2026-05-01T06:00:00Z" {
		t.Fatalf("set: %+v, %v", st, err)
	}
	fc.advance(2 * time.Second)
	if now, _ := c.now(); formatVirtual(now) != "2026-05-01T08:00:00Z" {
		t.Errorf("after 2 real s at 3600x: %s", formatVirtual(now))
	}
	for _, bad := range []struct {
		vt   string
		rate float64
	}{{"2026-05-01", 1}, {"2026-05-01T08:00Z", 1}, {" 2026-05-01T08:00:00Z", 1}, {"2026-05-01T08:00:00Z", -1}, {"2026-05-01T08:00:00Z", 86401}} {
		if _, err := c.set(bad.vt, &bad.rate); err == nil {
			t.Errorf("set(%q, %g): no error", bad.vt, bad.rate)
		}
	}
	c.clear()
	if st := c.state(); st.Armed {
		t.Errorf("cleared clock: %+v", st)
	}
}

func TestTriggerPlaceholders(t *testing.T) {
	e, _, fx := newTestEngine(t)
	mustRegister(t, e, `{"triggers":[{"id":"mirror","when":{"type":"action","tool":"add_note"},"barrier":{"at":"provoking_call"},
		"actions":[{"type":"tool","tool":"copy","args":{"key":"mirror/${args.title}","n":"${args.n}","id":"${result.id}","tags":["${args.tags[1]}","${args.none?}"],"opt":"${args.none?}"}}]}]}`)
	call(e, "default", "add_note", `{"title":"groceries","n":3,"tags":["a","b"]}`)
	calls, _, _ := fx.snapshot()
	if len(calls) != 1 || calls[0] != `default:copy:{"id":"n1","key":"mirror/groceries","n":3,"tags":["b"]}` {
		t.Errorf("filled args = %q", calls)
	}

	// A required placeholder without a value fails the action rather than sending "${...}".
	e2, _, fx2 := newTestEngine(t)
	mustRegister(t, e2, `{"triggers":[{"id":"m","when":{"type":"action","tool":"add_note"},"barrier":{"at":"provoking_call"},
		"actions":[{"type":"tool","tool":"copy","args":{"k":"${args.missing}"}}]}]}`)
	call(e2, "default", "add_note", `{}`)
	if calls, _, _ := fx2.snapshot(); len(calls) != 0 {
		t.Errorf("an unfilled placeholder was sent: %q", calls)
	}
	if st := status(e2, "m"); st.Status != TriggerFailed || st.FailureCount != 1 {
		t.Errorf("status %+v, want failed", st)
	}

	var req TriggerRegister
	_ = json.Unmarshal([]byte(`{"triggers":[{"id":"t","when":{"type":"time","at":"PT1H"},"actions":[{"type":"tool","tool":"x","args":{"k":"${args.a}"}}]}]}`), &req)
	if _, err := e.register(req); err == nil || !strings.Contains(err.Error(), "provoking call") {
		t.Errorf("a time trigger with placeholders: %v", err)
	}
}
