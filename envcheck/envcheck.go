// Package envcheck checks that a running env server speaks the env protocol (package envproto,
// the anchor's): its card, its MCP tools and a data plane round trip. `agentenv env validate
// --url` prints its report.
//
// The data plane checks reset the server's data: validate a server whose data you can lose, or
// pass [Options.ReadOnly]. Before resetting, [Run] reads the data with data/get and, at the end,
// loads it back (reset, then add), as the anchor's loader does.
package envcheck

import (
	"bytes"
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
	"github.com/agentenv/agentenv/mcpclient"
)

// Statuses of a check.
const (
	Pass = "pass"
	Fail = "fail"
	Warn = "warn" // passes, but uses something deprecated or unusual
	Skip = "skip" // not run: what it needs failed, or the server does not offer it
)

// Check is the outcome of one check.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// Report is the outcome of [Run].
type Report struct {
	URL    string  `json:"url"`
	OK     bool    `json:"ok"` // no check failed
	Checks []Check `json:"checks"`
}

// Failed returns the names of the checks that failed.
func (r Report) Failed() []string {
	var out []string
	for _, c := range r.Checks {
		if c.Status == Fail {
			out = append(out, c.Name)
		}
	}
	return out
}

// Options configure [Run]. Zero values are defaults.
type Options struct {
	// HTTP is the client every request goes through; default a client of its own.
	HTTP *http.Client
	// Token is sent as a bearer token (a gateway's).
	Token string
	// Part is what data/add is probed with; default a text part.
	Part *envproto.Part
	// ReadOnly skips data/reset and data/add (and the restore).
	ReadOnly bool
	// Timeout bounds each request; default 30 s.
	Timeout time.Duration
}

// maxAnswer bounds a card or data plane answer read by a check.
const maxAnswer = 64 << 20

// BaseURL returns the server's base URL from what a user gives: the base itself, its MCP
// endpoint (…/mcp) or its card URL.
func BaseURL(raw string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(raw))
	if err != nil {
		return "", fmt.Errorf("url %q: %w", raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return "", fmt.Errorf("url %q: want http(s)://HOST[:PORT][/PATH]", raw)
	}
	p := strings.TrimSuffix(u.Path, "/")
	p = strings.TrimSuffix(p, envproto.CardPath)
	p = strings.TrimSuffix(p, envproto.MCPPath)
	u.Path, u.RawQuery, u.Fragment = p, "", ""
	return strings.TrimSuffix(u.String(), "/"), nil
}

// Run checks the env server at base (see [BaseURL]) and returns what passed and what did not.
// It returns an error only for a base it cannot parse.
func Run(ctx context.Context, base string, opts Options) (Report, error) {
	base, err := BaseURL(base)
	if err != nil {
		return Report{}, err
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 30 * time.Second
	}
	hc := mcpclient.HTTPClient(opts.HTTP, opts.Token)
	r := &run{ctx: ctx, base: base, opts: opts, hc: hc, report: Report{URL: base}}
	r.all()
	r.report.OK = len(r.report.Failed()) == 0
	return r.report, nil
}

type run struct {
	prefix string // names the child whose data plane is being checked: "NAME/"
	ctx    context.Context
	base   string
	opts   Options
	hc     *http.Client
	report Report
}

func (r *run) add(name, status, format string, args ...any) {
	r.report.Checks = append(r.report.Checks, Check{Name: r.prefix + name, Status: status, Detail: fmt.Sprintf(format, args...)})
}

func (r *run) all() {
	card, ok := r.card()
	mcpURL := r.base + envproto.MCPPath
	if ok {
		mcpURL = r.resolve(card.MCPURL())
	}
	tools := r.mcp(mcpURL)
	if ok {
		r.cardTools(card, tools)
		r.data(card)
	} else {
		r.add("card.tools", Skip, "no card")
		r.add("data", Skip, "no card")
	}
}

