// Package envtest reaches env servers and deployments' gateways in tests as agents and
// harnesses do: a real MCP client over streamable HTTP (with a gateway's bearer token), and the
// env data plane.
package envtest

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/mcpclient"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Connect opens an MCP session to the gateway at url (its /mcp endpoint) with token, failing
// the test if it cannot; the session is closed when the test ends.
func Connect(t testing.TB, url, token string) *mcp.ClientSession {
	t.Helper()
	cs, err := mcpclient.Client{Name: "agentenv-test"}.Connect(t.Context(), url, token)
	if err != nil {
		t.Fatalf("connect to the gateway at %s: %v", url, err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// Call calls tool with args and returns the text of its result, failing the test on an error
// or a tool error.
func Call(t testing.TB, cs *mcp.ClientSession, tool string, args map[string]any) string {
	t.Helper()
	res, err := cs.CallTool(t.Context(), &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	if res.IsError {
		t.Fatalf("call %s: tool error: %s", tool, b.String())
	}
	return b.String()
}

// Bearer is mcpclient.Bearer over http.DefaultTransport, for tests that build their own MCP
// transport.
func Bearer(token string) http.RoundTripper { return mcpclient.Bearer(token, nil) }

// CallJSON calls tool with args and decodes its structured result into out, failing the test
// on an error, a tool error or a result out cannot hold.
func CallJSON(t testing.TB, ctx context.Context, cs *mcp.ClientSession, tool string, args map[string]any, out any) {
	t.Helper()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", tool, err)
	}
	if res.IsError {
		t.Fatalf("%s: tool error %v", tool, res.Content)
	}
	raw, err := json.Marshal(res.StructuredContent)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, out); err != nil {
		t.Fatalf("%s: decode %s: %v", tool, raw, err)
	}
}

// Data sends one data-plane request to the env server at url and returns its result, failing
// the test on a JSON-RPC error.
func Data(t testing.TB, url, method string, params any) json.RawMessage {
	t.Helper()
	resp := DataResponse(t, url, method, params)
	if resp.Error != nil {
		t.Fatalf("%s: error %d %s", method, resp.Error.Code, resp.Error.Message)
	}
	return resp.Result
}

// DataResponse sends one data-plane request to the env server at url and returns the whole
// JSON-RPC response, error included.
func DataResponse(t testing.TB, url, method string, params any) envproto.Response {
	t.Helper()
	return dataResponse(t, url, "", method, params)
}

// DataVia sends one data-plane request with a bearer token, as a gateway's data plane (the
// gateway's base URL, its /mcp cut off) wants, and returns its result, failing the test on a
// JSON-RPC error.
func DataVia(t testing.TB, url, token, method string, params any) json.RawMessage {
	t.Helper()
	resp := dataResponse(t, url, token, method, params)
	if resp.Error != nil {
		t.Fatalf("%s: error %d %s", method, resp.Error.Code, resp.Error.Message)
	}
	return resp.Result
}

func dataResponse(t testing.TB, url, token, method string, params any) envproto.Response {
	t.Helper()
	p, err := json.Marshal(params)
	if err != nil {
		t.Fatal(err)
	}
	body, err := json.Marshal(envproto.Request{JSONRPC: "2.0", ID: json.RawMessage(`1`), Method: method, Params: p})
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, url+envproto.DataPath, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var resp envproto.Response
	if err := json.NewDecoder(res.Body).Decode(&resp); err != nil {
		t.Fatalf("%s: decode response (%s): %v", method, res.Status, err)
	}
	return resp
}
