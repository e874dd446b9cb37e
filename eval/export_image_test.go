package eval

import (
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentenv/agentenv/agent"
)

// A tool result's image (a browser's screenshot) is exported to chat-jsonl as a user message
// of image parts right after the tool message, as a data: URL of the saved file.
func TestConversationImages(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.jsonl")
	tr, err := agent.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	png := []byte("\x89PNG\r\n\x1a\nshot")
	imgs, err := tr.KeepImages(func(yield func(string, []byte) bool) { yield("image/png", png) })
	if err != nil {
		t.Fatal(err)
	}
	tr.Write(agent.Line{Kind: agent.KindPrompt, Agent: "openai", Text: "look"})
	tr.Write(agent.Line{Kind: agent.KindModel, Model: "m", ToolCalls: 1})
	tr.Write(agent.Line{Kind: agent.KindToolCall, Tool: "browser_take_screenshot", CallID: "c1", Arguments: json.RawMessage(`{}`)})
	tr.Write(agent.Line{Kind: agent.KindToolResult, Tool: "browser_take_screenshot", CallID: "c1", Text: "took it", Images: imgs})
	// A line naming a file outside its folder is not followed.
	tr.Write(agent.Line{Kind: agent.KindToolCall, Tool: "browser_take_screenshot", CallID: "c2", Arguments: json.RawMessage(`{}`)})
	tr.Write(agent.Line{Kind: agent.KindToolResult, Tool: "browser_take_screenshot", CallID: "c2", Text: "x",
		Images: []agent.Image{{Path: "../../etc/passwd", MediaType: "image/png"}}})
	tr.Write(agent.Line{Kind: agent.KindResponse, Text: "done"})
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	msgs, _, _, err := conversation(path, Redactor{})
	if err != nil {
		t.Fatal(err)
	}
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.Role)
	}
	if got, want := strings.Join(roles, " "), "user assistant tool user tool assistant"; got != want {
		t.Fatalf("roles %s, want %s", got, want)
	}
	b, err := json.Marshal(msgs[3])
	want := `{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,` + base64.StdEncoding.EncodeToString(png) + `"}}]}`
	if err != nil || string(b) != want {
		t.Errorf("image message = %s, %v\nwant %s", b, err, want)
	}
	if b, _ := json.Marshal(msgs[2]); !strings.Contains(string(b), `"content":"took it"`) {
		t.Errorf("tool message = %s, want its text as a string", b)
	}
}