// resolve resolves a card path against the card's URL.
func (r *run) resolve(ref string) string {
	cu, err := url.Parse(r.base + envproto.CardPath)
	if err != nil {
		return ref
	}
	ru, err := url.Parse(ref)
	if err != nil {
		return ref
	}
	return cu.ResolveReference(ru).String()
}

// card fetches and checks the card.
func (r *run) card() (envproto.Card, bool) {
	var card envproto.Card
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.base+envproto.CardPath, nil)
	if err != nil {
		r.add("card", Fail, "%v", err)
		return card, false
	}
	req.Header.Set("Accept", "application/json")
	resp, err := r.hc.Do(req)
	if err != nil {
		r.add("card", Fail, "GET %s: %v", envproto.CardPath, err)
		return card, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		r.add("card", Fail, "GET %s: %v", envproto.CardPath, err)
		return card, false
	}
	if resp.StatusCode != http.StatusOK {
		hint := ""
		if resp.StatusCode == http.StatusNotFound {
			hint = " (a server without a card is a legacy server: MCP only)"
		}
		r.add("card", Fail, "GET %s: %s%s", envproto.CardPath, resp.Status, hint)
		return card, false
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		r.add("card", Fail, "not a JSON object: %v", err)
		return card, false
	}
	if err := json.Unmarshal(body, &card); err != nil {
		r.add("card", Fail, "decode: %v", err)
		return card, false
	}
	var problems []string
	if card.Name == "" {
		problems = append(problems, "name is missing or empty")
	}
	if c, ok := raw["capabilities"]; ok && !bytes.HasPrefix(bytes.TrimSpace(c), []byte("{")) {
		problems = append(problems, "capabilities is not an object")
	}
	for _, op := range card.Capabilities.Operations {
		if !slices.Contains([]string{envproto.MethodReset, envproto.MethodAdd, envproto.MethodGet}, op) {
			problems = append(problems, fmt.Sprintf("operations: unknown method %q", op))
		}
	}
	seen := map[string]bool{}
	for i, t := range card.Capabilities.Tools {
		if t.Name == "" {
			problems = append(problems, fmt.Sprintf("capabilities.tools[%d]: no name", i))
		}
		if seen[t.Name] {
			problems = append(problems, fmt.Sprintf("capabilities.tools[%d]: %q listed twice", i, t.Name))
		}
		seen[t.Name] = true
		if s := bytes.TrimSpace(t.InputSchema); len(s) > 0 && !bytes.Equal(s, []byte("null")) && s[0] != '{' {
			problems = append(problems, fmt.Sprintf("capabilities.tools[%d].inputSchema is not an object", i))
		}
	}
	for i, e := range card.Capabilities.Extensions {
		if e.URI == "" {
			problems = append(problems, fmt.Sprintf("capabilities.extensions[%d]: no uri", i))
		}
	}
	if len(problems) > 0 {
		r.add("card", Fail, "%s", strings.Join(problems, "; "))
		return card, false
	}
	r.add("card", Pass, "%s: protocol %s, %d tool(s), %d extension(s), data plane %s",
		card.Name, card.ProtocolVersion, len(card.Capabilities.Tools), len(card.Capabilities.Extensions), methodsText(card))

	var warns []string
	if len(card.Deprecated) > 0 {
		warns = append(warns, "deprecated agentenv fields "+strings.Join(card.Deprecated, ", ")+" (use the anchor's: protocolVersion, capabilities.tools, url, additionalInterfaces, capabilities.extensions, children_environments)")
	}
	if card.ProtocolVersion != envproto.Version {
		warns = append(warns, fmt.Sprintf("protocolVersion %q, want %q", card.ProtocolVersion, envproto.Version))
	}
	if card.Capabilities.Operations == nil && card.URL != "" {
		warns = append(warns, "no capabilities.operations: read as a card from before they were advertised (all three methods)")
	}
	if _, ok := raw["additionalInterfaces"]; !ok {
		warns = append(warns, "no additionalInterfaces: MCP is looked for at /mcp by convention")
	}
	if len(warns) > 0 {
		r.add("card.shape", Warn, "%s", strings.Join(warns, "; "))
	} else {
		r.add("card.shape", Pass, "the anchor's field names only")
	}
	return card, true
}

