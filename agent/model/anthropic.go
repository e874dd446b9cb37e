package model

import (
	"context"
	"strings"

	"github.com/anthropics/anthropic-sdk-go/v2"
	"github.com/anthropics/anthropic-sdk-go/v2/option"

	"github.com/agentenv/agentenv/agent"
)

// anthropicConv is a Messages API conversation.
type anthropicConv struct {
	client anthropic.Client
	params anthropic.MessageNewParams
}

func newAnthropic(cfg Config, model string, p agent.Prompt, ts tools) *anthropicConv {
	c := &anthropicConv{client: anthropic.NewClient(
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(cfg.HTTP),
		option.WithMaxRetries(0), // the step fails plainly; its caps bound it
	)}
	c.params.Model = anthropic.Model(model)
	if p.SystemPrompt != "" {
		c.params.System = []anthropic.TextBlockParam{{Text: p.SystemPrompt}}
	}
	c.params.Messages = []anthropic.MessageParam{anthropic.NewUserMessage(anthropic.NewTextBlock(p.Text))}
	for _, t := range ts.list {
		schema := anthropic.ToolInputSchemaParam{Properties: t.schema["properties"], ExtraFields: map[string]any{}}
		for k, v := range t.schema {
			switch k {
			case "type", "properties":
			case "required":
				schema.Required = asList(v)
			default:
				schema.ExtraFields[k] = v
			}
		}
		tp := anthropic.ToolParam{Name: t.fn, InputSchema: schema}
		if t.description != "" {
			tp.Description = anthropic.String(t.description)
		}
		c.params.Tools = append(c.params.Tools, anthropic.ToolUnionParam{OfTool: &tp})
	}
	return c
}

// asList is a JSON array of strings.
func asList(v any) []string {
	var out []string
	l, _ := v.([]any)
	for _, s := range l {
		if s, ok := s.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

func (c *anthropicConv) turn(ctx context.Context, maxTokens int64) (reply, error) {
	params := c.params
	params.MaxTokens = DefaultTurnTokens
	if maxTokens > 0 && maxTokens < DefaultTurnTokens {
		params.MaxTokens = maxTokens
	}
	msg, err := c.client.Messages.New(ctx, params)
	if err != nil {
		return reply{}, err
	}
	c.params.Messages = append(c.params.Messages, msg.ToParam())
	r := reply{usage: agent.Usage{InputTokens: msg.Usage.InputTokens, OutputTokens: msg.Usage.OutputTokens}}
	var text []string
	for _, b := range msg.Content {
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

func (c *anthropicConv) results(rs []result) {
	blocks := make([]anthropic.ContentBlockParamUnion, 0, len(rs))
	for _, r := range rs {
		blocks = append(blocks, anthropic.NewToolResultBlock(r.id, r.text, r.isError))
	}
	c.params.Messages = append(c.params.Messages, anthropic.NewUserMessage(blocks...))
}
