package atif

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent"
)

// MaxLine bounds one line of a trajectory file ReadLines reads.
const MaxLine = 16 << 20

// timeLayout is ISO 8601 in UTC with microseconds, which every ISO 8601 reader takes (some
// refuse nanoseconds).
const timeLayout = "2006-01-02T15:04:05.000000Z07:00"

// Info is what a trajectory's lines do not say.
type Info struct {
	// SessionID is the run the trajectory belongs to; several trajectories may share it.
	SessionID string
	// TrajectoryID names this trajectory among those of its session (a run and step id).
	TrajectoryID string
	// AgentName and AgentVersion name the agent system; empty, "agentenv-KIND" (the prompt
	// line's agent kind) and "unknown".
	AgentName, AgentVersion string
	// Model is the default model; empty, the first model line's.
	Model string
	// System is the system prompt the agent was given, if any: the first step.
	System string
}

// ReadLines reads a trajectory file agent.Trajectory wrote, one agent.Line per line; blank
// lines are skipped. A line that is not an agent.Line is an error naming the file and line,
// wrapping agentenv.ErrInvalid.
func ReadLines(path string) ([]agent.Line, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trajectory: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), MaxLine)
	var lines []agent.Line
	for n := 1; sc.Scan(); n++ {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var l agent.Line
		if err := json.Unmarshal(raw, &l); err != nil {
			return nil, fmt.Errorf("trajectory %s:%d: %v: %w", path, n, err, agentenv.ErrInvalid)
		}
		lines = append(lines, l)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("trajectory %s: %w", path, err)
	}
	return lines, nil
}

// FromLines converts one agent's trajectory (the lines of one prompt_agent step, in order)
// into an ATIF trajectory:
//
//   - Info.System, if set, is a system step; each prompt line a user step.
//   - Each model line is an agent step: its text, its model, its usage as metrics
//     (llm_call_count 1 for the built-in model agents, 0 for the scripted replay, which calls
//     no model, unknown otherwise), the tool calls that follow it until the next model line
//     as tool_calls and their results as its observation, matched by call id (else the oldest
//     call still without one). Tool calls with no model line before them (an A2A agent's)
//     make agent steps of their own with an empty message, a new one after each result.
//   - A result of no call is kept in the current step's observation without source_call_id,
//     its call id and tool in the result's extra.
//   - The response line is a last agent step unless the last step already said it.
//   - Error and stop lines go to the trajectory's extra ("error", "stop", "turns",
//     "tool_calls"); final_metrics holds the token and cost totals (per field the larger of
//     the steps' sum and the stop line's total) and the step count.
//
// Each line's time is its step's timestamp; the fields of agent.Line that ATIF has no field
// for (turn, duration_ms, json, is_error) go to the step's or result's extra under their
// agent.Line names. A line of an unknown kind is an error wrapping agentenv.ErrInvalid.
func FromLines(lines []agent.Line, info Info) (Trajectory, error) {
	if len(lines) == 0 {
		return Trajectory{}, fmt.Errorf("atif: no trajectory lines: %w", agentenv.ErrInvalid)
	}
	c := converter{used: map[string]bool{}, cur: -1}
	for _, l := range lines {
		if l.Kind == agent.KindPrompt && l.Agent != "" {
			c.kind = l.Agent
			break
		}
	}
	if info.System != "" {
		c.add(Step{Source: SourceSystem, Message: info.System})
	}
	for i, l := range lines {
		if err := c.line(l); err != nil {
			return Trajectory{}, fmt.Errorf("atif: line %d (seq %d): %w", i+1, l.Seq, err)
		}
	}
	t := Trajectory{
		SchemaVersion: SchemaVersion,
		SessionID:     info.SessionID,
		TrajectoryID:  info.TrajectoryID,
		Agent:         Agent{Name: info.AgentName, Version: info.AgentVersion, ModelName: info.Model},
		Steps:         c.steps,
		FinalMetrics:  c.final(),
	}
	if t.Agent.Name == "" {
		t.Agent.Name = "agentenv"
		if c.kind != "" {
			t.Agent.Name += "-" + c.kind
		}
	}
	if t.Agent.Version == "" {
		t.Agent.Version = "unknown"
	}
	if t.Agent.ModelName == "" {
		t.Agent.ModelName = c.model
	}
	if c.kind != "" {
		t.Agent.Extra = map[string]any{"kind": c.kind}
	}
	if len(c.extra) > 0 {
		t.Extra = c.extra
	}
	if t.Steps == nil {
		t.Steps = []Step{}
	}
	return t, Validate(t)
}

