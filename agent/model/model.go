// Package model is the built-in model agent: a tool-calling loop on OpenAI's chat completions
// (any OpenAI-compatible endpoint, through go-openai) and Anthropic's Messages API. It
// offers the gateway's tools to the model as functions, makes the calls the model asks for
// through the gateway with the step's headers (and, with a Terminal, offers run_command,
// read_file and write_file of its own in the container the agent works in), and loops until the model answers or a cap of
// the Prompt (turns, summed output tokens, cost, wall time) ends the loop.
package model

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/mcpclient"
)

// Providers: which API the model endpoint speaks.
const (
	OpenAI    = "openai"    // chat completions; BaseURL ends in /v1
	Anthropic = "anthropic" // messages; BaseURL is the root v1/messages is appended to
)

// DefaultMaxTurns is the turn budget when the Prompt sets none.
const DefaultMaxTurns = 20

// DefaultTurnTokens is the max_tokens of one Anthropic turn (the API requires one) when the
// Prompt's output token budget does not lower it.
const DefaultTurnTokens = 4096

// Prices are the model's prices in USD per million tokens.
type Prices struct {
	Input, Output float64
}

// Cost is what u's tokens cost at p.
func (p Prices) Cost(u agent.Usage) float64 {
	return (float64(u.InputTokens)*p.Input + float64(u.OutputTokens)*p.Output) / 1e6
}

// Config is the model endpoint the agent talks to.
type Config struct {
	Provider string // OpenAI or Anthropic
	BaseURL  string
	APIKey   string
	Model    string       // the default model; a Prompt's Model overrides it
	Prices   Prices       // zero: unknown, and a Prompt with MaxCostUSD fails
	HTTP     *http.Client // model endpoint and gateway; http.DefaultClient if nil
}

// Agent is the built-in model agent. It is safe for concurrent use.
type Agent struct {
	cfg Config
}

// New checks cfg and returns its agent.
func New(cfg Config) (*Agent, error) {
	switch cfg.Provider {
	case OpenAI, Anthropic:
	default:
		return nil, fmt.Errorf("model.provider: want %s or %s, got %q", OpenAI, Anthropic, cfg.Provider)
	}
	if cfg.BaseURL == "" {
		return nil, errors.New("model.base_url is not set")
	}
	if cfg.HTTP == nil {
		cfg.HTTP = http.DefaultClient
	}
	return &Agent{cfg: cfg}, nil
}

// errTimeout is the cause of a context that ran out of the Prompt's wall time.
var errTimeout = errors.New("wall time exhausted")

// call is one tool call the model asked for.
type call struct {
	id, name, args string // name as the model knows it; args as JSON text
}

// reply is one model turn.
type reply struct {
	text  string
	calls []call
	usage agent.Usage // tokens only
}

// result is what the model is told of one call.
type result struct {
	id, text string
	isError  bool
}

// conversation is one provider's message history.
type conversation interface {
	// turn sends the history with at most maxTokens output tokens (0: no limit of ours) and
	// appends the model's reply to it.
	turn(ctx context.Context, maxTokens int64) (reply, error)
	// results appends the results of the last reply's calls, in order.
	results(rs []result)
}

// Prompt implements agent.Agent. It writes the model, tool_call and tool_result lines; the
// caller ends the trajectory with agent.Finish.
func (a *Agent) Prompt(ctx context.Context, p agent.Prompt, tr *agent.Trajectory) (ans agent.Answer, err error) {
	model := p.Model
	if model == "" {
		model = a.cfg.Model
	}
	if model == "" {
		return ans, errors.New("model agent: no model named (model.name or the step's model)")
	}
	if p.MaxCostUSD > 0 && a.cfg.Prices == (Prices{}) {
		return ans, errors.New("model agent: max_cost_usd needs the model's prices (model.input_price, model.output_price)")
	}
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeoutCause(ctx, p.Timeout, errTimeout)
		defer cancel()
	}
	defer func() {
		if ans.Stop == "" {
			ans.Stop = agent.StopError
		}
		if err != nil && errors.Is(context.Cause(ctx), errTimeout) {
			ans.Stop = agent.StopTimeout
			err = fmt.Errorf("wall time of %s exhausted before the model answered: %w", p.Timeout, agent.ErrAgent)
		}
	}()

	if p.Gateway.URL == "" && p.Terminal == nil {
		return ans, errors.New("model agent: neither a gateway nor a terminal to work with")
	}
	ts := newTools()
	if p.Gateway.URL != "" {
		cs, err := mcpclient.Client{Name: "agentenv-model-agent", HTTP: a.cfg.HTTP, Headers: p.Gateway.Headers, NoStandaloneSSE: true}.Connect(ctx, p.Gateway.URL, "")
		if err != nil {
			return ans, fmt.Errorf("connect to gateway %s: %w", p.Gateway.URL, err)
		}
		defer cs.Close()
		if err := ts.listGateway(ctx, cs); err != nil {
			return ans, err
		}
	}
	if p.Terminal != nil {
		ts.addTerminal(p.Terminal)
	}

	var conv conversation
	switch a.cfg.Provider {
	case OpenAI:
		conv = newOpenAI(a.cfg, model, p, ts)
	default:
		conv = newAnthropic(a.cfg, model, p, ts)
	}
	maxTurns := p.MaxTurns
	if maxTurns <= 0 {
		maxTurns = DefaultMaxTurns
	}
	for {
		if ans.Turns >= maxTurns {
			ans.Stop = agent.StopMaxTurns
			return ans, fmt.Errorf("turn budget of %d exhausted before the model answered: %w", maxTurns, agent.ErrAgent)
		}
		var limit int64
		if p.MaxOutputTokens > 0 {
			limit = p.MaxOutputTokens - ans.Usage.OutputTokens
		}
		ans.Turns++
		start := time.Now()
		rep, err := conv.turn(ctx, limit)
		if err != nil {
			return ans, fmt.Errorf("model endpoint: %w", err)
		}
		rep.usage.CostUSD = a.cfg.Prices.Cost(rep.usage)
		ans.Usage = ans.Usage.Add(rep.usage)
		u := rep.usage
		tr.Write(agent.Line{Kind: agent.KindModel, Turn: ans.Turns, Model: model, Text: rep.text, ToolCalls: len(rep.calls),
			DurationMS: time.Since(start).Milliseconds(), Usage: &u})
		if len(rep.calls) == 0 {
			ans.Text, ans.Stop = rep.text, agent.StopAnswer
			return ans, nil
		}
		switch {
		case p.MaxOutputTokens > 0 && ans.Usage.OutputTokens >= p.MaxOutputTokens:
			ans.Stop = agent.StopMaxOutputTokens
			return ans, fmt.Errorf("output token budget of %d exhausted before the model answered: %w", p.MaxOutputTokens, agent.ErrAgent)
		case p.MaxCostUSD > 0 && ans.Usage.CostUSD >= p.MaxCostUSD:
			ans.Stop = agent.StopMaxCost
			return ans, fmt.Errorf("cost budget of $%g exhausted before the model answered ($%.6f spent): %w", p.MaxCostUSD, ans.Usage.CostUSD, agent.ErrAgent)
		}
		rs := make([]result, 0, len(rep.calls))
		for _, c := range rep.calls {
			ans.ToolCalls++
			rs = append(rs, ts.call(ctx, tr, ans.Turns, c))
		}
		conv.results(rs)
	}
}
