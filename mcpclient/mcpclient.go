// Package mcpclient is how agentenv itself reaches an MCP server or a deployment's gateway: the
// official Go SDK's client over streamable HTTP, with the deployment's bearer token on every
// request and no retries of its own (the caller's deadline bounds a call). The deploy's
// readiness probe, a task's steps and the tests connect through it.
package mcpclient

import (
	"context"
	"net/http"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Bearer returns an http.RoundTripper that sends each request through next
// (http.DefaultTransport if nil) with the header "Authorization: Bearer token". An empty token
// adds no header, for servers that take none.
func Bearer(token string, next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return bearer{token: token, next: next}
}

type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.token != "" {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+b.token)
	}
	return b.next.RoundTrip(r)
}

// HTTPClient returns a copy of base (http.DefaultClient if nil) whose requests carry token as
// Bearer does.
func HTTPClient(base *http.Client, token string) *http.Client {
	if base == nil {
		base = http.DefaultClient
	}
	c := *base
	c.Transport = Bearer(token, c.Transport)
	return &c
}

// Client names the caller to the server and says how it reaches it; the zero value is usable.
type Client struct {
	Name, Version string       // the client's implementation; default "agentenv", "v1"
	HTTP          *http.Client // default http.DefaultClient
	// Headers are sent with every request (a gateway's headers as an agent is handed them);
	// an Authorization among them wins over the token.
	Headers map[string]string
	// NoStandaloneSSE leaves out the long-lived GET stream of server-initiated messages, for
	// callers that only call tools.
	NoStandaloneSSE bool
}

// Connect opens an MCP session to the streamable HTTP endpoint url with token (see Bearer).
// The caller closes the session.
func (c Client) Connect(ctx context.Context, url, token string) (*mcp.ClientSession, error) {
	name, version := c.Name, c.Version
	if name == "" {
		name = "agentenv"
	}
	if version == "" {
		version = "v1"
	}
	hc := HTTPClient(c.HTTP, token)
	if len(c.Headers) > 0 {
		hc.Transport = Headers(c.Headers, hc.Transport)
	}
	client := mcp.NewClient(&mcp.Implementation{Name: name, Version: version}, nil)
	return client.Connect(ctx, &mcp.StreamableClientTransport{
		Endpoint:             url,
		HTTPClient:           hc,
		MaxRetries:           -1,
		DisableStandaloneSSE: c.NoStandaloneSSE,
	}, nil)
}
