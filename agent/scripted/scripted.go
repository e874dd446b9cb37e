// Package scripted is the scripted agent: it replays a fixed list of tool calls through the
// gateway and answers with a fixed response (or the last call's text), for deterministic runs
// and soak tests. It writes the same trajectory shape as every other agent: one model line per
// call (the turn that asks for it), the call, its result.
package scripted

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/mcpclient"
)

// Call is one tool call to replay.
type Call struct {
	Tool      string
	Arguments map[string]any
}

// Agent replays Calls. It is safe for concurrent use.
type Agent struct {
	Calls    []Call
	Response string       // the answer; the last call's text if empty
	HTTP     *http.Client // to the gateway; http.DefaultClient if nil
}

// Prompt implements agent.Agent: it makes each call in turn, at most p.MaxTurns of them if
// set. A call the gateway could not make is an infrastructure error; a tool's error result is
// recorded and the replay goes on, as the script is the agent.
func (a *Agent) Prompt(ctx context.Context, p agent.Prompt, tr *agent.Trajectory) (ans agent.Answer, err error) {
	if p.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.Timeout)
		defer cancel()
	}
	cs, err := mcpclient.Client{Name: "agentenv-scripted-agent", HTTP: a.HTTP, Headers: p.Gateway.Headers, NoStandaloneSSE: true}.Connect(ctx, p.Gateway.URL, "")
	if err != nil {
		return ans, fmt.Errorf("connect to gateway %s: %w", p.Gateway.URL, err)
	}
	defer cs.Close()
	for i, c := range a.Calls {
		if p.MaxTurns > 0 && ans.Turns >= p.MaxTurns {
			ans.Stop = agent.StopMaxTurns
			return ans, fmt.Errorf("turn budget of %d exhausted before the script ended: %w", p.MaxTurns, agent.ErrAgent)
		}
		ans.Turns++
		id := "call-" + strconv.Itoa(i+1)
		args := c.Arguments
		if args == nil {
			args = map[string]any{}
		}
		raw, _ := json.Marshal(args)
		tr.Write(agent.Line{Kind: agent.KindModel, Turn: ans.Turns, Model: "scripted", ToolCalls: 1, Usage: &agent.Usage{}})
		tr.Write(agent.Line{Kind: agent.KindToolCall, Turn: ans.Turns, Tool: c.Tool, CallID: id, Arguments: raw})
		start := time.Now()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: c.Tool, Arguments: args})
		ans.ToolCalls++
		if err != nil {
			ans.Stop = agent.StopError
			return ans, fmt.Errorf("scripted call %d: call %s: %w", i+1, c.Tool, err)
		}
		text, structured := mcpclient.Text(res)
		l := agent.Line{Kind: agent.KindToolResult, Turn: ans.Turns, Tool: c.Tool, CallID: id, Text: text, JSON: structured,
			IsError: res.IsError, DurationMS: time.Since(start).Milliseconds()}
		if l.Images, err = tr.KeepImages(mcpclient.Images(res)); err != nil {
			l.Text += "\n[" + err.Error() + "]"
		}
		tr.Write(l)
		ans.Text = text
	}
	if a.Response != "" {
		ans.Text = a.Response
	}
	ans.Stop = agent.StopAnswer
	return ans, nil
}
