package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/internal/httpserve"
)

// WebsitePrefix is where the gateway serves the env's websites (Config.Websites):
// /website/<name>/<path> goes to /<path> on the website's base URL, the prefix stripped, the
// answer streamed as it comes and a WebSocket upgrade passed through. The admin token opens
// every website; a role token opens it too unless its role's rules disable the name
// "website.<name>" (a pattern such as "website.*" shuts that role out of every website),
// so an agent reaches the sites with its own token. The caller's Authorization header is
// not passed on; AgentEnv-Role is set, and X-Forwarded-Prefix names the prefix so an app can
// write links that stay under it. Each request is bounded by the call timeout, WebSockets
// included.
const WebsitePrefix = "/website/"

// WebsitesExtension is the card extension listing the env's websites, each with its path on
// the gateway.
const WebsitesExtension = "urn:agentenv:websites/v1"

// ListWebsiteURLsTool is the gateway's own tool, listed when the env has websites, that
// returns each website's URL as the agent reaches it through the gateway (url, with a token),
// and as the env's components, its browser among them, reach it directly by name (env_url).
const ListWebsiteURLsTool = "list_website_urls"

// websiteRule is the name a role rule disables to keep a role out of website name.
func websiteRule(name string) string { return "website." + name }

// website is one website the gateway serves.
type website struct {
	name string
	base *url.URL
	tr   http.RoundTripper
}

// newWebsites parses the websites of cfg; cfg has been validated.
func newWebsites(sites []Backend) (map[string]*website, error) {
	out := make(map[string]*website, len(sites))
	for _, s := range sites {
		u, err := url.Parse(s.URL)
		if err != nil {
			return nil, err
		}
		tr := http.DefaultTransport.(*http.Transport).Clone()
		out[s.Name] = &website{name: s.Name, base: u, tr: tr}
	}
	return out, nil
}

// websitePath is where website name is served, relative to the gateway's base URL.
func websitePath(name string) string { return WebsitePrefix + name + "/" }

func (g *Gateway) serveWebsite(w http.ResponseWriter, r *http.Request) {
	rest := strings.TrimPrefix(r.URL.Path, WebsitePrefix)
	name, path, slash := strings.Cut(rest, "/")
	site := g.sites[name]
	if site == nil {
		writeError(w, http.StatusNotFound, "no website "+name)
		return
	}
	if !slash { // /website/NAME: relative links resolve under the prefix only with its slash
		http.Redirect(w, r, websitePath(name), http.StatusPermanentRedirect)
		return
	}
	role := normRole(r.Header.Get(RoleHeader))
	if bound := boundRole(r); bound != "" && g.roles.disabled(bound, websiteRule(name)) {
		writeError(w, http.StatusForbidden, "website "+name+" is disabled for role "+bound)
		return
	}
	if r.Header.Get("Upgrade") != "" || strings.Contains(r.Header.Get("Accept"), "text/event-stream") {
		_ = httpserve.Stream(w) // a long-lived answer: the call timeout bounds it instead
	}
	ctx, cancel := context.WithTimeout(r.Context(), g.cfg.CallTimeout)
	defer cancel()
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme, pr.Out.URL.Host = site.base.Scheme, site.base.Host
			pr.Out.URL.Path = strings.TrimSuffix(site.base.Path, "/") + "/" + path
			pr.Out.URL.RawPath = ""
			pr.Out.Host = site.base.Host
			pr.Out.Header.Del("Authorization")
			withoutRouteCookie(pr.Out.Header)
			pr.Out.Header.Set(RoleHeader, role)
			pr.Out.Header.Set("X-Forwarded-Prefix", strings.TrimSuffix(websitePath(name), "/"))
			pr.SetXForwarded()
		},
		Transport:     site.tr,
		FlushInterval: -1, // stream: every write of the site reaches the caller at once
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			status := http.StatusBadGateway
			if errors.Is(err, context.DeadlineExceeded) {
				status = http.StatusGatewayTimeout
			}
			writeError(w, status, "website "+name+": "+ErrBackendUnavailable.Error()+": "+err.Error())
		},
	}
	proxy.ServeHTTP(&svcWriter{statusWriter{ResponseWriter: w}}, r.WithContext(ctx))
}

// WebsiteState is one website in State.
type WebsiteState struct {
	Name     string `json:"name"`
	Path     string `json:"path"`     // where the gateway serves it: /website/NAME/
	URL      string `json:"url"`      // Path under Config.PublicURL, or Path without one
	Upstream string `json:"upstream"` // where the gateway reaches it
}

// websiteStates lists the websites in the order of Config.Websites.
func (g *Gateway) websiteStates() []WebsiteState {
	out := make([]WebsiteState, 0, len(g.cfg.Websites))
	for _, s := range g.cfg.Websites {
		p := websitePath(s.Name)
		out = append(out, WebsiteState{Name: s.Name, Path: p, URL: g.publicURL(p), Upstream: s.URL})
	}
	return out
}

// publicURL is path under Config.PublicURL, or path itself without one.
func (g *Gateway) publicURL(path string) string {
	if g.cfg.PublicURL == "" {
		return path
	}
	return strings.TrimSuffix(g.cfg.PublicURL, "/") + path
}

// websitesExtension advertises the websites in the card: each name with its path.
func (g *Gateway) websitesExtension() envproto.Extension {
	type site struct {
		Name     string `json:"name"`
		Endpoint string `json:"endpoint"`
	}
	sites := make([]site, 0, len(g.cfg.Websites))
	for _, s := range g.cfg.Websites {
		sites = append(sites, site{s.Name, websitePath(s.Name)})
	}
	params, _ := json.Marshal(struct {
		Websites []site `json:"websites"`
	}{sites})
	return envproto.Extension{URI: WebsitesExtension, Description: "The env's websites, served by the gateway under /website/.", Params: params}
}

// listWebsiteURLs is the list_website_urls tool: {"websites": [{name, url, env_url}]} as text
// and structured content.
func (g *Gateway) listWebsiteURLs(context.Context, json.RawMessage) (json.RawMessage, error) {
	type site struct {
		Name   string `json:"name"`
		URL    string `json:"url"`
		EnvURL string `json:"env_url"`
	}
	v := struct {
		Websites []site `json:"websites"`
	}{[]site{}}
	for _, s := range g.websiteStates() {
		v.Websites = append(v.Websites, site{s.Name, s.URL, strings.TrimSuffix(s.Upstream, "/") + "/"})
	}
	text, _ := json.Marshal(v)
	return json.Marshal(&mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: string(text)}}, StructuredContent: v})
}

// listWebsiteURLsTool is list_website_urls as the gateway lists it.
var listWebsiteURLsTool = &mcp.Tool{
	Name:        ListWebsiteURLsTool,
	Description: "List the env's websites: the URL of each through the gateway (url), and where the env's browser reaches it (env_url).",
	InputSchema: map[string]any{"type": "object", "properties": map[string]any{}, "additionalProperties": false},
	Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true},
}
