package task

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/mcpclient"
)

// Steps that drive a deployed env's gateway through its admin routes mid-episode (the anchor's
// sync_env_clock, register_env_triggers, modify_env_tool_access, apply_server_config): the
// virtual clock, triggers, per-role tool access and the servers' own extensions behind /svc/.
// They use the env's admin token, which an agent never holds; every change is in the gateway's
// trajectory (via "control").

// Step type names of the gateway control steps.
const (
	TypeSetClock          = "set_clock"
	TypeRegisterTriggers  = "register_triggers"
	TypeSetToolAccess     = "set_tool_access"
	TypeCallExtension     = "call_extension"
	TypeApplyServerConfig = "apply_server_config"
)

// maxAdminAnswer bounds what a control step reads of one gateway answer.
const maxAdminAnswer = 16 << 20

// gatewayBase is the gateway's base URL: its /mcp URL without /mcp.
func gatewayBase(env DeployedEnv) string {
	return strings.TrimSuffix(strings.TrimSuffix(env.GatewayURL, "/"), envproto.MCPPath)
}

// admin sends one request with the env's admin token to path on its gateway (query, if any,
// added) and returns the status and body. A body that is not nil is sent as JSON.
func (sc *scope) admin(ctx context.Context, env DeployedEnv, method, path string, query url.Values, body any) (int, []byte, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
		}
		rd = bytes.NewReader(b)
	}
	u := gatewayBase(env) + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := mcpclient.HTTPClient(sc.e.r.httpClient(), env.Token).Do(req)
	if err != nil {
		return 0, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxAdminAnswer))
	if err != nil {
		return resp.StatusCode, nil, fmt.Errorf("%s %s: %w", method, path, err)
	}
	return resp.StatusCode, b, nil
}

// adminOK is admin that fails on a status other than 200, naming the gateway's answer.
func (sc *scope) adminOK(ctx context.Context, env DeployedEnv, method, path string, body any) ([]byte, error) {
	code, b, err := sc.admin(ctx, env, method, path, nil, body)
	if err != nil {
		return nil, err
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s %s: gateway answered %d: %s", method, path, code, tail(string(b), 300))
	}
	return b, nil
}

// setClock arms (or clears) the gateway's virtual clock.
type setClock struct {
	Env         string   `yaml:"env" task:"required"`
	VirtualTime string   `yaml:"virtual_time"`                    // RFC 3339; arms the clock
	Rate        *float64 `yaml:"virtual_seconds_per_real_second"` // 1 by default; 0 freezes it
	Clear       bool     `yaml:"clear"`                           // disarm instead
}

func (s *setClock) Check() error {
	switch {
	case s.Clear && (s.VirtualTime != "" || s.Rate != nil):
		return errors.New("clear: set clear or virtual_time, not both")
	case !s.Clear && s.VirtualTime == "":
		return errors.New("virtual_time: want an RFC 3339 time such as 2026-01-05T09:00:00Z (or clear: true)")
	case s.Rate != nil && (*s.Rate < 0 || *s.Rate > 86400):
		return fmt.Errorf("virtual_seconds_per_real_second: want 0 to 86400, got %g", *s.Rate)
	}
	return nil
}

func (s *setClock) Refs() []Ref { return []Ref{{"env", s.Env, envTypes}} }

func (s *setClock) Run(ctx context.Context, sc *scope) (Result, error) {
	env, err := sc.env(s.Env)
	if err != nil {
		return Result{}, err
	}
	if s.Clear {
		if _, err := sc.adminOK(ctx, env, http.MethodPost, "/clock/clear", struct{}{}); err != nil {
			return Result{}, err
		}
		return Result{Outputs: map[string]string{"virtual_time": "", "state": `{"armed":false}`}}, nil
	}
	body := map[string]any{"virtual_time": s.VirtualTime}
	if s.Rate != nil {
		body["virtual_seconds_per_real_second"] = *s.Rate
	}
	b, err := sc.adminOK(ctx, env, http.MethodPut, "/clock/set-time", body)
	if err != nil {
		return Result{}, err
	}
	var st struct {
		VirtualTime string `json:"virtual_time"`
	}
	_ = json.Unmarshal(b, &st)
	return Result{Outputs: map[string]string{"virtual_time": st.VirtualTime, "state": strings.TrimSpace(string(b))}}, nil
}

