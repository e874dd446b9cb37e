// Package gatewaytest reaches a deployment's gateway in tests as an agent does: a real MCP
// client over streamable HTTP, with the deployment's bearer token on every request.
package gatewaytest

import (
	"net/http"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Connect opens an MCP session to the gateway at url (its /mcp endpoint) with token, failing
// the test if it cannot; the session is closed when the test ends.
func Connect(t testing.TB, url, token string) *mcp.ClientSession {
	t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "agentenv-test", Version: "v1"}, nil)
	cs, err := c.Connect(t.Context(), &mcp.StreamableClientTransport{
		Endpoint: url, HTTPClient: &http.Client{Transport: Bearer(token)}, MaxRetries: -1,
	}, nil)
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

// Bearer is an http.RoundTripper that adds the token as a bearer credential to every request.
type Bearer string

// RoundTrip implements http.RoundTripper over http.DefaultTransport.
func (b Bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+string(b))
	return http.DefaultTransport.RoundTrip(r)
}
