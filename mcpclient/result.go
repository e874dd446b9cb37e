package mcpclient

import (
	"encoding/json"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Text is a tool result's text content, its parts joined by newlines, and its structured
// content as JSON (nil if it has none).
func Text(res *mcp.CallToolResult) (string, json.RawMessage) {
	var b strings.Builder
	for _, c := range res.Content {
		if t, ok := c.(*mcp.TextContent); ok {
			if b.Len() > 0 {
				b.WriteString("\n")
			}
			b.WriteString(t.Text)
		}
	}
	var structured json.RawMessage
	if res.StructuredContent != nil {
		if j, err := json.Marshal(res.StructuredContent); err == nil {
			structured = j
		}
	}
	return b.String(), structured
}