// registerTriggers registers triggers on the gateway, in the gateway's shape (see the
// gateway package: when {type: action|turn|time}, actions, barrier).
type registerTriggers struct {
	Env        string   `yaml:"env" task:"required"`
	WatchRoles []string `yaml:"watch_roles"` // the roles whose calls fire triggers; ["default"] by default
	Triggers   []any    `yaml:"triggers" task:"required"`
	Replace    bool     `yaml:"replace"` // clear the gateway's triggers first
}

func (s *registerTriggers) Check() error {
	if len(s.Triggers) == 0 {
		return errors.New("triggers: want at least one")
	}
	for i, t := range s.Triggers {
		m, ok := t.(map[string]any)
		if !ok {
			return fmt.Errorf("triggers[%d]: want a mapping with id, when and actions", i)
		}
		if id, _ := m["id"].(string); id == "" {
			return fmt.Errorf("triggers[%d].id: want a trigger id", i)
		}
	}
	return nil
}

func (s *registerTriggers) Refs() []Ref { return []Ref{{"env", s.Env, envTypes}} }

func (s *registerTriggers) Run(ctx context.Context, sc *scope) (Result, error) {
	env, err := sc.env(s.Env)
	if err != nil {
		return Result{}, err
	}
	if s.Replace {
		if _, err := sc.adminOK(ctx, env, http.MethodPost, "/triggers/clear", struct{}{}); err != nil {
			return Result{}, err
		}
	}
	body := map[string]any{"triggers": normalize(s.Triggers)}
	if s.WatchRoles != nil {
		body["watch_roles"] = s.WatchRoles
	}
	b, err := sc.adminOK(ctx, env, http.MethodPost, "/triggers/register", body)
	if err != nil {
		return Result{}, err
	}
	var res struct {
		Added []string `json:"added"`
	}
	_ = json.Unmarshal(b, &res)
	return Result{Outputs: map[string]string{"ids": marshal(res.Added)}}, nil
}

// setToolAccess changes a role's tool gating mid-episode: the disable patterns, then the
// enable ones (so disable ["*"] with enable ["search_*"] leaves only search tools).
type setToolAccess struct {
	Env     string   `yaml:"env" task:"required"`
	Role    string   `yaml:"role"` // "default" if empty
	Enable  []string `yaml:"enable"`
	Disable []string `yaml:"disable"`
}

func (s *setToolAccess) Check() error {
	if len(s.Enable) == 0 && len(s.Disable) == 0 {
		return errors.New("set enable or disable (tool name patterns, '*' matches any run of characters)")
	}
	for _, p := range append(append([]string(nil), s.Enable...), s.Disable...) {
		if p == "" {
			return errors.New("empty tool pattern")
		}
	}
	return nil
}

func (s *setToolAccess) Refs() []Ref { return []Ref{{"env", s.Env, envTypes}} }

func (s *setToolAccess) Run(ctx context.Context, sc *scope) (Result, error) {
	env, err := sc.env(s.Env)
	if err != nil {
		return Result{}, err
	}
	role := s.Role
	if role == "" {
		role = DefaultRole
	}
	var b []byte
	for _, op := range []struct {
		path string
		pats []string
	}{{"/tools/disable", s.Disable}, {"/tools/enable", s.Enable}} {
		if len(op.pats) == 0 {
			continue
		}
		if b, err = sc.adminOK(ctx, env, http.MethodPost, op.path, map[string]any{"role": role, "tools": op.pats}); err != nil {
			return Result{}, err
		}
	}
	var res struct {
		Rules json.RawMessage `json:"rules"`
	}
	_ = json.Unmarshal(b, &res)
	return Result{Outputs: map[string]string{"rules": string(res.Rules)}}, nil
}

// callExtension calls one of a server's own HTTP routes (an extension the card advertises)
// through the gateway's /svc/<server>/ proxy and checks the answer.
type callExtension struct {
	Env    string            `yaml:"env" task:"required"`
	Server string            `yaml:"server" task:"required"`
	Method string            `yaml:"method"` // HTTP method; POST by default
	Path   string            `yaml:"path" task:"required"`
	Query  map[string]string `yaml:"query"`
	Body   any               `yaml:"body"` // sent as JSON
	Expect extensionExpect   `yaml:"expect"`
}

// extensionExpect is what an extension's answer must be; a non-2xx status fails unless
// status says otherwise.
type extensionExpect struct {
	Status   int    `yaml:"status"`
	JSON     any    `yaml:"json"` // a subset of the JSON answer
	Contains string `yaml:"contains"`
}

