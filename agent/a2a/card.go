// Package a2a drives agents over the A2A protocol and serves an agent.Agent over it, with
// agentenv's extensions: urn:agentenv:mcp-config/v1 (the gateway handed over before the
// prompt), urn:agentenv:agent-config/v1 (the step's model, system prompt and caps, only the
// fields the card lists) and urn:agentenv:trajectory/v1 (what the agent did, read after the
// answer). The wire shapes follow the anchor's agentenv_protocol.a2a_agent.extensions; the
// protocol itself is github.com/a2aproject/a2a-go's.
package a2a

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"
)

// The extensions agentenv speaks, and the metadata key that always carries the gateway.
const (
	ExtMCPConfig   = "urn:agentenv:mcp-config/v1"
	ExtAgentConfig = "urn:agentenv:agent-config/v1"
	ExtTrajectory  = "urn:agentenv:trajectory/v1"

	// MetadataMCPServers is the message metadata key holding [{name, url, headers}], so an
	// agent without mcp-config still finds the gateway.
	MetadataMCPServers = "agentenv.mcp_servers"

	// MetadataErrorKind, on a failed task's status message, says whose failure it is:
	// ErrorKindAgent (the agent's own; it scores 0) or ErrorKindInfra (what the agent depends
	// on failed: its model endpoint, its files). Without it a failed task is the agent's.
	MetadataErrorKind = "agentenv.error_kind"
	ErrorKindAgent    = "agent_error"
	ErrorKindInfra    = "infra_error"
)

// The card's paths: the current one first, then the legacy one.
const (
	CardPath       = "/.well-known/agent-card.json"
	LegacyCardPath = "/.well-known/agent.json"
)

// defaultEndpoints are the extensions' routes when a card names none.
var defaultEndpoints = map[string]string{
	ExtMCPConfig:   "/ext/mcp-config",
	ExtAgentConfig: "/ext/agent-config",
	ExtTrajectory:  "/ext/trajectory",
}

// Card is an agent's card as agentenv reads it.
type Card struct {
	Card     sdk.AgentCard
	Base     string // where the card was fetched from: scheme://host[:port][/prefix]
	Endpoint string // the JSON-RPC URL, on Base's host (a card may name an address only its own network reaches)
	// Extensions are the urn:agentenv:* extensions the card advertises, by URI.
	Extensions map[string]Extension
}

// Extension is one advertised agentenv extension.
type Extension struct {
	URI      string
	Endpoint string   // absolute URL of its route
	Fields   []string // agent-config: the fields the agent accepts (required, optional, supported)
}

// Has reports whether the card advertises the extension uri.
func (c *Card) Has(uri string) bool { _, ok := c.Extensions[uri]; return ok }

// ParseCard reads a card's JSON fetched from base.
func ParseCard(base string, body []byte) (*Card, error) {
	var sc sdk.AgentCard
	if err := json.Unmarshal(body, &sc); err != nil {
		return nil, fmt.Errorf("card: %w", err)
	}
	b, err := url.Parse(strings.TrimRight(base, "/"))
	if err != nil || b.Host == "" {
		return nil, fmt.Errorf("card: base url %q is not absolute", base)
	}
	c := &Card{Card: sc, Base: b.String(), Extensions: map[string]Extension{}}
	c.Endpoint = onHost(b, sc.URL, "/")
	if sc.PreferredTransport != "" && sc.PreferredTransport != sdk.TransportProtocolJSONRPC {
		c.Endpoint = ""
		for _, in := range sc.AdditionalInterfaces {
			if in.Transport == sdk.TransportProtocolJSONRPC {
				c.Endpoint = onHost(b, in.URL, "/")
			}
		}
		if c.Endpoint == "" {
			return nil, fmt.Errorf("card: no JSONRPC interface (preferred transport %s)", sc.PreferredTransport)
		}
	}
	for _, e := range sc.Capabilities.Extensions {
		def, known := defaultEndpoints[e.URI]
		if !known {
			continue
		}
		ext := Extension{URI: e.URI, Endpoint: b.String() + def}
		if ep, ok := e.Params["endpoint"].(string); ok && ep != "" {
			ext.Endpoint = onHost(b, ep, def)
		}
		if e.URI == ExtAgentConfig {
			ext.Fields = configFields(e.Params)
		}
		c.Extensions[e.URI] = ext
	}
	return c, nil
}

// onHost resolves ref against base, keeping base's scheme and host whatever host ref names.
func onHost(base *url.URL, ref, def string) string {
	path := def
	if ref != "" {
		if u, err := url.Parse(ref); err == nil {
			path = u.Path
		}
	}
	if path == "" {
		path = "/"
	}
	if strings.HasPrefix(path, base.Path+"/") || path == base.Path {
		return base.Scheme + "://" + base.Host + path
	}
	return base.String() + path
}

// configFields are the agent-config fields a card lists under params.methods.set.request.
func configFields(params map[string]any) []string {
	methods, _ := params["methods"].(map[string]any)
	set, _ := methods["set"].(map[string]any)
	req, _ := set["request"].(map[string]any)
	var out []string
	for _, k := range []string{"required", "optional", "supported"} {
		list, _ := req[k].([]any)
		for _, f := range list {
			if s, ok := f.(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

// FetchCard waits until base serves a card (the current path, then the legacy one) or wait
// has passed, whichever comes first, and reads it. The error names the URL and what the last
// try met; it is the infrastructure's, never agent.ErrAgent.
func FetchCard(ctx context.Context, hc *http.Client, base string, wait time.Duration) (*Card, error) {
	base = strings.TrimRight(base, "/")
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var last error
	for {
		for _, p := range []string{CardPath, LegacyCardPath} {
			body, err := get(ctx, hc, base+p)
			if err == nil {
				return ParseCard(base, body)
			}
			last = err
		}
		select {
		case <-ctx.Done():
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, fmt.Errorf("a2a agent at %s: no card at %s within %s: %w", base, CardPath, wait, last)
			}
			return nil, fmt.Errorf("a2a agent at %s: %w", base, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func get(ctx context.Context, hc *http.Client, u string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", u, resp.Status)
	}
	return body, nil
}
