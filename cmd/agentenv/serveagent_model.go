package main

// This file is the one place `agentenv serve agent` gets its model agent from. Until the
// built-in model agent on the official SDKs (agent/model) lands, it is a thin chat-completions
// loop of its own; swapping in agent/model means replacing newModelAgent's body.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/mcpclient"
)

// modelSettings are the [model] settings the served agent uses.
type modelSettings struct {
	BaseURL, APIKey, Model string
	MaxTurns               int
}

// newModelAgent returns the built-in model agent with s.
func newModelAgent(s modelSettings) agent.Agent {
	if s.MaxTurns <= 0 {
		s.MaxTurns = 20
	}
	return &chatAgent{s: s, hc: &http.Client{Timeout: 5 * time.Minute}}
}

// chatAgent offers the gateway's tools as functions to an OpenAI-compatible chat completions
// endpoint and loops over the model's tool calls until it answers without one.
type chatAgent struct {
	s  modelSettings
	hc *http.Client
}

var funcName = regexp.MustCompile(`[^A-Za-z0-9_-]`)

type chatMsg struct {
	Role       string     `json:"role"`
	Content    string     `json:"content"`
	ToolCalls  []chatCall `json:"tool_calls,omitempty"`
	ToolCallID string     `json:"tool_call_id,omitempty"`
}

type chatCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name      string `json:"name"`
		Arguments string `json:"arguments"`
	} `json:"function"`
}

func (a *chatAgent) Prompt(ctx context.Context, p agent.Prompt, tr *agent.Trajectory) (agent.Answer, error) {
	ans := agent.Answer{Stop: agent.StopError}
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.Timeout)
		defer cancel()
	}
	if p.Gateway.URL == "" {
		return ans, fmt.Errorf("no gateway: hand one over with mcp-config or the %s metadata: %w", "agentenv.mcp_servers", agent.ErrAgent)
	}
	cs, err := mcpclient.Client{HTTP: &http.Client{Transport: headers(p.Gateway.Headers)}}.Connect(ctx, p.Gateway.URL, "")
	if err != nil {
		return ans, fmt.Errorf("gateway %s: %w", p.Gateway.URL, err)
	}
	defer cs.Close()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		return ans, fmt.Errorf("gateway %s: tools/list: %w", p.Gateway.URL, err)
	}
	byFunc := map[string]string{}
	var funcs []map[string]any
	for _, t := range lt.Tools {
		name := funcName.ReplaceAllString(t.Name, "_")
		byFunc[name] = t.Name
		funcs = append(funcs, map[string]any{"type": "function", "function": map[string]any{"name": name, "description": t.Description, "parameters": t.InputSchema}})
	}
	model := p.Model
	if model == "" {
		model = a.s.Model
	}
	maxTurns := p.MaxTurns
	if maxTurns <= 0 {
		maxTurns = a.s.MaxTurns
	}
	var msgs []chatMsg
	if p.SystemPrompt != "" {
		msgs = append(msgs, chatMsg{Role: "system", Content: p.SystemPrompt})
	}
	msgs = append(msgs, chatMsg{Role: "user", Content: p.Text})
	for {
		if ans.Turns >= maxTurns {
			ans.Stop = agent.StopMaxTurns
			return ans, fmt.Errorf("max_turns %d reached before the model answered: %w", maxTurns, agent.ErrAgent)
		}
		ans.Turns++
		start := time.Now()
		reply, err := a.chat(ctx, map[string]any{"model": model, "messages": msgs, "tools": funcs})
		if err != nil {
			return ans, err
		}
		tr.Write(agent.Line{Kind: agent.KindModel, Turn: ans.Turns, Model: model, Text: reply.Content, ToolCalls: len(reply.ToolCalls), DurationMS: time.Since(start).Milliseconds()})
		reply.Role = "assistant"
		msgs = append(msgs, reply)
		if len(reply.ToolCalls) == 0 {
			ans.Text, ans.Stop = reply.Content, agent.StopAnswer
			return ans, nil
		}
		for _, c := range reply.ToolCalls {
			ans.ToolCalls++
			tool := byFunc[c.Function.Name]
			if tool == "" {
				tool = c.Function.Name
			}
			tr.Write(agent.Line{Kind: agent.KindToolCall, Turn: ans.Turns, Tool: tool, CallID: c.ID, Arguments: json.RawMessage(c.Function.Arguments)})
			var args map[string]any
			_ = json.Unmarshal([]byte(c.Function.Arguments), &args)
			content := ""
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
			switch {
			case err != nil:
				content = "error: " + err.Error()
			default:
				for _, part := range res.Content {
					if t, ok := part.(*mcp.TextContent); ok {
						content += t.Text
					}
				}
				if content == "" && res.StructuredContent != nil {
					b, _ := json.Marshal(res.StructuredContent)
					content = string(b)
				}
			}
			tr.Write(agent.Line{Kind: agent.KindToolResult, Turn: ans.Turns, Tool: tool, CallID: c.ID, Text: content, IsError: err != nil || (res != nil && res.IsError)})
			msgs = append(msgs, chatMsg{Role: "tool", ToolCallID: c.ID, Content: content})
		}
	}
}

func (a *chatAgent) chat(ctx context.Context, req any) (chatMsg, error) {
	body, _ := json.Marshal(req)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(a.s.BaseURL, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return chatMsg{}, fmt.Errorf("model endpoint: %w", err)
	}
	hreq.Header.Set("Content-Type", "application/json")
	if a.s.APIKey != "" {
		hreq.Header.Set("Authorization", "Bearer "+a.s.APIKey)
	}
	resp, err := a.hc.Do(hreq)
	if err != nil {
		return chatMsg{}, fmt.Errorf("model endpoint unreachable: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return chatMsg{}, fmt.Errorf("model endpoint: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return chatMsg{}, fmt.Errorf("model endpoint answered %s: %.300s", resp.Status, raw)
	}
	var cr struct {
		Choices []struct {
			Message chatMsg `json:"message"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &cr); err != nil || len(cr.Choices) == 0 {
		return chatMsg{}, fmt.Errorf("model endpoint: no choice in the response (%v)", err)
	}
	return cr.Choices[0].Message, nil
}

// headers sends hs with every request.
type headers map[string]string

func (hs headers) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	for k, v := range hs {
		r.Header.Set(k, v)
	}
	return http.DefaultTransport.RoundTrip(r)
}