func (s *callExtension) Check() error {
	switch strings.ToUpper(s.Method) {
	case "", http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete:
	default:
		return fmt.Errorf("method %q: want GET, POST, PUT, PATCH or DELETE", s.Method)
	}
	if strings.Contains(s.Path, "..") || strings.ContainsAny(s.Path, "?#") {
		return fmt.Errorf("path %q: want a plain path (put a query in query)", s.Path)
	}
	if s.Server == "" || strings.Contains(s.Server, "/") {
		return fmt.Errorf("server %q: want a server name of the env", s.Server)
	}
	if s.Expect.Status != 0 && (s.Expect.Status < 100 || s.Expect.Status > 599) {
		return fmt.Errorf("expect.status %d: want an HTTP status", s.Expect.Status)
	}
	return nil
}

func (s *callExtension) Refs() []Ref { return []Ref{{"env", s.Env, envTypes}} }

func (s *callExtension) Run(ctx context.Context, sc *scope) (Result, error) {
	env, err := sc.env(s.Env)
	if err != nil {
		return Result{}, err
	}
	method := strings.ToUpper(s.Method)
	if method == "" {
		method = http.MethodPost
	}
	var body any
	if s.Body != nil {
		body = normalize(s.Body)
	} else if method != http.MethodGet && method != http.MethodDelete {
		body = struct{}{}
	}
	q := url.Values{}
	for k, v := range s.Query {
		q.Set(k, v)
	}
	path := "/svc/" + s.Server + "/" + strings.TrimPrefix(s.Path, "/")
	code, b, err := sc.admin(ctx, env, method, path, q, body)
	if err != nil {
		return Result{}, err
	}
	out := Result{Outputs: map[string]string{"status": strconv.Itoa(code), "body": string(b), "json": ""}}
	var got any
	if json.Unmarshal(b, &got) == nil {
		out.Outputs["json"] = strings.TrimSpace(string(b))
	}
	x := s.Expect
	switch {
	case x.Status != 0 && code != x.Status:
		return out, fmt.Errorf("%s %s: status %d, want %d: %s", method, path, code, x.Status, tail(string(b), 300))
	case x.Status == 0 && (code < 200 || code > 299):
		return out, fmt.Errorf("%s %s: status %d: %s", method, path, code, tail(string(b), 300))
	case x.Contains != "" && !strings.Contains(string(b), x.Contains):
		return out, fmt.Errorf("%s %s: answer lacks %q: %s", method, path, x.Contains, tail(string(b), 300))
	case x.JSON != nil && (out.Outputs["json"] == "" || !subset(normalize(x.JSON), got)):
		return out, fmt.Errorf("%s %s: answer %s does not include %s", method, path, tail(string(b), 300), marshal(x.JSON))
	}
	return out, nil
}

// applyServerConfig sends servers their config through the extensions their cards advertise
// (the anchor's apply_server_config): for each directive, the server's card is read through
// /svc/<service>/, the extension with the directive's uri is found under
// capabilities.extensions, and its method (the named one, else the first listed) is called
// with args.
type applyServerConfig struct {
	Env                  string            `yaml:"env" task:"required"`
	Directives           []configDirective `yaml:"directives" task:"required"`
	TolerateUnadvertised bool              `yaml:"tolerate_unadvertised"` // skip a server that does not advertise the uri
}

// configDirective is one config extension call on one server.
type configDirective struct {
	Service string         `yaml:"service" task:"required"` // the server's name in the env
	URI     string         `yaml:"uri" task:"required"`     // the extension's card URI
	Method  string         `yaml:"method"`                  // the extension method; the first listed if empty
	Args    map[string]any `yaml:"args"`
}

func (s *applyServerConfig) Check() error {
	if len(s.Directives) == 0 {
		return errors.New("directives: want at least one")
	}
	for i, d := range s.Directives {
		if d.Service == "" || strings.Contains(d.Service, "/") {
			return fmt.Errorf("directives[%d].service %q: want a server name of the env", i, d.Service)
		}
		if d.URI == "" {
			return fmt.Errorf("directives[%d].uri: want the extension's URI", i)
		}
	}
	return nil
}

func (s *applyServerConfig) Refs() []Ref { return []Ref{{"env", s.Env, envTypes}} }

