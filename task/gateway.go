package task

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/mcpclient"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// connect opens an MCP client session to the gateway at url with token, with the official Go
// SDK over streamable HTTP. The caller closes it.
func (sc *scope) connect(ctx context.Context, url, token string) (*mcp.ClientSession, error) {
	// No retries: a step fails plainly, and its timeout bounds it.
	c := mcpclient.Client{Name: "agentenv-task", Version: envproto.Version, HTTP: sc.e.r.httpClient(), NoStandaloneSSE: true}
	cs, err := c.Connect(ctx, url, token)
	if err != nil {
		return nil, fmt.Errorf("connect to gateway %s: %w", url, err)
	}
	return cs, nil
}

// toolCall is the result of one tool call, as steps read it.
type toolCall struct {
	Text    string // the text content, concatenated
	JSON    string // the structured content, if any
	IsError bool
}

// callOne calls tool with args on session cs.
func callOne(ctx context.Context, cs *mcp.ClientSession, tool string, args map[string]any) (toolCall, error) {
	if args == nil {
		args = map[string]any{}
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return toolCall{}, fmt.Errorf("call %s: %w", tool, err)
	}
	return readResult(res), nil
}

func readResult(res *mcp.CallToolResult) toolCall {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(t.Text)
		}
	}
	out := toolCall{Text: b.String(), IsError: res.IsError}
	if res.StructuredContent != nil {
		out.JSON = marshal(res.StructuredContent)
	}
	return out
}

// dataURL returns the gateway's data plane URL for env: its /mcp URL with /agentenv instead,
// or with server, /servers/SERVER/agentenv (the route of one server's data plane, which an env
// of several data planes needs).
func dataURL(env DeployedEnv, server string) string {
	base := strings.TrimSuffix(strings.TrimSuffix(env.GatewayURL, "/"), envproto.MCPPath)
	if server != "" {
		return base + "/servers/" + url.PathEscape(server) + envproto.DataPath
	}
	return base + envproto.DataPath
}

// dataCall sends one JSON-RPC request to the data plane of env (of its server, if not "") and
// decodes the result into out.
func (sc *scope) dataCall(ctx context.Context, env DeployedEnv, server, method string, params, out any) error {
	p, err := json.Marshal(params)
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	// One request per POST, so a constant id suffices.
	body, _ := json.Marshal(envproto.Request{JSONRPC: "2.0", ID: json.RawMessage("1"), Method: method, Params: p})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, dataURL(env, server), bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := mcpclient.HTTPClient(sc.e.r.httpClient(), env.Token).Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: gateway answered %s: %s", method, resp.Status, tail(string(raw), 300))
	}
	var r envproto.Response
	if err := json.Unmarshal(raw, &r); err != nil {
		return fmt.Errorf("%s: bad response: %w", method, err)
	}
	if r.Error != nil {
		return fmt.Errorf("%s: %w", method, r.Error)
	}
	if out != nil && len(r.Result) > 0 {
		if err := json.Unmarshal(r.Result, out); err != nil {
			return fmt.Errorf("%s: bad result: %w", method, err)
		}
	}
	return nil
}
