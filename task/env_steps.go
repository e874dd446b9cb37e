package task

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/envproto"
)

// EnvDeployer deploys env files behind a gateway; package deploy implements it. Implementations
// must be safe for concurrent use, record everything they create in the ledger (labelled with
// DeployOptions.Run) before creating it, and clean up after a failed Deploy themselves.
type EnvDeployer interface {
	// Deploy deploys the env file and returns once its gateway serves its card.
	Deploy(ctx context.Context, envFile string, opts DeployOptions) (DeployedEnv, error)
	// Teardown tears down the deployment with id and returns a verified receipt. It is
	// idempotent: a deployment already torn down yields a clean receipt.
	Teardown(ctx context.Context, deploymentID string) (agentenv.Receipt, error)
}

// DeployOptions tune one deployment.
type DeployOptions struct {
	Provider string        // provider or comma chain; the deployer's default if empty
	Run      string        // run id every sandbox of the deployment is labelled with
	TTL      time.Duration // lifetime until gc may remove it; the deployer's default if zero
	// Pinned and Logins are the Runner's: the env's images pinned by digest, and the login
	// that pulls them (deploy.Options' of the same names).
	Pinned map[string]string
	Logins agentenv.Logins
}

// DeployedEnv is a deployed env as a task sees it. Token, Tokens and DatabaseURL are secrets:
// steps use them, records never hold them.
type DeployedEnv struct {
	ID         string // deployment id
	GatewayURL string // the gateway's /mcp URL
	Token      string // the gateway's admin bearer token: verifier steps and the runner use it
	// Tokens maps each role of the env (its gateway.roles and "default") to its role-bound
	// token, the only kind an agent is handed. Nil for a deployer without role tokens.
	Tokens      map[string]string
	DatabaseURL string   // host-reachable URL of the service DB as its read-only verifier role; empty if none
	Records     []string // ledger record ids of the deployment's sandboxes
	// Queued is how long the deploy waited for admission; Ready how long it took from
	// admission until ready. Both are zero for a deployer that does not say.
	Queued, Ready time.Duration
}

// DefaultRole is the gateway role of a caller that names none.
const DefaultRole = "default"

// TokenFor returns the role-bound token of role (DefaultRole's for ""), or "" if the env has
// none for it.
func (e DeployedEnv) TokenFor(role string) string {
	if role == "" {
		role = DefaultRole
	}
	return e.Tokens[role]
}

// envTypes are the steps an env field names: a deployed env, or tools served by this process.
var envTypes = []string{TypeDeployEnv, TypeServeTools}

// deployEnv deploys an env file through the Runner's EnvDeployer.
type deployEnv struct {
	File     string `yaml:"file" task:"required"` // the env file, relative to the task file
	Provider string `yaml:"provider"`
	TTL      string `yaml:"ttl"`
}

func (s *deployEnv) Check() error {
	if s.TTL != "" {
		if d, err := time.ParseDuration(s.TTL); err != nil || d <= 0 {
			return fmt.Errorf("ttl: want a positive duration such as \"30m\", got %q", s.TTL)
		}
	}
	return nil
}

func (s *deployEnv) Refs() []Ref { return nil }

func (s *deployEnv) Run(ctx context.Context, sc *scope) (Result, error) {
	dep := sc.e.r.Deployer
	if dep == nil {
		return Result{}, fmt.Errorf("deploy_env needs an env deployer, and none is configured: %w", agentenv.ErrInvalid)
	}
	ttl, _ := time.ParseDuration(s.TTL)
	prov := s.Provider
	if prov == "" {
		prov = sc.e.opts.Provider
	}
	env, err := dep.Deploy(ctx, sc.path(s.File), DeployOptions{Provider: prov, Run: sc.e.id, TTL: ttl, Pinned: sc.e.r.Pinned, Logins: sc.e.r.Logins})
	if env.ID != "" {
		// Tracked even on error, so the episode's teardown finds it.
		sc.secret(env.Token)
		for _, t := range env.Tokens {
			sc.secret(t)
		}
		sc.secret(env.DatabaseURL)
		e := sc.e
		e.mu.Lock()
		e.envs[sc.s.ID] = &envRef{DeployedEnv: env}
		e.envOrder = append(e.envOrder, sc.s.ID)
		e.mu.Unlock()
	}
	if err != nil {
		return Result{}, fmt.Errorf("deploy %s: %w", s.File, err)
	}
	return Result{Outputs: map[string]string{
		"deployment_id": env.ID, "gateway_url": env.GatewayURL, "database_url": env.DatabaseURL,
		"records": marshal(env.Records), "queue_wait": env.Queued.Round(time.Millisecond).String(), "ready_after": env.Ready.Round(time.Millisecond).String()}}, nil
}

