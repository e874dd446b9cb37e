package model

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"

	openai "github.com/sashabaranov/go-openai"

	"github.com/agentenv/agentenv/agent"
)

// Chat completions are spoken through sashabaranov/go-openai: it does the same job as OpenAI's
// own Go SDK, whose generated packages cost about 1,000 times its compile CPU on an empty
// cache (BENCHMARKS.md, "Build weight"). It makes no retries: the step fails plainly, and its
// caps bound it.

// openaiConv is a chat completions conversation.
type openaiConv struct {
	client *openai.Client
	req    openai.ChatCompletionRequest
}

// openaiClient is the client of cfg's OpenAI-compatible endpoint.
func openaiClient(cfg Config) *openai.Client {
	c := openai.DefaultConfig(cfg.APIKey)
	c.BaseURL = cfg.BaseURL
	c.HTTPClient = cfg.HTTP
	return openai.NewClientWithConfig(c)
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

// Image is an image given to a model with a message: its media type and bytes.
type Image struct {
	MediaType string
	Data      []byte
}

// Complete asks cfg's OpenAI-compatible endpoint (cfg.Provider is not consulted) for one chat
// completion of system and user, with cfg.Model, within ctx; images, if any, follow the user's
// text as image parts (data: URLs) of the same message. An error is the endpoint's (a transport
// error, a non-2xx status, an answer without a choice); what the model said, refusals
// included, is in the Completion.
func Complete(ctx context.Context, cfg Config, system, user string, images ...Image) (Completion, error) {
	if cfg.HTTP == nil {
		cfg.HTTP = http.DefaultClient
	}
	req := openai.ChatCompletionRequest{Model: cfg.Model}
	if system != "" {
		req.Messages = append(req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: system})
	}
	msg := openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: user}
	if len(images) > 0 {
		msg.Content = ""
		msg.MultiContent = []openai.ChatMessagePart{{Type: openai.ChatMessagePartTypeText, Text: user}}
		for _, im := range images {
			msg.MultiContent = append(msg.MultiContent, openai.ChatMessagePart{Type: openai.ChatMessagePartTypeImageURL,
				ImageURL: &openai.ChatMessageImageURL{URL: "data:" + im.MediaType + ";base64," + base64.StdEncoding.EncodeToString(im.Data)}})
		}
	}
	req.Messages = append(req.Messages, msg)
	resp, err := openaiClient(cfg).CreateChatCompletion(ctx, req)
	if err != nil {
		return Completion{}, err
	}
	if len(resp.Choices) == 0 {
		return Completion{}, errors.New("chat completion without a choice")
	}
	ch := resp.Choices[0]
	return Completion{Text: ch.Message.Content, Refusal: ch.Message.Refusal, FinishReason: string(ch.FinishReason),
		Model: resp.Model, InputTokens: int64(resp.Usage.PromptTokens), OutputTokens: int64(resp.Usage.CompletionTokens)}, nil
}

func newOpenAI(cfg Config, model string, p agent.Prompt, ts tools) *openaiConv {
	c := &openaiConv{client: openaiClient(cfg), req: openai.ChatCompletionRequest{Model: model}}
	if p.SystemPrompt != "" {
		c.req.Messages = append(c.req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleSystem, Content: p.SystemPrompt})
	}
	c.req.Messages = append(c.req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleUser, Content: p.Text})
	for _, t := range ts.list {
		c.req.Tools = append(c.req.Tools, openai.Tool{Type: openai.ToolTypeFunction, Function: &openai.FunctionDefinition{
			Name: t.fn, Description: t.description, Parameters: t.schema}})
	}
	return c
}

func (c *openaiConv) turn(ctx context.Context, maxTokens int64) (reply, error) {
	req := c.req
	if maxTokens > 0 {
		req.MaxCompletionTokens = int(maxTokens)
	}
	resp, err := c.client.CreateChatCompletion(ctx, req)
	if err != nil {
		var apiErr *openai.APIError
		if errors.As(err, &apiErr) {
			return reply{}, fmt.Errorf("status %d: %w", apiErr.HTTPStatusCode, err)
		}
		return reply{}, err
	}
	if len(resp.Choices) == 0 {
		return reply{}, errors.New("no choices in the response")
	}
	msg := resp.Choices[0].Message
	c.req.Messages = append(c.req.Messages, msg)
	r := reply{text: msg.Content, usage: agent.Usage{InputTokens: int64(resp.Usage.PromptTokens), OutputTokens: int64(resp.Usage.CompletionTokens)}}
	for _, tc := range msg.ToolCalls {
		r.calls = append(r.calls, call{id: tc.ID, name: tc.Function.Name, args: tc.Function.Arguments})
	}
	return r, nil
}

func (c *openaiConv) results(rs []result) {
	for _, r := range rs {
		c.req.Messages = append(c.req.Messages, openai.ChatCompletionMessage{Role: openai.ChatMessageRoleTool, Content: r.text, ToolCallID: r.id})
	}
}