// openCall is a tool call still waiting for its result.
type openCall struct {
	orig, id string // the line's call id, and the unique one in the trajectory
	step     int
}

type converter struct {
	kind, model  string // the prompt's agent kind; the first model line's model
	steps        []Step
	cur          int  // the agent step tool calls join; -1 none
	curFromModel bool // cur is a model line's step (not one made for calls alone)
	open         []openCall
	used         map[string]bool
	nextID       int
	extra        map[string]any
	stopUsage    *agent.Usage
}

func (c *converter) add(s Step) int {
	s.StepID = len(c.steps) + 1
	c.steps = append(c.steps, s)
	return len(c.steps) - 1
}

func (c *converter) line(l agent.Line) error {
	kind := c.kind
	if l.Agent != "" {
		kind = l.Agent
	}
	switch l.Kind {
	case agent.KindPrompt:
		c.add(Step{Source: SourceUser, Message: l.Text, Timestamp: stamp(l.Time)})
		c.cur, c.open = -1, nil
	case agent.KindModel:
		if c.model == "" {
			c.model = l.Model
		}
		s := Step{Source: SourceAgent, Message: l.Text, ModelName: l.Model, Timestamp: stamp(l.Time), Extra: lineExtra(l)}
		switch {
		case kind == "scripted" || l.Model == "scripted":
			s.LLMCallCount = ptr(0) // a replay: no model, so no metrics
		case kind == "openai" || kind == "anthropic":
			s.LLMCallCount = ptr(1)
			s.Metrics = metrics(l.Usage)
		default:
			s.Metrics = metrics(l.Usage)
		}
		c.cur, c.curFromModel = c.add(s), true
	case agent.KindToolCall:
		if c.cur < 0 || (!c.curFromModel && c.steps[c.cur].Observation != nil) {
			c.cur, c.curFromModel = c.add(Step{Source: SourceAgent, Timestamp: stamp(l.Time)}), false
		}
		id := c.uniqueID(l.CallID)
		tc := ToolCall{ToolCallID: id, FunctionName: l.Tool, Arguments: object(l.Arguments)}
		if l.CallID != "" && id != l.CallID {
			tc.Extra = map[string]any{"call_id": l.CallID}
		}
		s := &c.steps[c.cur]
		s.ToolCalls = append(s.ToolCalls, tc)
		c.open = append(c.open, openCall{orig: l.CallID, id: id, step: c.cur})
	case agent.KindToolResult:
		r := ObservationResult{Content: l.Text, Extra: lineExtra(l)}
		for _, im := range l.Images {
			r.Images = append(r.Images, ImageSource{MediaType: im.MediaType, Path: im.Path})
		}
		if r.Content == "" && len(l.JSON) > 0 {
			r.Content = string(l.JSON)
			delete(r.Extra, "json")
		}
		step := -1
		if i := c.match(l.CallID); i >= 0 {
			r.SourceCallID, step = c.open[i].id, c.open[i].step
			c.open = append(c.open[:i], c.open[i+1:]...)
		} else {
			// A result of no call we know: kept, without a source_call_id that would name
			// no tool call of its step.
			r.Extra = with(r.Extra, "tool", l.Tool)
			r.Extra = with(r.Extra, "call_id", l.CallID)
			if c.cur < 0 {
				c.cur, c.curFromModel = c.add(Step{Source: SourceAgent, Timestamp: stamp(l.Time)}), false
			}
			step = c.cur
		}
		s := &c.steps[step]
		if s.Observation == nil {
			s.Observation = &Observation{}
		}
		s.Observation.Results = append(s.Observation.Results, r)
	case agent.KindResponse:
		if n := len(c.steps); n > 0 && len(l.JSON) == 0 {
			last := c.steps[n-1]
			if last.Source == SourceAgent && len(last.ToolCalls) == 0 && last.Message == l.Text {
				break
			}
		}
		s := Step{Source: SourceAgent, Message: l.Text, Timestamp: stamp(l.Time), Extra: lineExtra(l)}
		if kind == "scripted" {
			s.LLMCallCount = ptr(0)
		}
		c.add(s)
		c.cur = -1
	case agent.KindError:
		msg := l.Error
		if msg == "" {
			msg = l.Text
		}
		if prev, ok := c.extra["error"].(string); ok && prev != "" {
			msg = prev + "; " + msg
		}
		c.setExtra("error", msg)
	case agent.KindStop:
		c.setExtra("stop", l.Text)
		if l.Turn > 0 {
			c.setExtra("turns", l.Turn)
		}
		if l.ToolCalls > 0 {
			c.setExtra("tool_calls", l.ToolCalls)
		}
		c.stopUsage = l.Usage
	default:
		return fmt.Errorf("unknown kind %q: %w", l.Kind, agentenv.ErrInvalid)
	}
	return nil
}

