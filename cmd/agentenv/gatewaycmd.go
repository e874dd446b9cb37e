package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/agentenv/agentenv/gateway"
	"github.com/agentenv/agentenv/spec"
)

func newGatewayCmd(a *app) *cobra.Command {
	var f struct {
		listen, tokenFile, name, toolNames, mode, serialize string
		servers, services, websites, disable, origins       []string
		publicURL                                           string
		screenshots                                         []string
		callTimeout, connectTimeout                         time.Duration
		maxConns, maxSessions                               int
	}
	cmd := &cobra.Command{
		Use:   "gateway --listen HOST:PORT [--token-file F] --server NAME=URL [--server NAME=URL ...]",
		Short: "Serve one MCP gateway in front of an env's MCP servers",
		Long: `gateway aggregates the tools of every --server behind one authenticated MCP endpoint at /mcp,
and serves the composed card, /state, /step, /trajectory, role gating and /healthz. Every route
but /healthz needs "Authorization: Bearer TOKEN"; the token comes from --token-file, else from
$AGENTENV_GATEWAY_TOKEN. That token is the admin's. $AGENTENV_GATEWAY_ROLE_TOKENS, if set, is a JSON
object {"ROLE": "TOKEN", ...} of role-bound tokens: a request bearing one acts as that role
whatever its AgentEnv-Role header says (a differing header gets 403) and may use /mcp, /step and
the websites only. Each --website is served at /website/NAME/ (the prefix stripped, answers
streamed, WebSockets passed through) to the admin token and to a role token unless its role
disables the name website.NAME (--disable ROLE=website.NAME, or website.* for every site); the
gateway then lists its own list_website_urls tool, which gives each site's URL under
--public-url. Tokens are never taken from the command line.`,
		Example: `  echo secret > token; agentenv gateway --listen 127.0.0.1:8080 --token-file token \
      --server notes=http://127.0.0.1:8081/mcp --server kv=http://127.0.0.1:8082/mcp`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			var roleTokens map[string]string
			token := os.Getenv(spec.ComposeTokenVar)
			if f.tokenFile != "" {
				b, err := os.ReadFile(f.tokenFile)
				if err != nil {
					return usageError{fmt.Sprintf("--token-file: %v", err)}
				}
				token = strings.TrimSpace(string(b))
			}
			if token == "" {
				return usageError{"gateway needs a token: --token-file F or $AGENTENV_GATEWAY_TOKEN"}
			}
			if raw := os.Getenv(spec.RoleTokensVar); raw != "" {
				if err := json.Unmarshal([]byte(raw), &roleTokens); err != nil {
					return usageError{fmt.Sprintf("$%s: want a JSON object of role to token: %v", spec.RoleTokensVar, err)}
				}
			}
			cfg := gateway.Config{
				RoleTokens: roleTokens,
				Name:       f.name, Token: token, ToolNames: f.toolNames, Mode: f.mode,
				CallTimeout: f.callTimeout, ConnectTimeout: f.connectTimeout, Serialize: f.serialize,
				AllowedOrigins: f.origins, Logger: a.log, Roles: map[string][]string{},
				MaxConns: f.maxConns, MaxSessions: f.maxSessions,
			}
			for _, s := range f.servers {
				name, url, ok := strings.Cut(s, "=")
				if !ok || name == "" || url == "" {
					return usageError{fmt.Sprintf("--server %q: want NAME=URL", s)}
				}
				cfg.Servers = append(cfg.Servers, gateway.Backend{Name: name, URL: url})
			}
			for _, s := range f.services {
				name, url, ok := strings.Cut(s, "=")
				if !ok || name == "" || url == "" {
					return usageError{fmt.Sprintf("--service %q: want NAME=URL", s)}
				}
				cfg.Services = append(cfg.Services, gateway.Backend{Name: name, URL: url})
			}
			for _, s := range f.websites {
				name, url, ok := strings.Cut(s, "=")
				if !ok || name == "" || url == "" {
					return usageError{fmt.Sprintf("--website %q: want NAME=URL", s)}
				}
				cfg.Websites = append(cfg.Websites, gateway.Backend{Name: name, URL: url})
			}
			cfg.PublicURL = f.publicURL
			cfg.Screenshots = f.screenshots
			if len(cfg.Servers) == 0 && len(cfg.Websites) == 0 {
				return usageError{"gateway needs at least one --server NAME=URL or --website NAME=URL"}
			}
			for _, d := range f.disable {
				role, pattern, ok := strings.Cut(d, "=")
				if !ok || role == "" || pattern == "" {
					return usageError{fmt.Sprintf("--disable %q: want ROLE=PATTERN", d)}
				}
				cfg.Roles[role] = append(cfg.Roles[role], pattern)
			}
			return gateway.ListenAndServe(cmd.Context(), f.listen, cfg, func(addr string) {
				a.log.Info("gateway serving", "addr", addr, "servers", len(cfg.Servers))
			})
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.listen, "listen", "127.0.0.1:8080", "address to serve on")
	fl.StringVar(&f.tokenFile, "token-file", "", "file holding the bearer token (default: $AGENTENV_GATEWAY_TOKEN)")
	fl.StringVar(&f.name, "name", "env", "env name on the composed card")
	fl.StringArrayVar(&f.servers, "server", nil, "backend MCP server NAME=URL (repeatable)")
	fl.StringArrayVar(&f.services, "service", nil, "HTTP service NAME=BASE_URL proxied at /svc/NAME/ with the admin token, such as the DB web UI (repeatable)")
	fl.StringArrayVar(&f.websites, "website", nil, "website NAME=BASE_URL served at /website/NAME/ (prefix stripped) to the admin token and to role tokens whose role does not disable website.NAME (repeatable)")
	fl.StringVar(&f.publicURL, "public-url", "", "the gateway's base URL as the env reaches it, under which list_website_urls gives each website's URL")
	fl.StringArrayVar(&f.screenshots, "screenshots", nil, "SERVER: a Playwright MCP server of --server after whose calls that act on the page (navigate, click, type, ...) the gateway appends a screenshot to the result (repeatable)")
	fl.StringVar(&f.toolNames, "tool-names", "auto", "auto, prefix or never")
	fl.StringVar(&f.mode, "mode", "performance", "consistent (serialize tool calls) or performance")
	fl.StringVar(&f.serialize, "serialize", gateway.SerializeServer, "scope of consistent mode: server (one call at a time per server) or env (one at a time across the gateway)")
	fl.DurationVar(&f.callTimeout, "call-timeout", 0, "bound on one tool call (default 600s)")
	fl.DurationVar(&f.connectTimeout, "connect-timeout", 0, "deadline to reach every backend at start (default 60s)")
	fl.StringArrayVar(&f.disable, "disable", nil, "ROLE=PATTERN: hide and refuse matching tools for a role (repeatable)")
	fl.IntVar(&f.maxConns, "max-conns", 0, "connections open at once; more wait (default 4096, -1 for no cap)")
	fl.IntVar(&f.maxSessions, "max-sessions", 0, "MCP sessions open at once; an initialize past it gets 503 (default 256, -1 for no cap)")
	fl.StringArrayVar(&f.origins, "allow-origin", nil, "browser origin allowed besides localhost (repeatable)")
	return cmd
}
