package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2aclient"

	"github.com/agentenv/agentenv/agent"
)

// Client drives one A2A agent. It implements agent.Agent.
type Client struct {
	base     string
	hc       *http.Client
	cardWait time.Duration
	log      *slog.Logger
}

// Options tune a Client. Zero values take the defaults.
type Options struct {
	HTTP     *http.Client  // default: a client without a global timeout (each call has its own)
	CardWait time.Duration // how long to wait for the card; default 30s
	Log      *slog.Logger  // default: discard
}

// DefaultCardWait is how long a Client waits for an agent's card by default.
const DefaultCardWait = 30 * time.Second

// DefaultTimeout bounds a prompt whose agent.Prompt names no Timeout.
const DefaultTimeout = 10 * time.Minute

// New returns a client of the agent whose card is served under base (http://host:port).
func New(base string, o Options) *Client {
	c := &Client{base: strings.TrimRight(base, "/"), hc: o.HTTP, cardWait: o.CardWait, log: o.Log}
	if c.hc == nil {
		c.hc = &http.Client{}
	}
	if c.cardWait <= 0 {
		c.cardWait = DefaultCardWait
	}
	if c.log == nil {
		c.log = slog.New(slog.DiscardHandler)
	}
	return c
}

// MCPServer is one entry of mcp-config and of the agentenv.mcp_servers metadata.
type MCPServer struct {
	Name    string            `json:"name,omitempty"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
}

// Prompt hands the agent the gateway (mcp-config when advertised, and always the message's
// metadata), configures it (agent-config, the fields its card lists), sends p.Text and waits
// for a terminal task within p.Timeout, then reads its trajectory (trajectory/v1, when
// advertised) into tr. The caller writes the prompt and response lines.
func (c *Client) Prompt(ctx context.Context, p agent.Prompt, tr *agent.Trajectory) (agent.Answer, error) {
	timeout := p.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	ans := agent.Answer{Stop: agent.StopError}

	card, err := FetchCard(ctx, c.hc, c.base, c.cardWait)
	if err != nil {
		return ans, err
	}
	gw := MCPServer{Name: p.Gateway.Name, URL: p.Gateway.URL, Headers: p.Gateway.Headers}
	if ext, ok := card.Extensions[ExtMCPConfig]; ok && gw.URL != "" {
		if err := c.post(ctx, ext.Endpoint, gw, nil); err != nil {
			return ans, fmt.Errorf("mcp-config: %w", err)
		}
	}
	if ext, ok := card.Extensions[ExtAgentConfig]; ok {
		if cfg := agentConfig(p, ext.Fields); len(cfg) > 0 {
			if err := c.post(ctx, ext.Endpoint, cfg, nil); err != nil {
				return ans, fmt.Errorf("agent-config: %w", err)
			}
		}
	}

	cl, err := a2aclient.NewFromEndpoints(ctx,
		[]sdk.AgentInterface{{URL: card.Endpoint, Transport: sdk.TransportProtocolJSONRPC}},
		a2aclient.WithJSONRPCTransport(c.hc))
	if err != nil {
		return ans, fmt.Errorf("a2a agent at %s: %w", c.base, err)
	}
	defer cl.Destroy()

	msg := sdk.NewMessage(sdk.MessageRoleUser, sdk.TextPart{Text: p.Text})
	msg.Metadata = map[string]any{}
	if gw.URL != "" {
		msg.Metadata[MetadataMCPServers] = []MCPServer{gw}
	}
	blocking := true
	res, err := cl.SendMessage(ctx, &sdk.MessageSendParams{Message: msg, Config: &sdk.MessageSendConfig{Blocking: &blocking}})
	if err != nil {
		return c.ended(ctx, ans, fmt.Errorf("a2a agent at %s: message/send: %w", c.base, err))
	}
	var task *sdk.Task
	switch r := res.(type) {
	case *sdk.Message:
		fillAnswer(&ans, r.Parts)
		ans.Turns, ans.Stop = 1, agent.StopAnswer
		return ans, nil
	case *sdk.Task:
		task = r
	default:
		return ans, fmt.Errorf("a2a agent at %s: message/send answered %T: %w", c.base, res, agent.ErrAgent)
	}
	for !terminal(task.Status.State) {
		select {
		case <-ctx.Done():
			return c.ended(ctx, ans, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
		if task, err = cl.GetTask(ctx, &sdk.TaskQueryParams{ID: task.ID}); err != nil {
			return c.ended(ctx, ans, fmt.Errorf("a2a agent at %s: tasks/get: %w", c.base, err))
		}
	}
	for _, a := range task.Artifacts {
		fillAnswer(&ans, a.Parts)
	}
	if ans.Text == "" && ans.Structured == nil && task.Status.Message != nil && task.Status.State == sdk.TaskStateCompleted {
		fillAnswer(&ans, task.Status.Message.Parts)
	}
	ans.Turns = max(1, agentMessages(task))
	if ext, ok := card.Extensions[ExtTrajectory]; ok {
		n, err := c.trajectory(ctx, ext.Endpoint, task.ID, tr)
		if err != nil {
			c.log.Warn("a2a trajectory", "agent", c.base, "err", err)
		}
		ans.ToolCalls = n
	}
	if task.Status.State != sdk.TaskStateCompleted {
		reason := string(task.Status.State)
		if m := task.Status.Message; m != nil {
			var why agent.Answer
			fillAnswer(&why, m.Parts)
			if why.Text != "" {
				reason += ": " + why.Text
			}
		}
		if m := task.Status.Message; m != nil && m.Metadata[MetadataErrorKind] == ErrorKindInfra {
			return ans, fmt.Errorf("a2a agent at %s: task %s (%s)", c.base, reason, ErrorKindInfra)
		}
		return ans, fmt.Errorf("a2a agent at %s: task %s: %w", c.base, reason, agent.ErrAgent)
	}
	ans.Stop = agent.StopAnswer
	return ans, nil
}

// ended says why a prompt ended early: the prompt's own timeout is the agent's (a cap it hit),
// anything else the infrastructure's.
func (c *Client) ended(ctx context.Context, ans agent.Answer, err error) (agent.Answer, error) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		ans.Stop = agent.StopTimeout
		return ans, fmt.Errorf("a2a agent at %s: prompt timed out: %w", c.base, agent.ErrAgent)
	}
	return ans, err
}

func terminal(s sdk.TaskState) bool {
	switch s {
	case sdk.TaskStateCompleted, sdk.TaskStateFailed, sdk.TaskStateCanceled, sdk.TaskStateRejected:
		return true
	}
	return false
}

func agentMessages(t *sdk.Task) int {
	n := 0
	for _, m := range t.History {
		if m != nil && m.Role == sdk.MessageRoleAgent {
			n++
		}
	}
	return n
}

// fillAnswer adds parts to a: text parts to Text (one per line), data parts to Structured (the
// last one wins).
func fillAnswer(a *agent.Answer, parts sdk.ContentParts) {
	for _, part := range parts {
		switch p := part.(type) {
		case sdk.TextPart:
			if a.Text != "" {
				a.Text += "\n"
			}
			a.Text += p.Text
		case *sdk.TextPart:
			if a.Text != "" {
				a.Text += "\n"
			}
			a.Text += p.Text
		case sdk.DataPart:
			a.Structured, _ = json.Marshal(p.Data)
		case *sdk.DataPart:
			a.Structured, _ = json.Marshal(p.Data)
		}
	}
}

// agentConfig is the agent-config body: the prompt's non-zero settings the card lists.
func agentConfig(p agent.Prompt, fields []string) map[string]any {
	all := map[string]any{}
	if p.Model != "" {
		all["model"] = p.Model
	}
	if p.SystemPrompt != "" {
		all["system_prompt"] = p.SystemPrompt
	}
	if p.MaxTurns > 0 {
		all["max_turns"] = p.MaxTurns
	}
	if p.Timeout > 0 {
		all["timeout_seconds"] = int(p.Timeout.Seconds())
	}
	out := map[string]any{}
	for _, f := range fields {
		if v, ok := all[f]; ok {
			out[f] = v
		}
	}
	return out
}

// trajectory reads the task's trajectory and writes it to tr, returning the tool calls in it.
// An agent answers {"trajectory": [Line...]} (agent.Line's JSON shape) or a bare array.
func (c *Client) trajectory(ctx context.Context, endpoint string, task sdk.TaskID, tr *agent.Trajectory) (int, error) {
	var raw json.RawMessage
	if err := c.post(ctx, endpoint, map[string]string{"task_id": string(task)}, &raw); err != nil {
		return 0, err
	}
	var lines []agent.Line
	if err := json.Unmarshal(raw, &lines); err != nil {
		var wrapped struct {
			Trajectory []agent.Line `json:"trajectory"`
		}
		if err := json.Unmarshal(raw, &wrapped); err != nil {
			return 0, fmt.Errorf("trajectory: %w", err)
		}
		lines = wrapped.Trajectory
	}
	calls := 0
	for _, l := range lines {
		if l.Kind == agent.KindToolCall {
			calls++
		}
		if l.Agent == "" {
			l.Agent = "a2a"
		}
		if tr != nil {
			tr.Write(l)
		}
	}
	return calls, nil
}

// post sends body as JSON and decodes a 2xx answer into out (if not nil). A non-2xx answer is
// the agent refusing: ErrAgent.
func (c *Client) post(ctx context.Context, u string, body, out any) error {
	b, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", u, err)
	}
	defer resp.Body.Close()
	rb, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return fmt.Errorf("POST %s: %w", u, err)
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("POST %s: %s: %s: %w", u, resp.Status, bytes.TrimSpace(rb[:min(len(rb), 300)]), agent.ErrAgent)
	}
	if out != nil {
		if err := json.Unmarshal(rb, out); err != nil {
			return fmt.Errorf("POST %s: %w", u, err)
		}
	}
	return nil
}
