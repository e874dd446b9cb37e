// Package atif owns the Agent Trajectory Interchange Format (ATIF), the trajectory shape
// Harbor's verifiers and viewers read: its types, the conversion of agentenv's own trajectory
// (agent.Line, one prompt_agent step's file) into it, and the checks the format's JSON Schema
// cannot make.
//
// The version written is SchemaVersion, after the specification published at
// https://github.com/harbor-framework/harbor/blob/main/rfcs/0001-trajectory-format.md.
// Field names are the specification's; a field it makes optional is omitted when empty.
package atif

import (
	"encoding/json"
	"fmt"

	"github.com/agentenv/agentenv"
)

// SchemaVersion is the ATIF version FromLines writes.
const SchemaVersion = "ATIF-v1.7"

// Step sources.
const (
	SourceSystem = "system"
	SourceUser   = "user"
	SourceAgent  = "agent"
)

// Trajectory is an ATIF document: one agent's interaction history.
type Trajectory struct {
	SchemaVersion string `json:"schema_version"`
	// SessionID is run-scoped: trajectories of one run may share it.
	SessionID string `json:"session_id,omitempty"`
	// TrajectoryID names this document, unique where several share a session.
	TrajectoryID           string         `json:"trajectory_id,omitempty"`
	Agent                  Agent          `json:"agent"`
	Steps                  []Step         `json:"steps"`
	Notes                  string         `json:"notes,omitempty"`
	FinalMetrics           *FinalMetrics  `json:"final_metrics,omitempty"`
	ContinuedTrajectoryRef string         `json:"continued_trajectory_ref,omitempty"`
	Extra                  map[string]any `json:"extra,omitempty"`
	SubagentTrajectories   []Trajectory   `json:"subagent_trajectories,omitempty"`
}

// Agent is the agent system that produced a trajectory.
type Agent struct {
	Name            string            `json:"name"`
	Version         string            `json:"version"`
	ModelName       string            `json:"model_name,omitempty"`
	ToolDefinitions []json.RawMessage `json:"tool_definitions,omitempty"`
	Extra           map[string]any    `json:"extra,omitempty"`
}

// FinalMetrics sums a trajectory's metrics. A nil field is not known.
type FinalMetrics struct {
	TotalPromptTokens     *int64         `json:"total_prompt_tokens,omitempty"`
	TotalCompletionTokens *int64         `json:"total_completion_tokens,omitempty"`
	TotalCachedTokens     *int64         `json:"total_cached_tokens,omitempty"`
	TotalCostUSD          *float64       `json:"total_cost_usd,omitempty"`
	TotalSteps            *int           `json:"total_steps,omitempty"`
	Extra                 map[string]any `json:"extra,omitempty"`
}

// Step is one turn: a system prompt, a user message, or an agent's turn with its tool calls
// and their results. Message is text only (the specification also allows content parts,
// which agentenv does not produce); it is required but may be empty.
type Step struct {
	StepID           int            `json:"step_id"`
	Timestamp        string         `json:"timestamp,omitempty"` // ISO 8601
	Source           string         `json:"source"`              // one of the Source* values
	ModelName        string         `json:"model_name,omitempty"`
	ReasoningEffort  any            `json:"reasoning_effort,omitempty"` // a string or a number
	Message          string         `json:"message"`
	ReasoningContent string         `json:"reasoning_content,omitempty"`
	ToolCalls        []ToolCall     `json:"tool_calls,omitempty"`
	Observation      *Observation   `json:"observation,omitempty"`
	Metrics          *Metrics       `json:"metrics,omitempty"`
	Extra            map[string]any `json:"extra,omitempty"`
	// LLMCallCount is how many model inferences the step stands for: 0 on an agent step is a
	// deterministic dispatch (no metrics then); nil is not known.
	LLMCallCount    *int  `json:"llm_call_count,omitempty"`
	IsCopiedContext *bool `json:"is_copied_context,omitempty"`
}

// ToolCall is one call an agent step made. Arguments is a JSON object.
type ToolCall struct {
	ToolCallID   string          `json:"tool_call_id"`
	FunctionName string          `json:"function_name"`
	Arguments    json.RawMessage `json:"arguments"`
	Extra        map[string]any  `json:"extra,omitempty"`
}

// Observation holds what the environment answered in a step.
type Observation struct {
	Results []ObservationResult `json:"results"`
}

// ObservationResult is one result: of the tool call SourceCallID names in the same step, or,
// without one, of no call the step made.
type ObservationResult struct {
	SourceCallID string `json:"source_call_id,omitempty"`
	Content      string `json:"content,omitempty"`
	// Images are the result's images (a browser's screenshots); with any, content is written
	// as parts (ATIF v1.6+): Content as a text part, then an image part for each.
	Images                []ImageSource           `json:"-"`
	SubagentTrajectoryRef []SubagentTrajectoryRef `json:"subagent_trajectory_ref,omitempty"`
	Extra                 map[string]any          `json:"extra,omitempty"`
}

// ImageSource is an image part's source: a file, by path, and its media type.
type ImageSource struct {
	MediaType string `json:"media_type"`
	Path      string `json:"path"`
}

// ContentPart is one part of a content written as parts: text, or an image.
type ContentPart struct {
	Type   string       `json:"type"` // "text" or "image"
	Text   string       `json:"text,omitempty"`
	Source *ImageSource `json:"source,omitempty"`
}

