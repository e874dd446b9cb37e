package atif

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/internal/schematest"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// schema is ATIF's JSON Schema, written from the published specification.
func schema(t *testing.T) *jsonschema.Resolved {
	t.Helper()
	b, err := os.ReadFile("testdata/atif.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	return schematest.Resolve(t, "atif.schema.json", b)
}

// checkSchema validates the JSON document doc against rs.
func checkSchema(rs *jsonschema.Resolved, doc []byte) error {
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		return err
	}
	return rs.Validate(v)
}

// lines numbers and times ls as agent.Trajectory would, a second apart from a fixed start.
func lines(ls ...agent.Line) []agent.Line {
	start := time.Date(2026, 12, 3, 10, 0, 0, 123456789, time.UTC)
	for i := range ls {
		ls[i].Seq, ls[i].Time = i+1, start.Add(time.Duration(i)*time.Second)
	}
	return ls
}

func usage(in, out int64, cost float64) *agent.Usage {
	return &agent.Usage{InputTokens: in, OutputTokens: out, CostUSD: cost}
}

// trajectories of each agent kind, as their drivers write them (agent/README.md).
var kinds = map[string]struct {
	lines []agent.Line
	info  Info
}{
	// The built-in model agent: two turns with tool calls, usage and cost, then the answer.
	"model": {lines(
		agent.Line{Kind: agent.KindPrompt, Agent: "openai", Text: "add a note titled a, then find it"},
		agent.Line{Kind: agent.KindModel, Turn: 1, Model: "gpt-x", Text: "adding", ToolCalls: 2, DurationMS: 800, Usage: usage(100, 20, 0.0012)},
		agent.Line{Kind: agent.KindToolCall, Turn: 1, Tool: "notes.add_note", CallID: "c1", Arguments: json.RawMessage(`{"title":"a"}`)},
		agent.Line{Kind: agent.KindToolCall, Turn: 1, Tool: "notes.search", CallID: "c2", Arguments: json.RawMessage(`{"q":"a"}`)},
		agent.Line{Kind: agent.KindToolResult, Turn: 1, Tool: "notes.search", CallID: "c2", Text: "", JSON: json.RawMessage(`{"hits":[]}`), DurationMS: 5},
		agent.Line{Kind: agent.KindToolResult, Turn: 1, Tool: "notes.add_note", CallID: "c1", Text: "ok", DurationMS: 7},
		agent.Line{Kind: agent.KindModel, Turn: 2, Model: "gpt-x", Text: "done", DurationMS: 400, Usage: usage(150, 5, 0.0008)},
		agent.Line{Kind: agent.KindResponse, Text: "done"},
		agent.Line{Kind: agent.KindStop, Text: agent.StopAnswer, Turn: 2, ToolCalls: 2, Usage: usage(250, 25, 0.002)},
	), Info{SessionID: "run-1", TrajectoryID: "run-1/agent", AgentVersion: "v1.2.3", System: "You keep notes."}},

	// The scripted replay: a model line of model "scripted" per call, no model usage.
	"scripted": {lines(
		agent.Line{Kind: agent.KindPrompt, Agent: "scripted", Text: "replay"},
		agent.Line{Kind: agent.KindModel, Turn: 1, Model: "scripted", ToolCalls: 1, Usage: &agent.Usage{}},
		agent.Line{Kind: agent.KindToolCall, Turn: 1, Tool: "kv.put", CallID: "call-1", Arguments: json.RawMessage(`{"key":"k","value":"v"}`)},
		agent.Line{Kind: agent.KindToolResult, Turn: 1, Tool: "kv.put", CallID: "call-1", Text: "stored", DurationMS: 3},
		agent.Line{Kind: agent.KindResponse, Text: "stored k"},
		agent.Line{Kind: agent.KindStop, Text: agent.StopAnswer, Turn: 1, ToolCalls: 1, Usage: &agent.Usage{}},
	), Info{SessionID: "run-2", TrajectoryID: "run-2/replay"}},

	// An A2A agent: its lines carry agent "a2a", tool calls without model lines or call ids,
	// a result of no call, and its usage reported only at the end.
	"a2a": {lines(
		agent.Line{Kind: agent.KindPrompt, Agent: "a2a", Text: "tidy the notes"},
		agent.Line{Kind: agent.KindToolCall, Agent: "a2a", Tool: "notes_list", Arguments: json.RawMessage(`"all"`)},
		agent.Line{Kind: agent.KindToolResult, Agent: "a2a", Tool: "notes_list", Text: "a, b"},
		agent.Line{Kind: agent.KindToolCall, Agent: "a2a", Tool: "notes_delete", CallID: "x", Arguments: json.RawMessage(`{"id":"b"}`)},
		agent.Line{Kind: agent.KindToolResult, Agent: "a2a", Tool: "notes_delete", CallID: "x", Text: "deleted"},
		agent.Line{Kind: agent.KindToolResult, Agent: "a2a", Tool: "notes_audit", CallID: "y", Text: "audit logged"},
		agent.Line{Kind: agent.KindResponse, Text: "kept a", JSON: json.RawMessage(`{"kept":["a"]}`)},
		agent.Line{Kind: agent.KindStop, Text: agent.StopAnswer, Turn: 1, ToolCalls: 2, Usage: usage(900, 60, 0)},
	), Info{SessionID: "run-3", TrajectoryID: "run-3/delegate", AgentName: "tidy-agent", AgentVersion: "0.4", Model: "remote"}},

	// A harness: its own model line with usage, then agentenv's line with the exit code, which
	// failed: an error, no response.
	"error": {lines(
		agent.Line{Kind: agent.KindPrompt, Agent: "harness", Text: "fix the bug"},
		agent.Line{Kind: agent.KindModel, Model: "claude-x", Text: "looking", Usage: usage(40, 10, 0)},
		agent.Line{Kind: agent.KindToolCall, Tool: "bash", CallID: "t1", Arguments: json.RawMessage(`{"cmd":"ls"}`)},
		agent.Line{Kind: agent.KindToolResult, Tool: "bash", CallID: "t1", Text: "permission denied", IsError: true},
		agent.Line{Kind: agent.KindModel, Model: "harness", Text: "gave up", DurationMS: 2100, JSON: json.RawMessage(`{"exit_code":1}`)},
		agent.Line{Kind: agent.KindError, Error: "harness claude exited 1: gave up: agent error"},
		agent.Line{Kind: agent.KindStop, Text: agent.StopError, Turn: 2, ToolCalls: 1, Usage: usage(40, 10, 0)},
	), Info{SessionID: "run-4", TrajectoryID: "run-4/fix"}},

	// A browser's screenshot: the tool result's image saved beside the trajectory file, its
	// content written as parts.
	"screenshot": {lines(
		agent.Line{Kind: agent.KindPrompt, Agent: "openai", Text: "open the shop"},
		agent.Line{Kind: agent.KindModel, Turn: 1, Model: "gpt-x", ToolCalls: 1, Usage: usage(12, 4, 0)},
		agent.Line{Kind: agent.KindToolCall, Turn: 1, Tool: "browser_take_screenshot", CallID: "s1", Arguments: json.RawMessage(`{}`)},
		agent.Line{Kind: agent.KindToolResult, Turn: 1, Tool: "browser_take_screenshot", CallID: "s1", Text: "Took the viewport's screenshot",
			Images: []agent.Image{{Path: "agent.images/0001.png", MediaType: "image/png"}}},
		agent.Line{Kind: agent.KindModel, Turn: 2, Model: "gpt-x", Text: "the shop is open", Usage: usage(20, 5, 0)},
		agent.Line{Kind: agent.KindResponse, Text: "the shop is open"},
		agent.Line{Kind: agent.KindStop, Text: agent.StopAnswer, Turn: 2, ToolCalls: 1, Usage: usage(32, 9, 0)},
	), Info{SessionID: "run-6", TrajectoryID: "run-6/browse"}},

	// The model agent stopped by its turn cap with a call left without a result.
	"capped": {lines(
		agent.Line{Kind: agent.KindPrompt, Agent: "anthropic", Text: "count to three"},
		agent.Line{Kind: agent.KindModel, Turn: 1, Model: "claude-y", ToolCalls: 1, Usage: usage(10, 3, 0)},
		agent.Line{Kind: agent.KindToolCall, Turn: 1, Tool: "count", CallID: "t1", Arguments: json.RawMessage(`{"n":1}`)},
		agent.Line{Kind: agent.KindToolResult, Turn: 1, Tool: "count", CallID: "t1", Text: "1"},
		agent.Line{Kind: agent.KindModel, Turn: 2, Model: "claude-y", ToolCalls: 1, Usage: usage(20, 3, 0)},
		agent.Line{Kind: agent.KindToolCall, Turn: 2, Tool: "count", CallID: "t1", Arguments: json.RawMessage(`{"n":2}`)},
		agent.Line{Kind: agent.KindError, Error: "turn budget of 2 exhausted before the model answered: agent error"},
		agent.Line{Kind: agent.KindStop, Text: agent.StopMaxTurns, Turn: 2, ToolCalls: 2, Usage: usage(30, 6, 0)},
	), Info{SessionID: "run-5", TrajectoryID: "run-5/count"}},
}

