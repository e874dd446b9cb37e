package model

import (
	"context"
	"errors"
	"fmt"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/shared"

	"github.com/agentenv/agentenv/agent"
)

// openaiConv is a chat completions conversation.
type openaiConv struct {
	client openai.Client
	params openai.ChatCompletionNewParams
}

func newOpenAI(cfg Config, model string, p agent.Prompt, ts tools) *openaiConv {
	c := &openaiConv{client: openai.NewClient(
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(cfg.HTTP),
		option.WithMaxRetries(0), // the step fails plainly; its caps bound it
	)}
	c.params.Model = shared.ChatModel(model)
	if p.SystemPrompt != "" {
		c.params.Messages = append(c.params.Messages, openai.SystemMessage(p.SystemPrompt))
	}
	c.params.Messages = append(c.params.Messages, openai.UserMessage(p.Text))
	for _, t := range ts.list {
		fd := shared.FunctionDefinitionParam{Name: t.fn, Parameters: shared.FunctionParameters(t.schema)}
		if t.description != "" {
			fd.Description = openai.String(t.description)
		}
		c.params.Tools = append(c.params.Tools, openai.ChatCompletionFunctionTool(fd))
	}
	return c
}

func (c *openaiConv) turn(ctx context.Context, maxTokens int64) (reply, error) {
	params := c.params
	if maxTokens > 0 {
		params.MaxCompletionTokens = openai.Int(maxTokens)
	}
	resp, err := c.client.Chat.Completions.New(ctx, params)
	if err != nil {
		// The SDK's message names only the status; the endpoint's own words say why.
		var apiErr *openai.Error
		if errors.As(err, &apiErr) && apiErr.Message != "" {
			return reply{}, fmt.Errorf("%w: %s", err, apiErr.Message)
		}
		return reply{}, err
	}
	if len(resp.Choices) == 0 {
		return reply{}, errors.New("no choices in the response")
	}
	msg := resp.Choices[0].Message
	c.params.Messages = append(c.params.Messages, msg.ToParam())
	r := reply{text: msg.Content, usage: agent.Usage{InputTokens: resp.Usage.PromptTokens, OutputTokens: resp.Usage.CompletionTokens}}
	for _, tc := range msg.ToolCalls {
		r.calls = append(r.calls, call{id: tc.ID, name: tc.Function.Name, args: tc.Function.Arguments})
	}
	return r, nil
}

func (c *openaiConv) results(rs []result) {
	for _, r := range rs {
		c.params.Messages = append(c.params.Messages, openai.ToolMessage(r.text, r.id))
	}
}
