package task

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/agent"
)

// The wire types of an OpenAI-compatible chat completions endpoint: only what the agent uses.
type (
	chatRequest struct {
		Model    string        `json:"model"`
		Messages []chatMessage `json:"messages"`
		Tools    []chatTool    `json:"tools,omitempty"`
	}
	chatMessage struct {
		Role       string         `json:"role"`
		Content    string         `json:"content"`
		ToolCalls  []chatToolCall `json:"tool_calls,omitempty"`
		ToolCallID string         `json:"tool_call_id,omitempty"`
	}
	chatTool struct {
		Type     string       `json:"type"`
		Function chatFunction `json:"function"`
	}
	chatFunction struct {
		Name        string          `json:"name"`
		Description string          `json:"description,omitempty"`
		Parameters  json.RawMessage `json:"parameters,omitempty"`
	}
	chatToolCall struct {
		ID       string `json:"id"`
		Type     string `json:"type"`
		Function struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"function"`
	}
	chatResponse struct {
		Choices []struct {
			Message      chatMessage `json:"message"`
			FinishReason string      `json:"finish_reason"`
		} `json:"choices"`
		Error *struct {
			Message string `json:"message"`
		} `json:"error"`
	}
)

// badFuncChar is what OpenAI function names may not contain.
var badFuncChar = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// openai runs the built-in agent: it offers the gateway's tools as functions and loops over
// the model's tool calls until the model answers without one or the turn budget runs out (the
// step's timeout bounds the time).
func (s *promptAgent) openai(ctx context.Context, sc *scope, cs *mcp.ClientSession, tr *agent.Trajectory) (agentRun, error) {
	var out agentRun
	src := sc.e.r.Model
	if src == nil {
		return out, fmt.Errorf("openai agent: no [model] settings configured")
	}
	base, err := src.Get("model.base_url")
	if err != nil {
		return out, fmt.Errorf("model.base_url: %w", err)
	}
	if base == "" {
		return out, fmt.Errorf("openai agent: model.base_url is not set")
	}
	model := s.Model
	if model == "" {
		if model, err = src.Get("model.name"); err != nil {
			return out, fmt.Errorf("model.name: %w", err)
		}
	}
	key, err := src.Get("model.api_key")
	if err != nil {
		return out, fmt.Errorf("model.api_key: %w", err)
	}
	sc.secret(key)

	tools, err := toolsOf(ctx, cs)
	if err != nil {
		return out, err
	}
	byFunc := map[string]string{}
	var funcs []chatTool
	for _, t := range tools {
		name := badFuncChar.ReplaceAllString(t.Name, "_")
		if len(name) > 60 {
			name = name[:60]
		}
		for i := 2; byFunc[name] != ""; i++ {
			name = fmt.Sprintf("%s_%d", strings.TrimRight(name[:min(len(name), 56)], "_"), i)
		}
		byFunc[name] = t.Name
		params := json.RawMessage(`{"type":"object"}`)
		if t.InputSchema != nil {
			params = json.RawMessage(marshal(t.InputSchema))
		}
		funcs = append(funcs, chatTool{Type: "function", Function: chatFunction{Name: name, Description: t.Description, Parameters: params}})
	}

	var msgs []chatMessage
	if s.System != "" {
		msgs = append(msgs, chatMessage{Role: "system", Content: s.System})
	}
	msgs = append(msgs, chatMessage{Role: "user", Content: s.Prompt})
	maxTurns := s.MaxTurns
	if maxTurns == 0 {
		maxTurns = DefaultMaxTurns
	}
	url := strings.TrimSuffix(base, "/") + "/chat/completions"
	for {
		if out.turns >= maxTurns {
			return out, fmt.Errorf("turn budget of %d exhausted before the model answered", maxTurns)
		}
		out.turns++
		reply, err := s.chat(ctx, sc, url, key, chatRequest{Model: model, Messages: msgs, Tools: funcs})
		if err != nil {
			return out, err
		}
		tr.Write(agent.Line{Kind: "model", Turn: out.turns, Model: model, Text: reply.Content, ToolCalls: len(reply.ToolCalls)})
		reply.Role = "assistant"
		msgs = append(msgs, reply)
		if len(reply.ToolCalls) == 0 {
			out.response = reply.Content
			return out, nil
		}
		for _, call := range reply.ToolCalls {
			out.calls++
			tool, ok := byFunc[call.Function.Name]
			if !ok {
				tool = call.Function.Name
			}
			tr.Write(agent.Line{Kind: "tool_call", Turn: out.turns, Tool: tool, CallID: call.ID, Arguments: json.RawMessage(call.Function.Arguments)})
			content := s.callForModel(ctx, cs, tr, out.turns, tool, call)
			msgs = append(msgs, chatMessage{Role: "tool", ToolCallID: call.ID, Content: content})
		}
	}
}

// callForModel makes one tool call the model asked for and returns what the model is told:
// the result's text (or structured content), or what went wrong.
func (s *promptAgent) callForModel(ctx context.Context, cs *mcp.ClientSession, tr *agent.Trajectory, turn int, tool string, call chatToolCall) string {
	var args map[string]any
	if a := strings.TrimSpace(call.Function.Arguments); a != "" {
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			msg := "error: arguments are not a JSON object: " + err.Error()
			writeResult(tr, turn, tool, call.ID, toolCall{Text: msg, IsError: true})
			return msg
		}
	}
	tc, err := callOne(ctx, cs, tool, args)
	if err != nil {
		tc = toolCall{Text: "error: " + err.Error(), IsError: true}
	}
	writeResult(tr, turn, tool, call.ID, tc)
	if tc.Text == "" && tc.JSON != "" {
		return tc.JSON
	}
	return tc.Text
}

// chat sends one chat completions request and returns the first choice's message.
func (s *promptAgent) chat(ctx context.Context, sc *scope, url, key string, req chatRequest) (chatMessage, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return chatMessage{}, fmt.Errorf("model request: %w", err)
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return chatMessage{}, fmt.Errorf("model endpoint: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	if key != "" {
		hreq.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := sc.e.r.httpClient().Do(hreq)
	if err != nil {
		return chatMessage{}, fmt.Errorf("model endpoint unreachable: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return chatMessage{}, fmt.Errorf("model endpoint: %w", err)
	}
	var cr chatResponse
	jerr := json.Unmarshal(raw, &cr)
	switch {
	case resp.StatusCode != http.StatusOK && jerr == nil && cr.Error != nil:
		return chatMessage{}, fmt.Errorf("model endpoint answered %s: %s", resp.Status, cr.Error.Message)
	case resp.StatusCode != http.StatusOK:
		return chatMessage{}, fmt.Errorf("model endpoint answered %s: %s", resp.Status, tail(string(raw), 300))
	case jerr != nil:
		return chatMessage{}, fmt.Errorf("model endpoint: bad response: %w", jerr)
	case len(cr.Choices) == 0:
		return chatMessage{}, fmt.Errorf("model endpoint: no choices in the response")
	}
	return cr.Choices[0].Message, nil
}
