package model

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"regexp"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/mcpclient"
)

// tool is one tool as offered to the model: a gateway tool, or one of agentenv's own over a
// Terminal.
type tool struct {
	fn          string // the function name the model sees
	name        string // the tool's own name, as the trajectory records it
	description string
	schema      map[string]any // the input JSON Schema; {"type":"object"} if the tool has none
	call        callFunc
}

// callFunc makes one call with the model's arguments. An error is told to the model as the
// call's failure; otherwise the output's text (or structured, if text is empty) is what it is
// told.
type callFunc func(ctx context.Context, args map[string]any) (output, error)

// output is what a tool call gave: its text, structured content, whether it is an error, and
// its images (kept with the trajectory, not told to the model).
type output struct {
	text       string
	structured json.RawMessage
	isError    bool
	images     iter.Seq2[string, []byte]
}

// tools are the tools offered to the model, by function name.
type tools struct {
	list   []tool
	byFunc map[string]int // index in list
}

func newTools() tools { return tools{byFunc: map[string]int{}} }

// badFuncChar is what function names may not contain (OpenAI's and Anthropic's rule).
var badFuncChar = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// listGateway adds the gateway's tools to ts, following pagination, and names each as a
// function; their calls go through cs.
func (ts *tools) listGateway(ctx context.Context, cs *mcp.ClientSession) error {
	params := &mcp.ListToolsParams{}
	for range 100 {
		res, err := cs.ListTools(ctx, params)
		if err != nil {
			return fmt.Errorf("list tools: %w", err)
		}
		for _, t := range res.Tools {
			schema := map[string]any{"type": "object"}
			if t.InputSchema != nil {
				if b, err := json.Marshal(t.InputSchema); err == nil {
					var m map[string]any
					if json.Unmarshal(b, &m) == nil && m != nil {
						schema = m
					}
				}
			}
			ts.add(tool{name: t.Name, description: t.Description, schema: schema, call: gatewayCall(cs, t.Name)})
		}
		if res.NextCursor == "" {
			break
		}
		params = &mcp.ListToolsParams{Cursor: res.NextCursor}
	}
	return nil
}

// gatewayCall calls the gateway's tool name through cs.
func gatewayCall(cs *mcp.ClientSession, name string) callFunc {
	return func(ctx context.Context, args map[string]any) (output, error) {
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
		if err != nil {
			return output{}, err
		}
		text, structured := mcpclient.Text(res)
		return output{text: text, structured: structured, isError: res.IsError, images: mcpclient.Images(res)}, nil
	}
}

// add offers t under a function name of its own: its name as a function name, with a suffix
// if an earlier tool took it.
func (ts *tools) add(t tool) {
	fn := funcName(t.name)
	for i := 2; ts.taken(fn); i++ {
		fn = fmt.Sprintf("%s_%d", strings.TrimRight(fn[:min(len(fn), 56)], "_"), i)
	}
	t.fn = fn
	ts.byFunc[fn] = len(ts.list)
	ts.list = append(ts.list, t)
}

func (ts *tools) taken(fn string) bool {
	_, ok := ts.byFunc[fn]
	return ok
}

// funcName is name as a function name: the characters allowed, at most 60 of them.
func funcName(name string) string {
	fn := badFuncChar.ReplaceAllString(name, "_")
	if fn == "" {
		fn = "tool"
	}
	return fn[:min(len(fn), 60)]
}

// call makes the tool call c, writes it and its result to tr, and returns what the model is
// told: the result's text (or its structured content), or what went wrong.
func (ts tools) call(ctx context.Context, tr *agent.Trajectory, turn int, c call) result {
	i, ok := ts.byFunc[c.name]
	name := c.name
	if ok {
		name = ts.list[i].name
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
	out, err := ts.list[i].call(ctx, args)
	d := time.Since(start)
	if err != nil {
		return fail("error: "+err.Error(), d)
	}
	text, structured, isError := out.text, out.structured, out.isError
	l := agent.Line{Kind: agent.KindToolResult, Turn: turn, Tool: name, CallID: c.id, Text: text, IsError: isError, JSON: structured, DurationMS: d.Milliseconds()}
	if out.images != nil {
		var err error
		if l.Images, err = tr.KeepImages(out.images); err != nil {
			l.Text += "\n[" + err.Error() + "]"
		}
	}
	if text == "" && structured != nil {
		text = string(structured)
	}
	tr.Write(l)
	return result{id: c.id, text: text, isError: isError}
}