// TestFromLinesGolden converts each kind's trajectory, compares it with its golden file and
// validates it against the schema.
func TestFromLinesGolden(t *testing.T) {
	rs := schema(t)
	for name, k := range kinds {
		t.Run(name, func(t *testing.T) {
			tr, err := FromLines(k.lines, k.info)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Marshal(tr)
			if err != nil {
				t.Fatal(err)
			}
			if err := checkSchema(rs, got); err != nil {
				t.Errorf("schema: %v\n%s", err, got)
			}
			golden := filepath.Join("testdata", name+".golden.json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (go test -update writes it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s differs from FromLines:\n%s", golden, got)
			}
		})
	}
}

// TestFromLinesMapping checks the mapping's rules on the converted documents, apart from the
// golden files, so that an -update cannot bless a wrong one.
func TestFromLinesMapping(t *testing.T) {
	conv := func(name string) Trajectory {
		tr, err := FromLines(kinds[name].lines, kinds[name].info)
		if err != nil {
			t.Fatal(err)
		}
		return tr
	}
	sources := func(tr Trajectory) string {
		var s []string
		for _, st := range tr.Steps {
			s = append(s, st.Source)
		}
		return strings.Join(s, ",")
	}

	m := conv("model")
	if got := sources(m); got != "system,user,agent,agent" {
		t.Errorf("model sources = %s (the response repeats the last turn: no step of its own)", got)
	}
	if m.SessionID != "run-1" || m.TrajectoryID != "run-1/agent" || m.Agent.Name != "agentenv-openai" || m.Agent.Version != "v1.2.3" || m.Agent.ModelName != "gpt-x" {
		t.Errorf("model root = %+v", m)
	}
	s := m.Steps[2]
	if len(s.ToolCalls) != 2 || s.Observation == nil || len(s.Observation.Results) != 2 ||
		s.Observation.Results[0].SourceCallID != "c2" || s.Observation.Results[0].Content != `{"hits":[]}` ||
		s.Observation.Results[1].SourceCallID != "c1" || s.Observation.Results[1].Content != "ok" {
		t.Errorf("turn 1 = %+v", s)
	}
	if *s.Metrics.PromptTokens != 100 || *s.Metrics.CompletionTokens != 20 || *s.Metrics.CostUSD != 0.0012 || *s.LLMCallCount != 1 {
		t.Errorf("turn 1 metrics = %+v", s.Metrics)
	}
	if f := m.FinalMetrics; *f.TotalPromptTokens != 250 || *f.TotalCompletionTokens != 25 || *f.TotalCostUSD != 0.002 || *f.TotalSteps != 4 {
		t.Errorf("final metrics = %+v", f)
	}
	if m.Steps[1].Timestamp != "2026-12-03T10:00:00.123456Z" {
		t.Errorf("timestamp = %q", m.Steps[1].Timestamp)
	}

	sc := conv("scripted")
	if got := sources(sc); got != "user,agent,agent" {
		t.Errorf("scripted sources = %s", got)
	}
	if st := sc.Steps[1]; st.Metrics != nil || st.LLMCallCount == nil || *st.LLMCallCount != 0 {
		t.Errorf("a replay's step says it called a model: %+v", st)
	}

	a := conv("a2a")
	if got := sources(a); got != "user,agent,agent,agent" {
		t.Errorf("a2a sources = %s", got)
	}
	first, second := a.Steps[1], a.Steps[2]
	if first.ToolCalls[0].ToolCallID != "call_1" || string(first.ToolCalls[0].Arguments) != `{"input":"all"}` || first.Observation.Results[0].SourceCallID != "call_1" {
		t.Errorf("a2a first call = %+v", first)
	}
	res := second.Observation.Results
	if len(res) != 2 || res[0].SourceCallID != "x" || res[1].SourceCallID != "" || res[1].Extra["call_id"] != "y" || res[1].Content != "audit logged" {
		t.Errorf("a2a results = %+v (a result of no call is kept without source_call_id)", res)
	}
	if *a.FinalMetrics.TotalPromptTokens != 900 || a.Agent.Name != "tidy-agent" || a.Agent.ModelName != "remote" {
		t.Errorf("a2a = %+v %+v (usage reported only at the stop counts)", a.Agent, a.FinalMetrics)
	}
	if a.Steps[3].Message != "kept a" || a.Steps[3].Extra["json"] == nil {
		t.Errorf("a2a response = %+v", a.Steps[3])
	}

	e := conv("error")
	if e.Extra["stop"] != agent.StopError || !strings.Contains(e.Extra["error"].(string), "exited 1") || e.Steps[1].Observation.Results[0].Extra["is_error"] != true || e.Steps[2].Extra["json"] == nil {
		t.Errorf("error = %+v", e)
	}

	c := conv("capped")
	calls := c.Steps[2].ToolCalls
	if c.Extra["stop"] != agent.StopMaxTurns || len(calls) != 1 || calls[0].ToolCallID != "t1_2" || calls[0].Extra["call_id"] != "t1" || c.Steps[2].Observation != nil {
		t.Errorf("capped = %+v, last turn %+v (a reused call id made unique, the call left without a result)", c.Extra, c.Steps[2])
	}
}