func (c *converter) setExtra(k string, v any) {
	if c.extra == nil {
		c.extra = map[string]any{}
	}
	c.extra[k] = v
}

// uniqueID is the line's call id, made unique in the trajectory, or a new one.
func (c *converter) uniqueID(id string) string {
	base := id
	if base == "" {
		c.nextID++
		base = fmt.Sprintf("call_%d", c.nextID)
	}
	id = base
	for n := 2; c.used[id]; n++ {
		id = fmt.Sprintf("%s_%d", base, n)
	}
	c.used[id] = true
	return id
}

// match is the index in open of the call a result with call id answers: the oldest open call
// with that id, or with none given, the oldest open call; -1 if none.
func (c *converter) match(id string) int {
	for i, o := range c.open {
		if id == "" || o.orig == id {
			return i
		}
	}
	return -1
}

// final sums the steps' metrics; the stop line's totals win where larger (an agent that
// reports its usage only at the end).
func (c *converter) final() *FinalMetrics {
	var prompt, completion int64
	var cost float64
	known := c.stopUsage != nil
	for _, s := range c.steps {
		if m := s.Metrics; m != nil {
			known = true
			prompt += deref(m.PromptTokens)
			completion += deref(m.CompletionTokens)
			cost += deref(m.CostUSD)
		}
	}
	if u := c.stopUsage; u != nil {
		prompt, completion, cost = max(prompt, u.InputTokens), max(completion, u.OutputTokens), max(cost, u.CostUSD)
	}
	fm := &FinalMetrics{TotalSteps: ptr(len(c.steps))}
	if known {
		fm.TotalPromptTokens, fm.TotalCompletionTokens = ptr(prompt), ptr(completion)
	}
	if cost > 0 {
		fm.TotalCostUSD = ptr(cost)
	}
	return fm
}

// metrics is a model line's usage as ATIF metrics; nil without one. A zero cost is left out:
// agentenv cannot tell it from no price configured.
func metrics(u *agent.Usage) *Metrics {
	if u == nil {
		return nil
	}
	m := &Metrics{PromptTokens: ptr(u.InputTokens), CompletionTokens: ptr(u.OutputTokens)}
	if u.CostUSD > 0 {
		m.CostUSD = ptr(u.CostUSD)
	}
	return m
}

// lineExtra holds the fields of l ATIF has no place for, under agent.Line's names.
func lineExtra(l agent.Line) map[string]any {
	var e map[string]any
	if l.Turn > 0 {
		e = with(e, "turn", l.Turn)
	}
	if l.DurationMS > 0 {
		e = with(e, "duration_ms", l.DurationMS)
	}
	if len(l.JSON) > 0 {
		e = with(e, "json", json.RawMessage(l.JSON))
	}
	if l.IsError {
		e = with(e, "is_error", true)
	}
	return e
}

// with sets e[k] = v (v not the empty string), making e if nil.
func with(e map[string]any, k string, v any) map[string]any {
	if s, ok := v.(string); ok && s == "" {
		return e
	}
	if e == nil {
		e = map[string]any{}
	}
	e[k] = v
	return e
}

// object is a tool call's arguments as the JSON object ATIF wants: an object as it is, none
// (or null) as {}, any other JSON value as {"input": value}.
func object(raw json.RawMessage) json.RawMessage {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return json.RawMessage(`{}`)
	}
	if t[0] == '{' && json.Valid(t) {
		return json.RawMessage(t)
	}
	if !json.Valid(t) {
		b, _ := json.Marshal(string(t))
		t = b
	}
	return json.RawMessage(`{"input":` + string(t) + `}`)
}

func stamp(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeLayout)
}

func ptr[T any](v T) *T { return &v }

func deref[T int64 | float64](p *T) T {
	if p == nil {
		return 0
	}
	return *p
}
