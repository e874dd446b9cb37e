package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/mcpclient"
)

// ScreenshotTools are the Playwright MCP server's tools that act on the page (navigate, click,
// type, ...), after each of which the gateway takes a screenshot of a [Config.Screenshots]
// backend's page. Reading tools (browser_snapshot, browser_take_screenshot itself, console,
// network, tabs) are not in it.
var ScreenshotTools = []string{
	"browser_navigate", "browser_navigate_back", "browser_navigate_forward", "browser_reload",
	"browser_click", "browser_select_option", "browser_check", "browser_uncheck",
	"browser_type", "browser_fill_form", "browser_press_key", "browser_file_upload",
	"browser_handle_dialog", "browser_drag",
	"browser_mouse_click_xy", "browser_mouse_drag_xy", // the vision tools
}

// ScreenshotTool is the Playwright MCP tool the gateway calls for a screenshot: with no
// arguments it answers the viewport as a PNG image part.
const ScreenshotTool = "browser_take_screenshot"

// screenshots says after which calls the gateway takes a screenshot: those of ScreenshotTools
// on the backends of Config.Screenshots.
type screenshots map[string]bool // backend name

// after reports whether a call to r is followed by a screenshot.
func (s screenshots) after(r *route) bool {
	return r.local == nil && s[r.backend.name] && slices.Contains(ScreenshotTools, r.tool.Name)
}

// screenshotNote begins the text part the gateway adds when it could not take a screenshot.
const screenshotNote = "[agentenv gateway: no screenshot after this call: "

// attachScreenshot calls r's backend's ScreenshotTool on the same (shared) backend session, so
// of the page the call just acted on, and returns raw, a CallToolResult, with the screenshot's
// image parts appended to its content. The call has succeeded whatever happens here: a
// screenshot that fails is said in a text part instead, never as the call's error.
func (g *Gateway) attachScreenshot(ctx context.Context, r *route, raw json.RawMessage, meta mcp.Meta) json.RawMessage {
	var parts []any
	res, err := r.backend.call(ctx, ScreenshotTool, json.RawMessage(`{}`), meta)
	switch {
	case err != nil:
	case res.IsError:
		err = fmt.Errorf("%s answered an error: %s", ScreenshotTool, resultText(res))
	default:
		for _, c := range res.Content {
			if im, ok := c.(*mcp.ImageContent); ok && len(im.Data) > 0 {
				parts = append(parts, im)
			}
		}
		if len(parts) == 0 {
			err = fmt.Errorf("%s answered no image", ScreenshotTool)
		}
	}
	if err != nil {
		g.log.Warn("screenshot after a browser call", "server", r.backend.name, "tool", r.tool.Name, "err", err)
		parts = append(parts, &mcp.TextContent{Text: screenshotNote + err.Error() + "]"})
	}
	out, err := appendContent(raw, parts)
	if err != nil {
		g.log.Warn("screenshot after a browser call", "server", r.backend.name, "tool", r.tool.Name, "err", err)
		return raw
	}
	return out
}

// appendContent returns the CallToolResult raw with parts appended to its content array,
// every other member kept as it came.
func appendContent(raw json.RawMessage, parts []any) (json.RawMessage, error) {
	var res map[string]json.RawMessage
	if err := json.Unmarshal(raw, &res); err != nil {
		return nil, fmt.Errorf("decode result: %w", err)
	}
	var content []json.RawMessage
	if c := res["content"]; len(c) > 0 && string(c) != "null" {
		if err := json.Unmarshal(c, &content); err != nil {
			return nil, fmt.Errorf("decode result content: %w", err)
		}
	}
	for _, p := range parts {
		b, err := json.Marshal(p)
		if err != nil {
			return nil, fmt.Errorf("encode content: %w", err)
		}
		content = append(content, b)
	}
	c, err := json.Marshal(content)
	if err != nil {
		return nil, fmt.Errorf("encode content: %w", err)
	}
	res["content"] = c
	return json.Marshal(res)
}

// resultText is the text of res, cut to 200 bytes, for an error message.
func resultText(res *mcp.CallToolResult) string {
	s, _ := mcpclient.Text(res)
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
