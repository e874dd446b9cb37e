package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
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
	if card.HasDataPlane() {
		ref, err := url.Parse(card.URL)
		if err != nil {
			return card, "", fmt.Errorf("card url %q: %w", card.URL, err)
		}
		dataURL = u.ResolveReference(ref).String()
	}
	return card, dataURL, nil
}

// synthesizeCard describes a plain MCP server from its tools: no data plane.
func synthesizeCard(name string, tools []*mcp.Tool) envproto.Card {
	return envproto.Card{
		Name:                 name,
		ProtocolVersion:      envproto.Version,
		PreferredTransport:   envproto.TransportJSONRPC,
		AdditionalInterfaces: mcpInterface(),
		Capabilities:         envproto.Capabilities{Tools: cardTools(tools, ""), Operations: []string{}},
	}
}

func mcpInterface() []envproto.Interface {
	return []envproto.Interface{{URL: envproto.MCPPath, Transport: envproto.TransportMCP}}
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

// GatewayExtension is the card extension through which a gateway advertises its control
// routes, each a method of its params with its own endpoint and HTTP verb.
const GatewayExtension = "urn:agentenv:gateway/v1"

// gatewayExtension advertises the control routes in the anchor's invocable-extension shape.
func gatewayExtension() envproto.Extension {
	type method struct {
		Method   string `json:"method"`
		Endpoint string `json:"endpoint"`
	}
	params, _ := json.Marshal(struct {
		Endpoint string            `json:"endpoint"`
		Methods  map[string]method `json:"methods"`
	}{StatePath, map[string]method{
		"state":      {http.MethodGet, StatePath},
		"step":       {http.MethodPost, StepPath},
		"trajectory": {http.MethodGet, TrajectoryPath},
		"disable":    {http.MethodPost, DisablePath},
		"enable":     {http.MethodPost, EnablePath},
		// the virtual clock (clock.go) and triggers (triggers.go)
		"clock_set":         {http.MethodPut, ClockSetPath},
		"clock_clear":       {http.MethodPost, ClockClearPath},
		"clock_time":        {http.MethodGet, ClockTimePath},
		"clock_state":       {http.MethodGet, ClockStatePath},
		"triggers_register": {http.MethodPost, TriggersRegisterPath},
		"triggers_remove":   {http.MethodPost, TriggersRemovePath},
		"triggers_clear":    {http.MethodPost, TriggersClearPath},
		"triggers_state":    {http.MethodGet, TriggersStatePath},
	}})
	return envproto.Extension{URI: GatewayExtension, Description: "The gateway's control routes.", Params: params}
}

// Card returns the composed card in the anchor's shape: the union of tools with the backend
// serving each; the data plane at /agentenv with the operations of the one backend that has
// one (none when no backend or several have: each is reached at its child's url); the
// gateway's control routes as the GatewayExtension; and each backend's card among the
// children, its url rewritten to the gateway's /servers/NAME/agentenv and its MCP endpoint to
// the gateway's, and the endpoints of its extensions to the gateway's /svc/NAME/ proxy (svc.go).
func (g *Gateway) Card() envproto.Card {
	u := g.currentUnion()
	card := envproto.Card{
		Name:                 g.cfg.Name,
		ProtocolVersion:      envproto.Version,
		URL:                  envproto.DataPath,
		PreferredTransport:   envproto.TransportJSONRPC,
		AdditionalInterfaces: mcpInterface(),
		Capabilities: envproto.Capabilities{
			Tools:      make([]envproto.Tool, 0, len(u.tools)),
			Operations: []string{},
			Extensions: []envproto.Extension{gatewayExtension()},
		},
		Children: make([]envproto.Card, 0, len(g.backends)),
	}
	if len(g.cfg.Websites) > 0 {
		card.Capabilities.Extensions = append(card.Capabilities.Extensions, g.websitesExtension())
	}
	for _, r := range u.tools {
		card.Capabilities.Tools = append(card.Capabilities.Tools, cardTool(r.tool, r.public, r.backend.name))
	}
	if b, err := g.dataBackend(); err == nil {
		b.mu.Lock()
		card.Capabilities.Operations = slices.Clone(b.card.Methods())
		b.mu.Unlock()
	}
	for _, b := range g.backends {
		b.mu.Lock()
		sc := b.card
		hasData := b.dataURL != ""
		b.mu.Unlock()
		sc.Name = b.name
		sc.AdditionalInterfaces = mcpInterface()
		sc.Capabilities.Operations = slices.Clone(sc.Methods())
		sc.URL = ""
		if hasData {
			sc.URL = serverDataPrefix + b.name + envproto.DataPath
		}
		sc.Deprecated = nil
		sc.Capabilities.Extensions = rebaseExtensions(sc.Capabilities.Extensions, SvcPrefix+b.name)
		card.Children = append(card.Children, sc)
	}
	return card
}

// rebaseExtensions returns exts with every "endpoint" in their params that is an absolute path
// prefixed by prefix, so that a child's extension routes name where the gateway serves them.
// Params that are not JSON objects are kept as they are.
func rebaseExtensions(exts []envproto.Extension, prefix string) []envproto.Extension {
	out := make([]envproto.Extension, 0, len(exts))
	for _, e := range exts {
		var params any
		if len(e.Params) > 0 && json.Unmarshal(e.Params, &params) == nil {
			if raw, err := json.Marshal(rebaseEndpoints(params, prefix)); err == nil {
				e.Params = raw
			}
		}
		out = append(out, e)
	}
	return out
}

func rebaseEndpoints(v any, prefix string) any {
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if s, ok := x.(string); ok && k == "endpoint" && strings.HasPrefix(s, "/") {
				v[k] = prefix + s
				continue
			}
			v[k] = rebaseEndpoints(x, prefix)
		}
	case []any:
		for i, x := range v {
			v[i] = rebaseEndpoints(x, prefix)
		}
	}
	return v
}