// loadData resets an env's data and adds parts, through the gateway's data plane.
type loadData struct {
	Env    string     `yaml:"env" task:"required"` // the deploy_env step
	Server string     `yaml:"server"`              // the server whose data plane; needed when several have one
	Reset  *bool      `yaml:"reset"`               // data/reset first; true by default
	Parts  []partSpec `yaml:"parts"`
}

// partSpec is one part to add: exactly one of text, data or file (a path relative to the task
// file, sent inline).
type partSpec struct {
	Text string `yaml:"text"`
	Data any    `yaml:"data"`
	File string `yaml:"file"`
}

func (s *loadData) Check() error {
	for i, p := range s.Parts {
		n := 0
		for _, set := range []bool{p.Text != "", p.Data != nil, p.File != ""} {
			if set {
				n++
			}
		}
		if n != 1 {
			return fmt.Errorf("parts[%d]: set exactly one of text, data or file", i)
		}
	}
	return nil
}

func (s *loadData) Refs() []Ref { return []Ref{{"env", s.Env, envTypes}} }

func (s *loadData) Run(ctx context.Context, sc *scope) (Result, error) {
	env, err := sc.env(s.Env)
	if err != nil {
		return Result{}, err
	}
	parts := make([]envproto.Part, 0, len(s.Parts))
	for i, p := range s.Parts {
		switch {
		case p.Text != "":
			parts = append(parts, envproto.Part{Kind: "text", Text: p.Text})
		case p.Data != nil:
			parts = append(parts, envproto.Part{Kind: "data", Data: json.RawMessage(marshal(p.Data))})
		default:
			file, err := sc.within(fmt.Sprintf("parts[%d].file", i), p.File)
			if err != nil {
				return Result{}, err
			}
			b, err := os.ReadFile(file)
			if err != nil {
				return Result{}, fmt.Errorf("part: %w", err)
			}
			parts = append(parts, envproto.Part{Kind: "file", File: &envproto.FilePart{Name: filepath.Base(p.File), Bytes: b}})
		}
	}
	if s.Reset == nil || *s.Reset {
		if err := sc.dataCall(ctx, env, s.Server, envproto.MethodReset, struct{}{}, nil); err != nil {
			return Result{}, err
		}
	}
	if len(parts) > 0 {
		if err := sc.dataCall(ctx, env, s.Server, envproto.MethodAdd, envproto.AddParams{Parts: parts}, nil); err != nil {
			return Result{}, err
		}
	}
	return Result{Outputs: map[string]string{"parts": strconv.Itoa(len(parts))}}, nil
}

// callTool calls one tool through the gateway.
type callTool struct {
	Env        string         `yaml:"env" task:"required"`
	Tool       string         `yaml:"tool" task:"required"`
	Arguments  map[string]any `yaml:"arguments"`
	AllowError bool           `yaml:"allow_error"` // a tool error result does not fail the step
}

func (s *callTool) Check() error { return nil }

func (s *callTool) Refs() []Ref { return []Ref{{"env", s.Env, envTypes}} }

func (s *callTool) Run(ctx context.Context, sc *scope) (Result, error) {
	tc, err := sc.callTool(ctx, s.Env, s.Tool, s.Arguments)
	if err != nil {
		return Result{}, err
	}
	out := Result{Outputs: map[string]string{"text": tc.Text, "json": tc.JSON, "is_error": strconv.FormatBool(tc.IsError)}}
	if tc.IsError && !s.AllowError {
		return out, fmt.Errorf("tool %s returned an error: %s", s.Tool, tail(tc.Text, 300))
	}
	return out, nil
}

// callTool connects to the env of step envStep, calls one tool and closes the session.
func (sc *scope) callTool(ctx context.Context, envStep, tool string, args map[string]any) (toolCall, error) {
	env, err := sc.env(envStep)
	if err != nil {
		return toolCall{}, err
	}
	cs, err := sc.connect(ctx, env.GatewayURL, env.Token)
	if err != nil {
		return toolCall{}, err
	}
	defer cs.Close()
	return callOne(ctx, cs, tool, args)
}

// toolResult calls a tool through the gateway and checks its result.
type toolResult struct {
	Env       string         `yaml:"env" task:"required"`
	Tool      string         `yaml:"tool" task:"required"`
	Arguments map[string]any `yaml:"arguments"`
	Expect    toolExpect     `yaml:"expect" task:"required"`
}

// toolExpect is what a tool result must be; every field set is a row.
type toolExpect struct {
	Contains string  `yaml:"contains"` // in the text content
	Regex    string  `yaml:"regex"`
	Equals   *string `yaml:"equals"`
	JSON     any     `yaml:"json"`     // a subset of the structured content
	IsError  *bool   `yaml:"is_error"` // the result must (not) be a tool error; an error result fails if unset
}

func (s *toolResult) Check() error {
	x := s.Expect
	if x.Contains == "" && x.Regex == "" && x.Equals == nil && x.JSON == nil && x.IsError == nil {
		return errors.New("expect: set contains, regex, equals, json or is_error")
	}
	return checkRegex("expect.regex", x.Regex)
}

