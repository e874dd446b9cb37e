package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/agentenv/agentenv/envproto"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

const (
	cardTimeout  = 5 * time.Second
	maxCardBytes = 4 << 20
)

// Gateway paths besides the envproto ones.
const (
	StatePath        = "/state"
	StepPath         = "/step"
	TrajectoryPath   = "/trajectory"
	HealthPath       = "/healthz"
	DisablePath      = "/tools/disable"
	EnablePath       = "/tools/enable"
	serverDataPrefix = "/servers/"
)

// cardURL returns the card URL of an MCP endpoint: the endpoint with its /mcp suffix replaced
// by the card path, or the origin's card path when the endpoint has another path.
func cardURL(mcpURL string) (*url.URL, error) {
	u, err := url.Parse(mcpURL)
	if err != nil {
		return nil, err
	}
	if strings.HasSuffix(u.Path, envproto.MCPPath) {
		u.Path = strings.TrimSuffix(u.Path, envproto.MCPPath)
	} else {
		u.Path = ""
	}
	u.Path += envproto.CardPath
	u.RawQuery, u.Fragment = "", ""
	return u, nil
}

// fetchCard fetches the backend's card; a plain MCP server without one (any failure) gets one
// synthesized from its tools.
func (b *backend) fetchCard(ctx context.Context) {
	card, dataURL, err := b.getCard(ctx)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.log.Debug("no card, synthesizing one", "err", err)
		b.card, b.hasCard, b.dataURL = synthesizeCard(b.name, b.tools), false, ""
		return
	}
	b.card, b.hasCard, b.dataURL = card, true, dataURL
}

func (b *backend) getCard(ctx context.Context) (envproto.Card, string, error) {
	var card envproto.Card
	u, err := cardURL(b.url)
	if err != nil {
		return card, "", fmt.Errorf("card url: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, cardTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return card, "", err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := b.httpc.Do(req)
	if err != nil {
		return card, "", fmt.Errorf("get card: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return card, "", fmt.Errorf("get card: %s", resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxCardBytes)).Decode(&card); err != nil {
		return card, "", fmt.Errorf("decode card: %w", err)
	}
	if card.Name == "" {
		return card, "", fmt.Errorf("card without a name")
	}
	var dataURL string
	if p := card.Endpoints["data"]; p != "" {
		ref, err := url.Parse(p)
		if err != nil {
			return card, "", fmt.Errorf("card data endpoint %q: %w", p, err)
		}
		dataURL = u.ResolveReference(ref).String()
	}
	return card, dataURL, nil
}

// synthesizeCard describes a plain MCP server from its tools.
func synthesizeCard(name string, tools []*mcp.Tool) envproto.Card {
	return envproto.Card{
		Name:            name,
		ProtocolVersion: envproto.Version,
		Tools:           cardTools(tools, ""),
		Endpoints:       map[string]string{"mcp": envproto.MCPPath},
	}
}

func cardTools(tools []*mcp.Tool, server string) []envproto.Tool {
	out := make([]envproto.Tool, 0, len(tools))
	for _, t := range tools {
		out = append(out, cardTool(t, t.Name, server))
	}
	return out
}

func cardTool(t *mcp.Tool, name, server string) envproto.Tool {
	schema, _ := json.Marshal(t.InputSchema)
	return envproto.Tool{Name: name, Description: t.Description, InputSchema: schema, Server: server}
}

// Card returns the composed card: the union of tools with the backend serving each, every
// backend's card with its endpoints rewritten to the gateway's, and the gateway's endpoints.
func (g *Gateway) Card() envproto.Card {
	u := g.currentUnion()
	card := envproto.Card{
		Name:            g.cfg.Name,
		ProtocolVersion: envproto.Version,
		Tools:           make([]envproto.Tool, 0, len(u.tools)),
		Endpoints: map[string]string{
			"mcp":        envproto.MCPPath,
			"card":       envproto.CardPath,
			"state":      StatePath,
			"step":       StepPath,
			"trajectory": TrajectoryPath,
		},
		Servers: make(map[string]envproto.Card, len(g.backends)),
	}
	for _, r := range u.tools {
		card.Tools = append(card.Tools, cardTool(r.tool, r.public, r.backend.name))
	}
	if _, err := g.dataBackend(); err == nil {
		card.Endpoints["data"] = envproto.DataPath
	}
	for _, b := range g.backends {
		b.mu.Lock()
		sc := b.card
		hasData := b.dataURL != ""
		b.mu.Unlock()
		sc.Endpoints = map[string]string{"mcp": envproto.MCPPath}
		if hasData {
			sc.Endpoints["data"] = serverDataPrefix + b.name + envproto.DataPath
		}
		card.Servers[b.name] = sc
	}
	return card
}