func methodsText(c envproto.Card) string {
	if !c.HasDataPlane() {
		return "none"
	}
	return c.URL + " (" + strings.Join(c.Methods(), ", ") + ")"
}

// mcp connects, lists the tools and returns their names (nil when it failed).
func (r *run) mcp(mcpURL string) []string {
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.Timeout)
	defer cancel()
	c := mcpclient.Client{Name: "agentenv-validate", Version: envproto.Version, HTTP: r.opts.HTTP, NoStandaloneSSE: true}
	cs, err := c.Connect(ctx, mcpURL, r.opts.Token)
	if err != nil {
		r.add("mcp", Fail, "initialize at %s: %v", mcpURL, err)
		return nil
	}
	defer cs.Close()
	var names []string
	for t, err := range cs.Tools(ctx, nil) {
		if err != nil {
			r.add("mcp", Fail, "tools/list at %s: %v", mcpURL, err)
			return nil
		}
		names = append(names, t.Name)
	}
	if names == nil {
		names = []string{}
	}
	r.add("mcp", Pass, "%d tool(s) at %s", len(names), mcpURL)
	return names
}

// cardTools checks that every tool the card lists is served over MCP.
func (r *run) cardTools(card envproto.Card, served []string) {
	if served == nil {
		r.add("card.tools", Skip, "MCP failed")
		return
	}
	var missing, unlisted []string
	for _, t := range card.Capabilities.Tools {
		if !slices.Contains(served, t.Name) {
			missing = append(missing, t.Name)
		}
	}
	for _, name := range served {
		if !slices.ContainsFunc(card.Capabilities.Tools, func(t envproto.Tool) bool { return t.Name == name }) {
			unlisted = append(unlisted, name)
		}
	}
	switch {
	case len(missing) > 0:
		r.add("card.tools", Fail, "on the card but not served over MCP: %s", strings.Join(missing, ", "))
	case len(unlisted) > 0:
		r.add("card.tools", Warn, "served over MCP but not on the card: %s", strings.Join(unlisted, ", "))
	default:
		r.add("card.tools", Pass, "the card lists the %d tool(s) MCP serves", len(served))
	}
}

// data checks the card's data plane; a composed card (a gateway's) without one of its own has
// each child's with a data plane checked at the child's url, the checks named "CHILD/data...".
func (r *run) data(card envproto.Card) {
	if card.HasDataPlane() {
		r.dataPlane(card)
		return
	}
	checked := false
	for _, child := range card.Children {
		if child.HasDataPlane() && child.Name != "" {
			r.prefix = child.Name + "/"
			r.dataPlane(child)
			r.prefix = ""
			checked = true
		}
	}
	if !checked {
		r.add("data", Skip, "the card advertises no data plane")
	}
}

