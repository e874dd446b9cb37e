package model

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/agentenv/agentenv/agent"
)

// The Messages API is spoken here on the wire, in the few types this loop needs. Anthropic's Go
// SDK does the same job, but its one generated package costs over two minutes of CPU to compile
// on an empty cache, more than the rest of agentenv together (BENCHMARKS.md, "Build weight"),
// and no lighter maintained client is served here.

// anthropicVersion is the API version every request names.
const anthropicVersion = "2023-06-01"

// anthropicMessage is one message of the history. Content is raw JSON: an assistant message is
// the content the API answered, sent back as it came (thinking blocks and their signatures
// included, as the API asks).
type anthropicMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// anthropicTool is a tool offered to the model.
type anthropicTool struct {
	Name        string         `json:"name"`
	Description string         `json:"description,omitempty"`
	InputSchema map[string]any `json:"input_schema"`
}

// anthropicRequest is the body of POST /v1/messages.
type anthropicRequest struct {
	Model     string             `json:"model"`
	MaxTokens int64              `json:"max_tokens"`
	System    string             `json:"system,omitempty"`
	Messages  []anthropicMessage `json:"messages"`
	Tools     []anthropicTool    `json:"tools,omitempty"`
}

// anthropicBlock is a content block of an answer, or of a request's user message.
type anthropicBlock struct {
	Type      string          `json:"type"`
	Text      string          `json:"text,omitempty"`
	ID        string          `json:"id,omitempty"`          // tool_use
	Name      string          `json:"name,omitempty"`        // tool_use
	Input     json.RawMessage `json:"input,omitempty"`       // tool_use
	ToolUseID string          `json:"tool_use_id,omitempty"` // tool_result
	Content   string          `json:"content,omitempty"`     // tool_result
	IsError   bool            `json:"is_error,omitempty"`    // tool_result
}

// anthropicResponse is the answer of POST /v1/messages.
type anthropicResponse struct {
	Content json.RawMessage `json:"content"`
	Usage   struct {
		InputTokens  int64 `json:"input_tokens"`
		OutputTokens int64 `json:"output_tokens"`
	} `json:"usage"`
}

// anthropicError is the body of a non-2xx answer.
type anthropicError struct {
	Error struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"error"`
}

// anthropicConv is a Messages API conversation.
type anthropicConv struct {
	cfg Config
	req anthropicRequest
}

func newAnthropic(cfg Config, model string, p agent.Prompt, ts tools) *anthropicConv {
	c := &anthropicConv{cfg: cfg, req: anthropicRequest{Model: model, System: p.SystemPrompt}}
	c.add("user", []anthropicBlock{{Type: "text", Text: p.Text}})
	for _, t := range ts.list {
		schema := map[string]any{"type": "object"}
		for k, v := range t.schema {
			if k != "type" {
				schema[k] = v
			}
		}
		c.req.Tools = append(c.req.Tools, anthropicTool{Name: t.fn, Description: t.description, InputSchema: schema})
	}
	return c
}

// add appends a message with blocks as its content.
func (c *anthropicConv) add(role string, blocks []anthropicBlock) {
	content, _ := json.Marshal(blocks) // plain structs always marshal
	c.req.Messages = append(c.req.Messages, anthropicMessage{Role: role, Content: content})
}

func (c *anthropicConv) turn(ctx context.Context, maxTokens int64) (reply, error) {
	req := c.req
	req.MaxTokens = DefaultTurnTokens
	if maxTokens > 0 && maxTokens < DefaultTurnTokens {
		req.MaxTokens = maxTokens
	}
	resp, err := c.post(ctx, req)
	if err != nil {
		return reply{}, err
	}
	var blocks []anthropicBlock
	if err := json.Unmarshal(resp.Content, &blocks); err != nil {
		return reply{}, fmt.Errorf("messages: content: %w", err)
	}
	c.req.Messages = append(c.req.Messages, anthropicMessage{Role: "assistant", Content: resp.Content})
	r := reply{usage: agent.Usage{InputTokens: resp.Usage.InputTokens, OutputTokens: resp.Usage.OutputTokens}}
	var text []string
	for _, b := range blocks {
		switch b.Type {
		case "text":
			text = append(text, b.Text)
		case "tool_use":
			r.calls = append(r.calls, call{id: b.ID, name: b.Name, args: string(b.Input)})
		}
	}
	r.text = strings.Join(text, "\n")
	return r, nil
}

// post sends one request and reads its answer. A non-2xx status is an error with the API's
// own message.
func (c *anthropicConv) post(ctx context.Context, body anthropicRequest) (anthropicResponse, error) {
	var out anthropicResponse
	data, err := json.Marshal(body)
	if err != nil {
		return out, fmt.Errorf("messages: %w", err)
	}
	url := strings.TrimRight(c.cfg.BaseURL, "/") + "/v1/messages"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(data))
	if err != nil {
		return out, fmt.Errorf("messages: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Anthropic-Version", anthropicVersion)
	if c.cfg.APIKey != "" {
		req.Header.Set("X-Api-Key", c.cfg.APIKey)
	}
	res, err := c.cfg.HTTP.Do(req)
	if err != nil {
		return out, fmt.Errorf("POST %s: %w", url, err)
	}
	defer res.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(res.Body, maxAnswer))
	if err != nil {
		return out, fmt.Errorf("POST %s: read answer: %w", url, err)
	}
	if res.StatusCode/100 != 2 {
		var e anthropicError
		if json.Unmarshal(raw, &e) == nil && e.Error.Message != "" {
			return out, fmt.Errorf("POST %s: %s: %s: %s", url, res.Status, e.Error.Type, e.Error.Message)
		}
		return out, fmt.Errorf("POST %s: %s: %s", url, res.Status, bytes.TrimSpace(raw[:min(len(raw), 512)]))
	}
	if err := json.Unmarshal(raw, &out); err != nil {
		return out, fmt.Errorf("POST %s: answer: %w", url, err)
	}
	return out, nil
}

// maxAnswer bounds the bytes read of one model answer.
const maxAnswer = 64 << 20

func (c *anthropicConv) results(rs []result) {
	blocks := make([]anthropicBlock, 0, len(rs))
	for _, r := range rs {
		blocks = append(blocks, anthropicBlock{Type: "tool_result", ToolUseID: r.id, Content: r.text, IsError: r.isError})
	}
	c.add("user", blocks)
}