func (s *toolResult) Refs() []Ref { return []Ref{{"env", s.Env, envTypes}} }

func (s *toolResult) Run(ctx context.Context, sc *scope) (Result, error) {
	tc, err := sc.callTool(ctx, s.Env, s.Tool, s.Arguments)
	if err != nil {
		return Result{}, err
	}
	x := s.Expect
	var rows []Row
	switch {
	case x.IsError != nil:
		rows = append(rows, Row{Check: "is_error of " + s.Tool, Expected: strconv.FormatBool(*x.IsError), Got: strconv.FormatBool(tc.IsError), Pass: tc.IsError == *x.IsError})
	case tc.IsError:
		// An error result is never a partial pass of the other checks.
		return verdict([]Row{{Check: s.Tool + " succeeds", Expected: "a result", Got: "error: " + clip(tc.Text)}}), nil
	}
	rows = append(rows, match(s.Tool+" text", tc.Text, matcher{Contains: x.Contains, Regex: x.Regex, Equals: x.Equals})...)
	if x.JSON != nil {
		var got any
		ok := tc.JSON != "" && json.Unmarshal([]byte(tc.JSON), &got) == nil && subset(normalize(x.JSON), got)
		rows = append(rows, Row{Check: s.Tool + " structured content includes", Expected: marshal(x.JSON), Got: clip(tc.JSON), Pass: ok})
	}
	return verdict(rows), nil
}

// dataGet calls data/get through the gateway and compares the parts with expected ones.
type dataGet struct {
	Env    string     `yaml:"env" task:"required"`
	Server string     `yaml:"server"` // the server whose data plane; needed when several have one
	Query  any        `yaml:"query"`
	Expect dataExpect `yaml:"expect" task:"required"`
}

// dataExpect is what data/get must return; every field set is a row (one per expected part).
type dataExpect struct {
	Count    *int             `yaml:"count"`    // exactly this many parts
	Parts    []map[string]any `yaml:"parts"`    // each a subset of some part, e.g. {kind: data, data: {title: x}}
	Contains string           `yaml:"contains"` // in some part's text or data
}

func (s *dataGet) Check() error {
	if s.Expect.Count == nil && len(s.Expect.Parts) == 0 && s.Expect.Contains == "" {
		return errors.New("expect: set count, parts or contains")
	}
	return nil
}

func (s *dataGet) Refs() []Ref { return []Ref{{"env", s.Env, envTypes}} }

func (s *dataGet) Run(ctx context.Context, sc *scope) (Result, error) {
	env, err := sc.env(s.Env)
	if err != nil {
		return Result{}, err
	}
	params := envproto.GetParams{}
	if s.Query != nil {
		params.Query = json.RawMessage(marshal(s.Query))
	}
	var res envproto.GetResult
	if err := sc.dataCall(ctx, env, s.Server, envproto.MethodGet, params, &res); err != nil {
		return Result{}, err
	}
	var got []any
	if err := json.Unmarshal([]byte(marshal(res.Parts)), &got); err != nil {
		return Result{}, fmt.Errorf("data/get: %w", err)
	}
	x := s.Expect
	var rows []Row
	if x.Count != nil {
		rows = append(rows, Row{Check: "number of parts", Expected: strconv.Itoa(*x.Count), Got: strconv.Itoa(len(got)), Pass: len(got) == *x.Count})
	}
	for i, want := range x.Parts {
		w := normalize(want)
		found := false
		for _, g := range got {
			if subset(w, g) {
				found = true
				break
			}
		}
		rows = append(rows, Row{Check: fmt.Sprintf("parts[%d] is returned", i), Expected: marshal(want), Got: fmt.Sprintf("%d parts", len(got)), Pass: found})
	}
	if x.Contains != "" {
		text := ""
		for _, p := range res.Parts {
			text += p.Text + "\n" + string(p.Data) + "\n"
		}
		rows = append(rows, match("parts", text, matcher{Contains: x.Contains})...)
	}
	return verdict(rows), nil
}

// normalize round-trips v through JSON so that it compares with decoded JSON.
func normalize(v any) any {
	var out any
	if err := json.Unmarshal([]byte(marshal(v)), &out); err != nil {
		return v
	}
	return out
}

// subset reports whether want is included in got: objects by key (recursively), lists by each
// wanted element matching some element, scalars by equality.
func subset(want, got any) bool {
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			return false
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok || !subset(wv, gv) {
				return false
			}
		}
		return true
	case []any:
		g, ok := got.([]any)
		if !ok {
			return false
		}
		for _, wv := range w {
			found := false
			for _, gv := range g {
				if subset(wv, gv) {
					found = true
					break
				}
			}
			if !found {
				return false
			}
		}
		return true
	default:
		return marshal(want) == marshal(got)
	}
}
