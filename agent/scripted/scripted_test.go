package scripted_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/agent/scripted"
)

// echo is a real MCP server (the official SDK over streamable HTTP) with one tool that echoes
// its argument, or answers an error result for "fail"; it refuses requests without the token.
func echo(t *testing.T) string {
	srv := mcp.NewServer(&mcp.Implementation{Name: "echo", Version: "v1"}, nil)
	type in struct {
		Say string `json:"say"`
	}
	mcp.AddTool(srv, &mcp.Tool{Name: "echo"}, func(ctx context.Context, req *mcp.CallToolRequest, a in) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{IsError: a.Say == "fail", Content: []mcp.Content{&mcp.TextContent{Text: "said " + a.Say}}}, nil, nil
	})
	mcp.AddTool(srv, &mcp.Tool{Name: "screenshot"}, func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "took it"}, &mcp.ImageContent{MIMEType: "image/png", Data: screenshotPNG}}}, nil, nil
	})
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(hs.Close)
	return hs.URL
}

// screenshotPNG is what the echo server's screenshot tool answers as its image.
var screenshotPNG = []byte("\x89PNG\r\n\x1a\n a screenshot")

// A tool result's image is saved beside the trajectory file and named by its line.
func TestReplayKeepsImages(t *testing.T) {
	url := echo(t)
	a := &scripted.Agent{Calls: []scripted.Call{{Tool: "screenshot"}}}
	path := filepath.Join(t.TempDir(), "tr.ndjson")
	tr, err := agent.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	gw := agent.Gateway{URL: url, Headers: map[string]string{"Authorization": "Bearer tok"}}
	ans, err := a.Prompt(t.Context(), agent.Prompt{Gateway: gw}, tr)
	tr.Close()
	if err != nil || ans.Text != "took it" {
		t.Fatalf("Prompt = %+v, %v", ans, err)
	}
	lines, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var result agent.Line
	for _, raw := range strings.Split(strings.TrimSpace(string(lines)), "\n") {
		var l agent.Line
		if err := json.Unmarshal([]byte(raw), &l); err != nil {
			t.Fatal(err)
		}
		if l.Kind == agent.KindToolResult {
			result = l
		}
	}
	if len(result.Images) != 1 || result.Images[0].MediaType != "image/png" || result.Text != "took it" {
		t.Fatalf("tool result line = %+v, want its text and one PNG", result)
	}
	got, err := os.ReadFile(filepath.Join(filepath.Dir(path), result.Images[0].Path))
	if err != nil || string(got) != string(screenshotPNG) {
		t.Errorf("saved image = %q, %v", got, err)
	}
}

func TestReplayWritesTheOneShape(t *testing.T) {
	url := echo(t)
	a := &scripted.Agent{Calls: []scripted.Call{{Tool: "echo", Arguments: map[string]any{"say": "fail"}}, {Tool: "echo", Arguments: map[string]any{"say": "hi"}}}}
	path := filepath.Join(t.TempDir(), "tr.ndjson")
	tr, err := agent.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	gw := agent.Gateway{URL: url, Headers: map[string]string{"Authorization": "Bearer tok"}}
	tr.Write(agent.Line{Kind: agent.KindPrompt, Agent: "scripted"})
	ans, err := a.Prompt(t.Context(), agent.Prompt{Gateway: gw}, tr)
	agent.Finish(tr, ans, err)
	tr.Close()
	if err != nil || ans.Text != "said hi" || ans.Turns != 2 || ans.ToolCalls != 2 || ans.Stop != agent.StopAnswer {
		t.Fatalf("Prompt = %+v, %v", ans, err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var kinds []string
	var results []agent.Line
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var l agent.Line
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, l.Kind)
		if l.Kind == agent.KindToolResult {
			results = append(results, l)
		}
	}
	if got, want := strings.Join(kinds, " "), "prompt model tool_call tool_result model tool_call tool_result response stop"; got != want {
		t.Errorf("kinds = %s\nwant %s", got, want)
	}
	if len(results) != 2 || !results[0].IsError || results[1].Text != "said hi" || results[1].CallID != "call-2" {
		t.Errorf("results = %+v", results)
	}

	// A cap on turns stops the replay as the agent's own error.
	ans, err = a.Prompt(t.Context(), agent.Prompt{Gateway: gw, MaxTurns: 1}, &agent.Trajectory{})
	if !errors.Is(err, agent.ErrAgent) || ans.Stop != agent.StopMaxTurns || ans.ToolCalls != 1 {
		t.Errorf("with max_turns 1: %+v, %v", ans, err)
	}
	// No token: the gateway refuses, an infrastructure error.
	if _, err := a.Prompt(t.Context(), agent.Prompt{Gateway: agent.Gateway{URL: url}}, &agent.Trajectory{}); err == nil || errors.Is(err, agent.ErrAgent) {
		t.Errorf("without the token: %v, want an infrastructure error", err)
	}
}

// A call's Capture takes an argument from the previous call's result: the first group of the
// expression, or the whole match without one; one that matches nothing is the agent's error,
// and so is a capture on the first call.
func TestReplayCapture(t *testing.T) {
	url := echo(t)
	gw := agent.Gateway{URL: url, Headers: map[string]string{"Authorization": "Bearer tok"}}
	run := func(calls ...scripted.Call) (agent.Answer, error) {
		tr, err := agent.Create(filepath.Join(t.TempDir(), "tr.ndjson"))
		if err != nil {
			t.Fatal(err)
		}
		defer tr.Close()
		return (&scripted.Agent{Calls: calls}).Prompt(t.Context(), agent.Prompt{Gateway: gw}, tr)
	}
	first := scripted.Call{Tool: "echo", Arguments: map[string]any{"say": `- button "Order Notebook" [ref=e17]`}}
	ans, err := run(first, scripted.Call{Tool: "echo", Arguments: map[string]any{"say": "overridden"},
		Capture: map[string]*regexp.Regexp{"say": regexp.MustCompile(`button "Order Notebook" \[ref=(\w+)\]`)}})
	if err != nil || ans.Text != "said e17" {
		t.Errorf("captured group: %+v, %v; want said e17", ans, err)
	}
	ans, err = run(first, scripted.Call{Tool: "echo", Capture: map[string]*regexp.Regexp{"say": regexp.MustCompile(`Order \w+`)}})
	if err != nil || ans.Text != "said Order Notebook" {
		t.Errorf("captured match: %+v, %v; want said Order Notebook", ans, err)
	}
	ans, err = run(first, scripted.Call{Tool: "echo", Capture: map[string]*regexp.Regexp{"say": regexp.MustCompile(`Order Lamp`)}})
	if !errors.Is(err, agent.ErrAgent) || !strings.Contains(err.Error(), `scripted call 2 (echo): capture say: "Order Lamp" matches nothing`) || ans.ToolCalls != 1 {
		t.Errorf("a capture that matches nothing: %+v, %v", ans, err)
	}
	if _, err := run(scripted.Call{Tool: "echo", Capture: map[string]*regexp.Regexp{"say": regexp.MustCompile(`x`)}}); !errors.Is(err, agent.ErrAgent) {
		t.Errorf("a capture on the first call: %v", err)
	}
}
