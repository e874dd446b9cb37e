package model

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/mcpclient"
)

// tool is one gateway tool as offered to the model.
type tool struct {
	fn          string // the function name the model sees
	name        string // the gateway's name
	description string
	schema      map[string]any // the input JSON Schema; {"type":"object"} if the tool has none
}

// tools are the gateway's tools, by function name.
type tools struct {
	list   []tool
	byFunc map[string]string
}

// badFuncChar is what function names may not contain (OpenAI's and Anthropic's rule).
var badFuncChar = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// listTools lists the gateway's tools, following pagination, and names each as a function.
func listTools(ctx context.Context, cs *mcp.ClientSession) (tools, error) {
	ts := tools{byFunc: map[string]string{}}
	params := &mcp.ListToolsParams{}
	for range 100 {
		res, err := cs.ListTools(ctx, params)
		if err != nil {
			return ts, fmt.Errorf("list tools: %w", err)
		}
		for _, t := range res.Tools {
			ts.add(t)
		}
		if res.NextCursor == "" {
			break
		}
		params = &mcp.ListToolsParams{Cursor: res.NextCursor}
	}
	return ts, nil
}

func (ts *tools) add(t *mcp.Tool) {
	fn := funcName(t.Name)
	for i := 2; ts.byFunc[fn] != ""; i++ {
		fn = fmt.Sprintf("%s_%d", strings.TrimRight(fn[:min(len(fn), 56)], "_"), i)
	}
	ts.byFunc[fn] = t.Name
	schema := map[string]any{"type": "object"}
	if t.InputSchema != nil {
		if b, err := json.Marshal(t.InputSchema); err == nil {
			var m map[string]any
			if json.Unmarshal(b, &m) == nil && m != nil {
				schema = m
			}
		}
	}
	ts.list = append(ts.list, tool{fn: fn, name: t.Name, description: t.Description, schema: schema})
}

// funcName is name as a function name: the characters allowed, at most 60 of them.
func funcName(name string) string {
	fn := badFuncChar.ReplaceAllString(name, "_")
	if fn == "" {
		fn = "tool"
	}
	return fn[:min(len(fn), 60)]
}

// call makes the tool call c through cs, writes it and its result to tr, and returns what the
// model is told: the result's text (or its structured content), or what went wrong.
func (ts tools) call(ctx context.Context, cs *mcp.ClientSession, tr *agent.Trajectory, turn int, c call) result {
	name, ok := ts.byFunc[c.name]
	if !ok {
		name = c.name
	}
	tr.Write(agent.Line{Kind: agent.KindToolCall, Turn: turn, Tool: name, CallID: c.id, Arguments: json.RawMessage(c.args)})
	fail := func(msg string, d time.Duration) result {
		tr.Write(agent.Line{Kind: agent.KindToolResult, Turn: turn, Tool: name, CallID: c.id, Text: msg, IsError: true, DurationMS: d.Milliseconds()})
		return result{id: c.id, text: msg, isError: true}
	}
	if !ok {
		return fail(fmt.Sprintf("error: no tool named %q", c.name), 0)
	}
	args := map[string]any{}
	if a := strings.TrimSpace(c.args); a != "" {
		if err := json.Unmarshal([]byte(a), &args); err != nil {
			return fail("error: arguments are not a JSON object: "+err.Error(), 0)
		}
	}
	start := time.Now()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	d := time.Since(start)
	if err != nil {
		return fail("error: "+err.Error(), d)
	}
	text, structured := mcpclient.Text(res)
	l := agent.Line{Kind: agent.KindToolResult, Turn: turn, Tool: name, CallID: c.id, Text: text, IsError: res.IsError, JSON: structured, DurationMS: d.Milliseconds()}
	if text == "" && structured != nil {
		text = string(structured)
	}
	tr.Write(l)
	return result{id: c.id, text: text, isError: res.IsError}
}