// MarshalJSON writes r with its content as a string, or as parts when it has images.
func (r ObservationResult) MarshalJSON() ([]byte, error) {
	type plain ObservationResult // without this method
	if len(r.Images) == 0 {
		return json.Marshal(plain(r))
	}
	var parts []ContentPart
	if r.Content != "" {
		parts = append(parts, ContentPart{Type: "text", Text: r.Content})
	}
	for _, im := range r.Images {
		parts = append(parts, ContentPart{Type: "image", Source: &im})
	}
	return json.Marshal(struct {
		plain
		Content []ContentPart `json:"content"`
	}{plain(r), parts})
}

// SubagentTrajectoryRef points at a delegated agent's trajectory, embedded (TrajectoryID) or
// in a file (TrajectoryPath).
type SubagentTrajectoryRef struct {
	TrajectoryID   string         `json:"trajectory_id,omitempty"`
	TrajectoryPath string         `json:"trajectory_path,omitempty"`
	SessionID      string         `json:"session_id,omitempty"`
	Extra          map[string]any `json:"extra,omitempty"`
}

// Metrics are one step's model usage. A nil field is not known.
type Metrics struct {
	PromptTokens       *int64         `json:"prompt_tokens,omitempty"` // all input tokens, cached ones included
	CompletionTokens   *int64         `json:"completion_tokens,omitempty"`
	CachedTokens       *int64         `json:"cached_tokens,omitempty"`
	CostUSD            *float64       `json:"cost_usd,omitempty"`
	PromptTokenIDs     []int64        `json:"prompt_token_ids,omitempty"`
	CompletionTokenIDs []int64        `json:"completion_token_ids,omitempty"`
	Logprobs           []float64      `json:"logprobs,omitempty"`
	Extra              map[string]any `json:"extra,omitempty"`
}

// Marshal returns t as indented JSON, the trajectory.json a Harbor-style harness expects, after
// checking it with Validate.
func Marshal(t Trajectory) ([]byte, error) {
	if err := Validate(t); err != nil {
		return nil, err
	}
	b, err := json.MarshalIndent(t, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("atif: %w", err)
	}
	return append(b, '\n'), nil
}

// Validate checks the rules of the specification that its field types do not carry: the
// required fields, step_id 1, 2, … in order, the fields only agent steps may have, no
// metrics on a deterministic dispatch, tool call ids unique and every source_call_id naming
// a tool call of its own step, arguments a JSON object. A broken rule is an error naming the
// field, wrapping agentenv.ErrInvalid.
func Validate(t Trajectory) error {
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("atif: %s: %s: %w", field, fmt.Sprintf(format, args...), agentenv.ErrInvalid)
	}
	switch {
	case t.SchemaVersion == "":
		return bad("schema_version", "missing")
	case t.Agent.Name == "":
		return bad("agent.name", "missing")
	case t.Agent.Version == "":
		return bad("agent.version", "missing")
	case t.Steps == nil:
		return bad("steps", "missing")
	}
	ids := map[string]bool{}
	for i, s := range t.Steps {
		at := fmt.Sprintf("steps[%d]", i)
		if s.StepID != i+1 {
			return bad(at+".step_id", "%d, want %d", s.StepID, i+1)
		}
		switch s.Source {
		case SourceAgent:
		case SourceSystem, SourceUser:
			if s.ModelName != "" || s.ReasoningEffort != nil || s.ReasoningContent != "" || s.ToolCalls != nil || s.Metrics != nil {
				return bad(at, "a %s step has fields only agent steps may have", s.Source)
			}
		default:
			return bad(at+".source", "%q, want system, user or agent", s.Source)
		}
		if s.Source == SourceAgent && s.LLMCallCount != nil && *s.LLMCallCount == 0 && (s.Metrics != nil || s.ReasoningContent != "") {
			return bad(at, "llm_call_count 0 with metrics or reasoning_content")
		}
		calls := map[string]bool{}
		for j, c := range s.ToolCalls {
			cat := fmt.Sprintf("%s.tool_calls[%d]", at, j)
			if c.ToolCallID == "" || ids[c.ToolCallID] {
				return bad(cat+".tool_call_id", "%q missing or not unique", c.ToolCallID)
			}
			var obj map[string]json.RawMessage
			if json.Unmarshal(c.Arguments, &obj) != nil || obj == nil {
				return bad(cat+".arguments", "not a JSON object")
			}
			ids[c.ToolCallID], calls[c.ToolCallID] = true, true
		}
		if s.Observation != nil {
			for j, r := range s.Observation.Results {
				if r.SourceCallID != "" && !calls[r.SourceCallID] {
					return bad(fmt.Sprintf("%s.observation.results[%d].source_call_id", at, j), "%q is no tool call of this step", r.SourceCallID)
				}
			}
		}
	}
	seen := map[string]bool{}
	for i, sub := range t.SubagentTrajectories {
		if sub.TrajectoryID == "" || seen[sub.TrajectoryID] {
			return bad(fmt.Sprintf("subagent_trajectories[%d].trajectory_id", i), "%q missing or not unique", sub.TrajectoryID)
		}
		seen[sub.TrajectoryID] = true
		if err := Validate(sub); err != nil {
			return fmt.Errorf("subagent_trajectories[%d]: %w", i, err)
		}
	}
	return nil
}