// cardExtension is an extension as a card advertises it (the anchor's shape).
type cardExtension struct {
	URI    string `json:"uri"`
	Params struct {
		Endpoint string `json:"endpoint"`
		Methods  map[string]struct {
			Method   string `json:"method"`
			Endpoint string `json:"endpoint"`
		} `json:"methods"`
	} `json:"params"`
}

func (s *applyServerConfig) Run(ctx context.Context, sc *scope) (Result, error) {
	env, err := sc.env(s.Env)
	if err != nil {
		return Result{}, err
	}
	applied, skipped := []any{}, []any{}
	result := func() Result {
		return Result{Outputs: map[string]string{"applied": marshal(applied), "skipped": marshal(skipped)}}
	}
	cards := map[string][]cardExtension{}
	for i, d := range s.Directives {
		exts, ok := cards[d.Service]
		if !ok {
			b, err := sc.adminOK(ctx, env, http.MethodGet, "/svc/"+d.Service+envproto.CardPath, nil)
			if err != nil {
				return result(), fmt.Errorf("directives[%d]: card of %s: %w", i, d.Service, err)
			}
			var card struct {
				Capabilities struct {
					Extensions []cardExtension `json:"extensions"`
				} `json:"capabilities"`
			}
			if err := json.Unmarshal(b, &card); err != nil {
				return result(), fmt.Errorf("directives[%d]: card of %s: %w", i, d.Service, err)
			}
			exts = card.Capabilities.Extensions
			cards[d.Service] = exts
		}
		verb, endpoint, err := extensionCall(exts, d)
		if err != nil {
			if s.TolerateUnadvertised && errors.Is(err, errUnadvertised) {
				skipped = append(skipped, map[string]any{"service": d.Service, "uri": d.URI, "reason": err.Error()})
				continue
			}
			return result(), fmt.Errorf("directives[%d]: %w", i, err)
		}
		var body any
		q := url.Values{}
		if verb == http.MethodGet {
			for k, v := range d.Args {
				q.Set(k, fmt.Sprint(v))
			}
		} else {
			body = normalize(d.Args)
			if d.Args == nil {
				body = struct{}{}
			}
		}
		path := "/svc/" + d.Service + "/" + strings.TrimPrefix(endpoint, "/")
		code, b, err := sc.admin(ctx, env, verb, path, q, body)
		if err != nil {
			return result(), fmt.Errorf("directives[%d]: %w", i, err)
		}
		if code < 200 || code > 299 {
			return result(), fmt.Errorf("directives[%d]: %s on %s: %s %s answered %d: %s", i, d.URI, d.Service, verb, endpoint, code, tail(string(b), 300))
		}
		var res any
		_ = json.Unmarshal(b, &res)
		applied = append(applied, map[string]any{"service": d.Service, "uri": d.URI, "args": normalize(d.Args), "result": res})
	}
	return result(), nil
}

// errUnadvertised marks a directive whose server does not advertise its extension.
var errUnadvertised = errors.New("extension not advertised")

// extensionCall finds the HTTP verb and endpoint of directive d's extension method.
func extensionCall(exts []cardExtension, d configDirective) (verb, endpoint string, err error) {
	var advertised []string
	for _, e := range exts {
		advertised = append(advertised, e.URI)
		if e.URI != d.URI {
			continue
		}
		name := d.Method
		if name == "" && len(e.Params.Methods) > 0 {
			// The anchor takes the first listed; a JSON object has no order once decoded, so
			// take the first by name for a stable choice and say so in the error when ambiguous.
			names := make([]string, 0, len(e.Params.Methods))
			for n := range e.Params.Methods {
				names = append(names, n)
			}
			if len(names) > 1 {
				return "", "", fmt.Errorf("%s on %s lists methods %v: name one in method", d.URI, d.Service, names)
			}
			name = names[0]
		}
		verb, endpoint = http.MethodPost, e.Params.Endpoint
		if name != "" {
			m, ok := e.Params.Methods[name]
			if !ok {
				return "", "", fmt.Errorf("%s on %s has no method %q", d.URI, d.Service, name)
			}
			if m.Method != "" {
				verb = strings.ToUpper(m.Method)
			}
			if m.Endpoint != "" {
				endpoint = m.Endpoint
			}
		}
		if endpoint == "" {
			return "", "", fmt.Errorf("%s on %s advertises no endpoint", d.URI, d.Service)
		}
		return verb, endpoint, nil
	}
	return "", "", fmt.Errorf("%w: %s on %s (advertised: %v)", errUnadvertised, d.URI, d.Service, advertised)
}
