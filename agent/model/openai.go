package model

import (
	"context"
	"errors"
	"fmt"
	"net/http"

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

// openaiClient is the client of cfg's OpenAI-compatible endpoint.
func openaiClient(cfg Config) openai.Client {
	return openai.NewClient(
		option.WithBaseURL(cfg.BaseURL),
		option.WithAPIKey(cfg.APIKey),
		option.WithHTTPClient(cfg.HTTP),
		option.WithMaxRetries(0), // the step fails plainly; its caps bound it
	)
}

// Completion is the answer of one chat completion without tools.
type Completion struct {
	Text         string
	Refusal      string // the model's refusal, if it refused
	FinishReason string
	Model        string // as the endpoint names it
	InputTokens  int64
	OutputTokens int64
}

// Complete asks cfg's OpenAI-compatible endpoint (cfg.Provider is not consulted) for one chat
// completion of system and user, with cfg.Model, within ctx. An error is the endpoint's (a
// transport error, a non-2xx status, an answer without a choice); what the model said,
// refusals included, is in the Completion.
func Complete(ctx context.Context, cfg Config, system, user string) (Completion, error) {
	if cfg.HTTP == nil {
		cfg.HTTP = http.DefaultClient
	}
	params := openai.ChatCompletionNewParams{Model: shared.ChatModel(cfg.Model)}
	if system != "" {
		params.Messages = append(params.Messages, openai.SystemMessage(system))
	}
	params.Messages = append(params.Messages, openai.UserMessage(user))
	client := openaiClient(cfg)
	resp, err := client.Chat.Completions.New(ctx, params)
	if err != nil {
		return Completion{}, err
	}
	if len(resp.Choices) == 0 {
		return Completion{}, errors.New("chat completion without a choice")
	}
	ch := resp.Choices[0]
	return Completion{Text: ch.Message.Content, Refusal: ch.Message.Refusal, FinishReason: ch.FinishReason,
		Model: resp.Model, InputTokens: resp.Usage.PromptTokens, OutputTokens: resp.Usage.CompletionTokens}, nil
}

func newOpenAI(cfg Config, model string, p agent.Prompt, ts tools) *openaiConv {
	c := &openaiConv{client: openaiClient(cfg)}
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