// dataPlane checks one data plane: JSON-RPC errors, then the round trip.
func (r *run) dataPlane(card envproto.Card) {
	target := r.resolve(card.URL)
	ops := card.Methods()

	// JSON-RPC error handling: HTTP 200 and the right code.
	if _, rpcErr, err := r.post(target, []byte(`{"jsonrpc":"2.0","id":1,`)); err != nil {
		r.add("data.errors", Fail, "%v", err)
	} else if rpcErr == nil || rpcErr.Code != envproto.CodeParseError {
		r.add("data.errors", Fail, "a body that is not JSON: got %s, want error %d", errText(rpcErr), envproto.CodeParseError)
	} else if _, rpcErr, err := r.call(target, "data/none", nil); err != nil {
		r.add("data.errors", Fail, "%v", err)
	} else if rpcErr == nil || rpcErr.Code != envproto.CodeMethodNotFound {
		r.add("data.errors", Fail, "an unknown method: got %s, want error %d", errText(rpcErr), envproto.CodeMethodNotFound)
	} else {
		r.add("data.errors", Pass, "parse error and unknown method answered with HTTP 200 and JSON-RPC %d, %d", envproto.CodeParseError, envproto.CodeMethodNotFound)
	}

	has := func(m string) bool { return slices.Contains(ops, m) }
	var saved []envproto.Part
	var savedOK bool
	if has(envproto.MethodGet) {
		parts, ok := r.get("data.get", target)
		saved, savedOK = parts, ok
	} else {
		r.add("data.get", Skip, "not among the operations")
	}
	if r.opts.ReadOnly {
		r.add("data.reset", Skip, "read-only")
		r.add("data.add", Skip, "read-only")
		return
	}
	if has(envproto.MethodReset) {
		if _, rpcErr, err := r.call(target, envproto.MethodReset, struct{}{}); err != nil || rpcErr != nil {
			r.add("data.reset", Fail, "%s", failText(err, rpcErr))
			return
		}
		r.add("data.reset", Pass, "")
	} else {
		r.add("data.reset", Skip, "not among the operations")
	}
	if !has(envproto.MethodAdd) {
		r.add("data.add", Skip, "not among the operations")
		return
	}
	before := -1
	if has(envproto.MethodGet) {
		if parts, ok := r.quietGet(target); ok {
			before = len(parts)
		}
	}
	probes := []envproto.Part{
		{Kind: envproto.KindText, Text: "agentenv env validate probe"},
		{Kind: envproto.KindData, Data: json.RawMessage(`{"agentenv_validate":"probe"}`)},
	}
	if r.opts.Part != nil {
		probes = []envproto.Part{*r.opts.Part}
	}
	var refused []string
	added := false
	for _, probe := range probes {
		_, rpcErr, err := r.call(target, envproto.MethodAdd, envproto.AddParams{Parts: []envproto.Part{probe}})
		if err == nil && rpcErr == nil {
			r.add("data.add", Pass, "a %s part", probe.Kind)
			added = true
			break
		}
		if err == nil && rpcErr.Code == envproto.CodeInvalidParams && r.opts.Part == nil {
			refused = append(refused, fmt.Sprintf("a %s part (%s)", probe.Kind, rpcErr.Message))
			continue
		}
		r.add("data.add", Fail, "a %s part: %s", probe.Kind, failText(err, rpcErr))
		break
	}
	if !added && len(refused) == len(probes) {
		r.add("data.add", Warn, "refused, as invalid params, %s: pass a part the server takes with --part FILE", strings.Join(refused, " and "))
		r.add("data.roundtrip", Skip, "no probe part was taken")
	}
	if added && has(envproto.MethodGet) {
		if parts, ok := r.get("data.roundtrip", target); ok && before >= 0 {
			if len(parts) <= before {
				r.add("data.roundtrip", Fail, "data/get returned %d part(s) after data/add, %d before it", len(parts), before)
			} else {
				r.add("data.roundtrip", Pass, "data/get returned %d part(s) after data/add, %d before it", len(parts), before)
			}
		}
	}
	r.restore(target, ops, saved, savedOK)
}

// restore loads back what the first data/get returned: reset, then add.
func (r *run) restore(target string, ops []string, saved []envproto.Part, ok bool) {
	if !ok || !slices.Contains(ops, envproto.MethodReset) {
		r.add("data.restore", Skip, "nothing read to restore")
		return
	}
	if _, rpcErr, err := r.call(target, envproto.MethodReset, struct{}{}); err != nil || rpcErr != nil {
		r.add("data.restore", Fail, "data/reset: %s", failText(err, rpcErr))
		return
	}
	if len(saved) == 0 {
		r.add("data.restore", Pass, "the server was empty: reset")
		return
	}
	if _, rpcErr, err := r.call(target, envproto.MethodAdd, envproto.AddParams{Parts: saved}); err != nil || rpcErr != nil {
		r.add("data.restore", Fail, "data/add of the %d part(s) data/get returned: %s", len(saved), failText(err, rpcErr))
		return
	}
	r.add("data.restore", Pass, "%d part(s) loaded back", len(saved))
}

