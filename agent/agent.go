// Package agent drives an agent against a deployed env: every kind of agent (the scripted
// replay, the built-in model agent, A2A agents, command-line harnesses in a sandbox) answers
// one Prompt through one interface, and writes what it did as one trajectory shape (Line).
//
// An agent reaches the env only through its Gateway: the gateway's MCP URL and the headers
// (the bearer token of the step's role) it must send. It never holds the admin token. An agent
// that works inside a task's own container gets a Terminal, beside a Gateway or instead of one.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"time"
)

// Agent answers prompts.
type Agent interface {
	// Prompt runs p until the agent answers, a cap in p ends the loop, or ctx ends, and writes
	// each message, tool call and result to tr as it happens. An error the agent itself is to
	// blame for (it answered with an error, broke the protocol, hit a cap that fails the step)
	// wraps ErrAgent; any other error (unreachable agent, a card that never appears, a model
	// endpoint's 5xx) is the infrastructure's. The Answer is valid as far as it got, even with
	// an error.
	Prompt(ctx context.Context, p Prompt, tr *Trajectory) (Answer, error)
}

// ErrAgent marks an error that is the agent's own, part of its score, as opposed to a
// failure of the infrastructure around it.
var ErrAgent = errors.New("agent error")

// Gateway is how an agent reaches its env.
type Gateway struct {
	Name    string            // the env's name, as an MCP config names the server
	URL     string            // the gateway's streamable HTTP MCP endpoint (…/mcp)
	Headers map[string]string // sent with every request: Authorization with the role's token
}

// Prompt is what one prompt_agent step asks. Zero caps mean the agent's defaults.
type Prompt struct {
	Text            string
	SystemPrompt    string
	Model           string
	MaxTurns        int
	MaxOutputTokens int64
	MaxCostUSD      float64
	Timeout         time.Duration // wall time of the whole prompt
	Gateway         Gateway       // zero URL: no env
	Terminal        Terminal      // nil: none
}

// MaxOutput bounds the bytes a Terminal returns of each stream of one command.
const MaxOutput = 1 << 20

// Terminal is a shell in the container an agent works in.
type Terminal interface {
	// Run runs command with `sh -c` (bash if the container has it) in the container and waits at most timeout; output is returned as far as it got, each stream cut to its last MaxOutput bytes, and TimedOut says the command was stopped.
	Run(ctx context.Context, command string, timeout time.Duration) (TerminalResult, error)
	// ReadFile returns the file at path in the container.
	ReadFile(ctx context.Context, path string) ([]byte, error)
	// WriteFile writes data to path in the container, creating parent folders.
	WriteFile(ctx context.Context, path string, data []byte) error
}

// TerminalResult is how a command run by a Terminal ended.
type TerminalResult struct {
	ExitCode       int
	Stdout, Stderr string
	TimedOut       bool
}

// Answer is what an agent gave back.
type Answer struct {
	Text       string          // the final answer's text
	Structured json.RawMessage // structured output, if the agent gave one
	Turns      int             // model turns (or agent messages) it took
	ToolCalls  int             // tool calls it made, as far as agentenv saw them
	Usage      Usage
	Stop       string // why the loop ended: one of the Stop* values
}

// Why an agent's loop ended.
const (
	StopAnswer          = "answer"
	StopMaxTurns        = "max_turns"
	StopMaxOutputTokens = "max_output_tokens"
	StopMaxCost         = "max_cost_usd"
	StopTimeout         = "timeout"
	StopError           = "error"
)

// Usage is what a prompt cost.
type Usage struct {
	InputTokens  int64   `json:"input_tokens,omitempty"`
	OutputTokens int64   `json:"output_tokens,omitempty"`
	CostUSD      float64 `json:"cost_usd,omitempty"`
}

// Add returns u plus v.
func (u Usage) Add(v Usage) Usage {
	return Usage{u.InputTokens + v.InputTokens, u.OutputTokens + v.OutputTokens, u.CostUSD + v.CostUSD}
}
