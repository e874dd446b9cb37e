package gateway_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/gateway"
)

// pngBytes stands for a screenshot: the gateway passes the image part on as it came.
var pngBytes = []byte("\x89PNG\r\n\x1a\nnot really")

// newFakeBrowser starts a backend with browser_click and browser_snapshot echo tools and, unless
// broken, a browser_take_screenshot that answers a text and an image part and counts its calls.
func newFakeBrowser(t *testing.T, name string, broken bool, shots *atomic.Int64) *testBackend {
	b := newBackend(t, name, false, "browser_click", "browser_snapshot")
	mcp.AddTool(b.mcp, &mcp.Tool{Name: gateway.ScreenshotTool},
		func(ctx context.Context, req *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			shots.Add(1)
			if broken {
				return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: "no page open"}}}, nil, nil
			}
			return &mcp.CallToolResult{Content: []mcp.Content{
				&mcp.TextContent{Text: "Took the viewport screenshot"},
				&mcp.ImageContent{MIMEType: "image/png", Data: pngBytes},
			}}, nil, nil
		})
	return b
}

// images returns the image parts of res.
func images(res *mcp.CallToolResult) []*mcp.ImageContent {
	var out []*mcp.ImageContent
	for _, c := range res.Content {
		if im, ok := c.(*mcp.ImageContent); ok {
			out = append(out, im)
		}
	}
	return out
}

// With Screenshots naming the browser, a call that acts on the page (browser_click) comes back
// with its own text and the screenshot's image part, through the fast path (an MCP session) and
// /step alike, and the trajectory records it so; a reading call (browser_snapshot) takes none,
// nor does a server not named; a screenshot that fails leaves the call's result with a note.
func TestScreenshots_eachStep(t *testing.T) {
	var shots, brokenShots, otherShots atomic.Int64
	browser := newFakeBrowser(t, "browser", false, &shots)
	broken := newFakeBrowser(t, "broken", true, &brokenShots)
	other := newFakeBrowser(t, "other", false, &otherShots)
	_, srv := newGateway(t, gateway.Config{Screenshots: []string{"browser", "broken"}, ToolNames: gateway.NamesPrefix}, browser, broken, other)
	cs := connect(t, srv.URL, "", nil)

	call := func(tool string) *mcp.CallToolResult {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
		defer cancel()
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"text": "x"}})
		if err != nil || res.IsError {
			t.Fatalf("%s: %v %+v", tool, err, res)
		}
		return res
	}
	res := call("browser__browser_click")
	if im := images(res); len(im) != 1 || !bytes.Equal(im[0].Data, pngBytes) || im[0].MIMEType != "image/png" {
		t.Errorf("browser_click's result has images %+v, want the screenshot", im)
	}
	if got := resultText(res); !strings.HasPrefix(got, "browser/browser_click:x") {
		t.Errorf("browser_click's text = %q, want its own first", got)
	}
	if res := call("browser__browser_snapshot"); len(images(res)) != 0 {
		t.Errorf("browser_snapshot took a screenshot: %+v", res.Content)
	}
	if res := call("other__browser_click"); len(images(res)) != 0 || otherShots.Load() != 0 {
		t.Errorf("a server not in Screenshots took one: %+v", res.Content)
	}
	res = call("broken__browser_click")
	if len(images(res)) != 0 || !strings.Contains(resultText(res), "no screenshot after this call") || !strings.Contains(resultText(res), "no page open") {
		t.Errorf("a failed screenshot: %+v, want the call's text and a note", res.Content)
	}

	// /step, the SDK path.
	code, body, _ := do(t, "POST", srv.URL+gateway.StepPath, testToken, map[string]any{"tool": "browser__browser_click", "arguments": map[string]any{"text": "y"}}, nil)
	if code != http.StatusOK || !strings.Contains(string(body), `"type":"image"`) || !strings.Contains(string(body), "browser/browser_click:y") {
		t.Errorf("/step browser_click: %d %.300s", code, body)
	}
	if n := shots.Load(); n != 2 {
		t.Errorf("%d screenshots taken of the browser, want 2 (one per browser_click)", n)
	}

	// The trajectory holds each click's result with its image.
	_, traj, _ := do(t, "GET", srv.URL+gateway.TrajectoryPath, testToken, nil, nil)
	clicks := 0
	for line := range strings.SplitSeq(strings.TrimSpace(string(traj)), "\n") {
		var rec struct {
			Tool   string              `json:"tool"`
			Result *mcp.CallToolResult `json:"result"`
		}
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("trajectory line %s: %v", line, err)
		}
		if rec.Tool == "browser__browser_click" {
			clicks++
			if rec.Result == nil || len(images(rec.Result)) != 1 {
				t.Errorf("trajectory record of browser_click without its screenshot: %.300s", line)
			}
		}
	}
	if clicks != 2 {
		t.Errorf("%d browser_click records in the trajectory, want 2:\n%s", clicks, traj)
	}
}

func TestScreenshots_unknownServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	_, err := gateway.New(ctx, gateway.Config{Token: testToken, Servers: []gateway.Backend{{Name: "a", URL: "http://127.0.0.1:1/mcp"}}, Screenshots: []string{"browser"}})
	if err == nil || !strings.Contains(err.Error(), `screenshots "browser": not a server of the gateway`) {
		t.Errorf("New with screenshots of no server: %v", err)
	}
}
