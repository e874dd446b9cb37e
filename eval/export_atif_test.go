package eval

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/agent/atif"
	"github.com/agentenv/agentenv/internal/schematest"
	"github.com/agentenv/agentenv/task"
)

// TestExportATIF exports a group whose finished episode has two prompt_agent steps (a model
// agent's with tool calls, a scripted replay's) and a cancelled one: one ATIF trajectory per
// step of the finished episode, each valid against ATIF's JSON Schema and atif.Validate,
// secrets redacted everywhere (system prompt, prompt, arguments, results, error, seed).
func TestExportATIF(t *testing.T) {
	r := newRig(t)
	ctx := t.Context()
	const secret = "sk-secret-value"
	token := strings.Repeat("cd", 24)
	taskFile := r.write(t, "notes.yaml", `name: notes
steps:
  - id: agent
    type: prompt_agent
    system: "You are <who>'s notes agent; the key is `+secret+`."
`)

	write := func(name string, ls ...agent.Line) string {
		p := filepath.Join(r.dir, name)
		tr, err := agent.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			tr.Write(l)
		}
		if err := tr.Close(); err != nil {
			t.Fatal(err)
		}
		return p
	}
	first := write("agent.trajectory.ndjson",
		agent.Line{Kind: agent.KindPrompt, Agent: "openai", Text: "add a note with " + secret},
		agent.Line{Kind: agent.KindModel, Turn: 1, Model: "gpt-x", ToolCalls: 1, Usage: &agent.Usage{InputTokens: 10, OutputTokens: 2, CostUSD: 0.01}},
		agent.Line{Kind: agent.KindToolCall, Turn: 1, Tool: "notes.add_note", CallID: "c1",
			Arguments: json.RawMessage(`{"title":"Bearer abcdefghijkl","body":{"token":"` + token + `"}}`)},
		agent.Line{Kind: agent.KindToolResult, Turn: 1, Tool: "notes.add_note", CallID: "c1", Text: "stored " + secret, JSON: json.RawMessage(`{"echo":"` + secret + `"}`)},
		agent.Line{Kind: agent.KindModel, Turn: 2, Model: "gpt-x", Text: "done", Usage: &agent.Usage{InputTokens: 20, OutputTokens: 3, CostUSD: 0.02}},
		agent.Line{Kind: agent.KindResponse, Text: "done"},
		agent.Line{Kind: agent.KindStop, Text: agent.StopAnswer, Turn: 2, ToolCalls: 1, Usage: &agent.Usage{InputTokens: 30, OutputTokens: 5, CostUSD: 0.03}},
	)
	second := write("replay.trajectory.ndjson",
		agent.Line{Kind: agent.KindPrompt, Agent: "scripted", Text: "replay"},
		agent.Line{Kind: agent.KindModel, Turn: 1, Model: "scripted", ToolCalls: 1, Usage: &agent.Usage{}},
		agent.Line{Kind: agent.KindToolCall, Turn: 1, Tool: "notes.get", CallID: "call-1", Arguments: json.RawMessage(`{}`)},
		agent.Line{Kind: agent.KindToolResult, Turn: 1, Tool: "notes.get", CallID: "call-1", Text: "nothing", IsError: true},
		agent.Line{Kind: agent.KindError, Error: "scripted call 1: " + secret + ": agent error"},
		agent.Line{Kind: agent.KindStop, Text: agent.StopError, Turn: 1, ToolCalls: 1, Usage: &agent.Usage{}},
	)

	half := 0.5
	g := Group{ID: "group-a", Name: "x", Tasks: []GroupTask{{Task: "notes", File: taskFile, K: 2, Instances: 1}}, Status: agentenv.RunCompleted, Created: time.Now()}
	if err := (Store{r.ledger}).Put(ctx, g); err != nil {
		t.Fatal(err)
	}
	for i, st := range []agentenv.RunStatus{agentenv.RunCompleted, agentenv.RunCancelled} {
		doc := agentenv.Run{ID: "run-" + string(rune('a'+i)), Task: "notes", Status: st, Score: &half, Created: time.Now(),
			Attrs: map[string]string{AttrGroup: g.ID, AttrGroupTask: "0", AttrInstance: "0", AttrAttempt: string(rune('1' + i)), "seed.who": "ada " + secret},
			Steps: []agentenv.StepRecord{
				{ID: "agent", Type: task.TypePromptAgent, Status: agentenv.StepPassed, Outputs: map[string]string{"trajectory": first}},
				{ID: "replay", Type: task.TypePromptAgent, Status: agentenv.StepFailed, Outputs: map[string]string{"trajectory": second}},
				{ID: "check", Type: task.TypeToolResult, Status: agentenv.StepPassed, Score: &half},
			}}
		if err := r.ledger.Runs().Put(ctx, doc); err != nil {
			t.Fatal(err)
		}
	}
	if err := CheckFormat(FormatATIF); err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	n, err := Export(ctx, r.ledger, g, FormatATIF, &buf, Redactor{Values: []string{secret}})
	if err != nil || n != 1 {
		t.Fatalf("Export = %d, %v; want 1 finished episode", n, err)
	}
	text := buf.String()
	for _, s := range []string{secret, token, "abcdefghijkl"} {
		if strings.Contains(text, s) {
			t.Errorf("export holds the secret %q:\n%s", s, text)
		}
	}

	schema, err := os.ReadFile("../agent/atif/testdata/atif.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	rs := schematest.Resolve(t, "atif.schema.json", schema)
	lines := strings.Split(strings.TrimSpace(text), "\n")
	if len(lines) != 2 {
		t.Fatalf("%d lines, want one per prompt_agent step of the finished episode:\n%s", len(lines), text)
	}
	var got []atif.Trajectory
	for _, line := range lines {
		var v any
		if err := json.Unmarshal([]byte(line), &v); err != nil {
			t.Fatal(err)
		}
		if err := rs.Validate(v); err != nil {
			t.Errorf("schema: %v\n%s", err, line)
		}
		var tr atif.Trajectory
		if err := json.Unmarshal([]byte(line), &tr); err != nil {
			t.Fatal(err)
		}
		if err := atif.Validate(tr); err != nil {
			t.Error(err)
		}
		got = append(got, tr)
	}
	a, b := got[0], got[1]
	if a.SessionID != "run-a" || b.SessionID != "run-a" || a.TrajectoryID != "run-a/agent" || b.TrajectoryID != "run-a/replay" {
		t.Errorf("ids = %s %s, %s %s", a.SessionID, a.TrajectoryID, b.SessionID, b.TrajectoryID)
	}
	if a.Steps[0].Source != atif.SourceSystem || a.Steps[0].Message != "You are ada [redacted]'s notes agent; the key is [redacted]." {
		t.Errorf("system step = %+v", a.Steps[0])
	}
	if b.Steps[0].Source != atif.SourceUser {
		t.Errorf("the replay step has no system prompt: %+v", b.Steps[0])
	}
	var args map[string]any
	if err := json.Unmarshal(a.Steps[2].ToolCalls[0].Arguments, &args); err != nil || args["title"] != "Bearer [redacted]" || args["body"].(map[string]any)["token"] != "[redacted]" {
		t.Errorf("arguments = %s, %v", a.Steps[2].ToolCalls[0].Arguments, err)
	}
	if f := a.FinalMetrics; f == nil || *f.TotalPromptTokens != 30 || *f.TotalCostUSD != 0.03 || a.Agent.Name != "agentenv-openai" || a.Agent.Version == "" {
		t.Errorf("agent %+v, final metrics %+v", a.Agent, a.FinalMetrics)
	}
	if b.Extra["stop"] != agent.StopError || b.Extra["error"] != "scripted call 1: [redacted]: agent error" {
		t.Errorf("replay extra = %v", b.Extra)
	}
	ep, _ := a.Extra["episode"].(map[string]any)
	if ep["group"] != "group-a" || ep["run"] != "run-a" || ep["step"] != "agent" || ep["score"] != 0.5 || ep["outcome"] == "" || ep["attempt"] != 1.0 ||
		ep["seed"].(map[string]any)["who"] != "ada [redacted]" {
		t.Errorf("episode = %v", ep)
	}
}