// TestSchemaRefuses shows the schema check can fail: documents missing a required field, or
// with an agent-only field on a user step, are refused, and Validate refuses what the schema
// cannot see.
func TestSchemaRefuses(t *testing.T) {
	rs := schema(t)
	tr, err := FromLines(kinds["model"].lines, kinds["model"].info)
	if err != nil {
		t.Fatal(err)
	}
	good, err := json.Marshal(tr)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkSchema(rs, good); err != nil {
		t.Fatalf("the good document: %v", err)
	}
	edits := map[string]func(doc map[string]any){
		"no schema_version":     func(d map[string]any) { delete(d, "schema_version") },
		"no agent.version":      func(d map[string]any) { delete(d["agent"].(map[string]any), "version") },
		"no steps":              func(d map[string]any) { delete(d, "steps") },
		"no step message":       func(d map[string]any) { delete(step(d, 2), "message") },
		"no tool_call_id":       func(d map[string]any) { delete(step(d, 2)["tool_calls"].([]any)[0].(map[string]any), "tool_call_id") },
		"unknown field":         func(d map[string]any) { d["trajectory"] = "x" },
		"bad source":            func(d map[string]any) { step(d, 1)["source"] = "assistant" },
		"metrics on user step":  func(d map[string]any) { step(d, 1)["metrics"] = map[string]any{} },
		"arguments not object":  func(d map[string]any) { step(d, 2)["tool_calls"].([]any)[0].(map[string]any)["arguments"] = "{}" },
		"metrics on a dispatch": func(d map[string]any) { step(d, 2)["llm_call_count"] = 0 },
	}
	for name, edit := range edits {
		var doc map[string]any
		if err := json.Unmarshal(good, &doc); err != nil {
			t.Fatal(err)
		}
		edit(doc)
		b, _ := json.Marshal(doc)
		if err := checkSchema(rs, b); err == nil {
			t.Errorf("%s: the schema accepts %s", name, b)
		}
	}

	bad := tr
	bad.Steps = append([]Step(nil), tr.Steps...)
	bad.Steps[1].StepID = 7
	if err := Validate(bad); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "steps[1].step_id") {
		t.Errorf("Validate(step ids out of order) = %v", err)
	}
	bad.Steps[1].StepID = 2
	bad.Steps[2].Observation = &Observation{Results: []ObservationResult{{SourceCallID: "nope"}}}
	if _, err := Marshal(bad); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "source_call_id") {
		t.Errorf("Marshal(a result of a call not in its step) = %v", err)
	}
}

