package mcpclient

import (
	"encoding/json"
	"iter"
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

// Images yields a tool result's image contents in order (a browser's screenshots, say): each
// one's media type (image/png, ...) and bytes.
func Images(res *mcp.CallToolResult) iter.Seq2[string, []byte] {
	return func(yield func(string, []byte) bool) {
		for _, c := range res.Content {
			if im, ok := c.(*mcp.ImageContent); ok && len(im.Data) > 0 && !yield(im.MIMEType, im.Data) {
				return
			}
		}
	}
}