// get calls data/get and records the check name with the parts' validity.
func (r *run) get(name, target string) ([]envproto.Part, bool) {
	raw, rpcErr, err := r.call(target, envproto.MethodGet, struct{}{})
	if err != nil || rpcErr != nil {
		r.add(name, Fail, "data/get: %s", failText(err, rpcErr))
		return nil, false
	}
	var res envproto.GetResult
	if err := json.Unmarshal(raw, &res); err != nil {
		r.add(name, Fail, "data/get result: %v", err)
		return nil, false
	}
	if res.Parts == nil {
		r.add(name, Fail, "data/get result has no parts list")
		return nil, false
	}
	for i := range res.Parts {
		if err := res.Parts[i].Validate(); err != nil {
			r.add(name, Fail, "data/get parts[%d]: %v", i, err)
			return nil, false
		}
	}
	if name == "data.get" {
		r.add(name, Pass, "%d well-formed part(s)", len(res.Parts))
	}
	return res.Parts, true
}

func (r *run) quietGet(target string) ([]envproto.Part, bool) {
	raw, rpcErr, err := r.call(target, envproto.MethodGet, struct{}{})
	if err != nil || rpcErr != nil {
		return nil, false
	}
	var res envproto.GetResult
	if json.Unmarshal(raw, &res) != nil {
		return nil, false
	}
	return res.Parts, true
}

func errText(e *envproto.Error) string {
	if e == nil {
		return "a result"
	}
	return fmt.Sprintf("error %d %q", e.Code, e.Message)
}

func failText(err error, rpcErr *envproto.Error) string {
	if err != nil {
		return err.Error()
	}
	s := errText(rpcErr)
	if len(rpcErr.Data) > 0 {
		s += " data " + string(rpcErr.Data)
	}
	return s
}

// call sends one JSON-RPC request.
func (r *run) call(target, method string, params any) (json.RawMessage, *envproto.Error, error) {
	req := envproto.Request{JSONRPC: "2.0", ID: json.RawMessage("1"), Method: method}
	if params != nil {
		p, err := json.Marshal(params)
		if err != nil {
			return nil, nil, fmt.Errorf("%s: encode params: %w", method, err)
		}
		req.Params = p
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", method, err)
	}
	res, rpcErr, err := r.post(target, body)
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", method, err)
	}
	return res, rpcErr, nil
}

// post sends body to the data plane; the answer must be HTTP 200 with a JSON-RPC response.
func (r *run) post(target string, body []byte) (json.RawMessage, *envproto.Error, error) {
	ctx, cancel := context.WithTimeout(r.ctx, r.opts.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, target, bytes.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := r.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswer))
	if err != nil {
		return nil, nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, nil, fmt.Errorf("POST %s: %s, want 200 (JSON-RPC errors come with HTTP 200)", target, resp.Status)
	}
	var out envproto.Response
	if err := json.Unmarshal(raw, &out); err != nil || out.JSONRPC != "2.0" {
		return nil, nil, fmt.Errorf("POST %s: not a JSON-RPC 2.0 response: %.200s", target, raw)
	}
	if out.Error == nil && len(out.Result) == 0 {
		return nil, nil, fmt.Errorf("POST %s: a response with neither result nor error", target)
	}
	return out.Result, out.Error, nil
}

// Text writes the report as one line per check.
func (rep Report) Text(w io.Writer) error {
	for _, c := range rep.Checks {
		line := fmt.Sprintf("%-5s %-15s %s", strings.ToUpper(c.Status), c.Name, c.Detail)
		if _, err := fmt.Fprintln(w, strings.TrimRight(line, " ")); err != nil {
			return err
		}
	}
	verdict := "conforms"
	if !rep.OK {
		verdict = "does not conform: " + strings.Join(rep.Failed(), ", ") + " failed"
	}
	_, err := fmt.Fprintf(w, "%s %s\n", rep.URL, verdict)
	return err
}