func step(doc map[string]any, i int) map[string]any {
	return doc["steps"].([]any)[i].(map[string]any)
}

func TestReadLines(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "a.trajectory.ndjson")
	tr, err := agent.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	tr.Write(agent.Line{Kind: agent.KindPrompt, Agent: "scripted", Text: "hi"})
	agent.Finish(tr, agent.Answer{Text: "hello"}, nil)
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	ls, err := ReadLines(p)
	if err != nil || len(ls) != 3 || ls[0].Text != "hi" || ls[1].Kind != agent.KindResponse || ls[2].Seq != 3 {
		t.Fatalf("ReadLines = %+v, %v", ls, err)
	}
	if _, err := FromLines(ls, Info{}); err != nil {
		t.Errorf("FromLines: %v", err)
	}

	broken := filepath.Join(dir, "broken.ndjson")
	if err := os.WriteFile(broken, []byte(`{"seq":1,"kind":"prompt"}`+"\n\n{oops\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadLines(broken); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "broken.ndjson:3") {
		t.Errorf("ReadLines(broken) = %v, want the file and line 3", err)
	}
	if _, err := FromLines([]agent.Line{{Kind: "thought"}}, Info{}); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("FromLines(unknown kind) = %v", err)
	}
	if _, err := FromLines(nil, Info{}); !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("FromLines(nothing) = %v", err)
	}
}
