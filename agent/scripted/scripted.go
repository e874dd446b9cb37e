// Package scripted is the scripted agent: it replays a fixed list of tool calls through the
// gateway and answers with a fixed response (or the last call's text), for deterministic runs
// and soak tests. It writes the same trajectory shape as every other agent: one model line per
// call (the turn that asks for it), the call, its result.
//
// A call may take arguments from the previous call's result ([Call.Capture]): a regular
// expression over its text, whose first group becomes the argument. So a script drives a page
// whose element references are the browser's to choose (Playwright MCP's aria refs, "e12") by
// naming the element instead: browser_snapshot, then browser_click with
// target (Playwright MCP 0.0.86's name for the ref) captured by
// `button "Order Blue mug" \[ref=(\w+)\]`.
package scripted

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"regexp"
	"slices"
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
	// Capture sets arguments from the text of the previous call's result: each key is an
	// argument's name, each value a regular expression whose first submatch (the whole match
	// if it has no group) of its first match becomes that argument, a string, over Arguments.
	// An expression that matches nothing ends the replay with an agent error (agent.ErrAgent)
	// naming the call, the argument and the expression; so does a capture on the first call.
	Capture map[string]*regexp.Regexp
}

// captured returns c's arguments with c.Capture's filled in from prev, the text of the
// previous call's result (first says there was none).
func (c Call) captured(prev string, first bool) (map[string]any, error) {
	args := make(map[string]any, len(c.Arguments)+len(c.Capture))
	maps.Copy(args, c.Arguments)
	for _, name := range slices.Sorted(maps.Keys(c.Capture)) {
		re := c.Capture[name]
		if first {
			return nil, fmt.Errorf("capture %s: the first call has no previous result: %w", name, agent.ErrAgent)
		}
		m := re.FindStringSubmatch(prev)
		switch {
		case m == nil:
			return nil, fmt.Errorf("capture %s: %q matches nothing in the previous result: %w", name, re.String(), agent.ErrAgent)
		case len(m) > 1:
			args[name] = m[1]
		default:
			args[name] = m[0]
		}
	}
	return args, nil
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
		args, err := c.captured(ans.Text, i == 0)
		if err != nil {
			ans.Stop = agent.StopError
			return ans, fmt.Errorf("scripted call %d (%s): %w", i+1, c.Tool, err)
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
