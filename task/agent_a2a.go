package task

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/agent/a2a"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/spec"
)

// TypeDeployAgent starts an A2A agent in a sandbox of the run's provider.
const TypeDeployAgent = "deploy_agent"

// defaultCardWait is how long deploy_agent waits for its agent's card.
const defaultCardWait = 2 * time.Minute

// checkA2A checks a prompt_agent step whose agent is an A2A agent.
func (s *promptAgent) checkA2A() error {
	if !s.hasPrompt() {
		return errors.New("prompt: an A2A agent needs a prompt")
	}
	if s.Agent.A2A != "" {
		u, err := url.Parse(s.Agent.A2A)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("agent.a2a: want an http(s) URL, got %q", s.Agent.A2A)
		}
	}
	return nil
}

// a2aAgent is the A2A agent a prompt_agent step names: a running one by URL, or the one a
// deploy_agent step started, which reaches the gateway by the address its network gives it.
func (s *promptAgent) a2aAgent(sc *scope) (agent.Agent, error) {
	opts := a2a.Options{Log: sc.log}
	if s.Agent.A2A != "" {
		return a2a.New(s.Agent.A2A, opts), nil
	}
	st := sc.state(s.Agent.Deployed)
	base := st.outputs["url"]
	if base == "" {
		sc.e.mu.Lock()
		why := sc.e.failure(s.Agent.Deployed)
		sc.e.mu.Unlock()
		return nil, fmt.Errorf("step %s started no agent%s", s.Agent.Deployed, why)
	}
	return gatewayAt{a2a.New(base, opts), st.outputs["gateway_url"]}, nil
}

// gatewayAt prompts an agent with the gateway at the URL its sandbox reaches it at, if set.
type gatewayAt struct {
	agent.Agent
	url string
}

func (g gatewayAt) Prompt(ctx context.Context, p agent.Prompt, tr *agent.Trajectory) (agent.Answer, error) {
	if g.url != "" {
		p.Gateway.URL = g.url
	}
	return g.Agent.Prompt(ctx, p, tr)
}

// deployAgent starts an A2A agent in a sandbox through the lifecycle manager, recorded before
// it is created and torn down with the episode, and waits for its card.
type deployAgent struct {
	Provider string   `yaml:"provider"` // provider or comma chain; the run's --provider if empty
	Image    string   `yaml:"image" task:"required"`
	Command  []string `yaml:"command"`
	Port     int      `yaml:"port" task:"required"` // where the agent serves its card and A2A
	// Env is the agent's environment. A value "config:KEY" is the run's setting KEY (such as
	// config:model.base_url), read when the step runs and kept out of the run record.
	Env map[string]string `yaml:"env"`
	// Files are written into the sandbox before it starts: path in the sandbox -> a local file,
	// relative to the task file.
	Files map[string]string `yaml:"files"`
	// Network is a deploy_env step whose private network the agent joins, so that it reaches
	// that env's gateway by name; prompt_agent then hands it the gateway at that address.
	Network  string `yaml:"network"`
	CardWait string `yaml:"card_wait"` // how long to wait for the card; 2m if empty
	TTL      string `yaml:"ttl"`
}

func (s *deployAgent) Check() error {
	if err := checkNoHostEnv(s.Env); err != nil {
		return err
	}
	if s.Port <= 0 || s.Port > 65535 {
		return fmt.Errorf("port: want 1-65535, got %d", s.Port)
	}
	for field, v := range map[string]string{"card_wait": s.CardWait, "ttl": s.TTL} {
		if v == "" {
			continue
		}
		if d, err := time.ParseDuration(v); err != nil || d <= 0 {
			return fmt.Errorf("%s: want a positive duration such as \"2m\", got %q", field, v)
		}
	}
	return nil
}

func (s *deployAgent) Refs() []Ref {
	if s.Network == "" {
		return nil
	}
	return []Ref{{"network", s.Network, []string{TypeDeployEnv}}}
}

func (s *deployAgent) Run(ctx context.Context, sc *scope) (Result, error) {
	m := sc.e.r.Manager
	if m == nil {
		return Result{}, fmt.Errorf("no lifecycle manager configured")
	}
	env, err := s.environment(sc)
	if err != nil {
		return Result{}, err
	}
	sp := agentenv.SandboxSpec{Image: s.Image, Command: s.Command, Env: env, Ports: []int{s.Port}}
	for path, from := range s.Files {
		local, err := sc.within("files", from)
		if err != nil {
			return Result{}, err
		}
		data, err := os.ReadFile(local)
		if err != nil {
			return Result{}, fmt.Errorf("files[%s]: %w", path, err)
		}
		if sp.Files == nil {
			sp.Files = map[string][]byte{}
		}
		sp.Files[path] = data
	}
	prov := s.Provider
	if err := switchesToProcess(sc.e.opts.Provider, prov); err != nil {
		return Result{}, err
	}
	if prov == "" {
		prov = sc.e.opts.Provider
	}
	gatewayURL := ""
	if s.Network != "" {
		env, err := sc.env(s.Network)
		if err != nil {
			return Result{}, err
		}
		rt, err := routeTo(ctx, m.Ledger(), env)
		if err != nil {
			return Result{}, err
		}
		if rt.Network == "" {
			return Result{}, fmt.Errorf("env %s has no private network to join (VM mode?): %w", env.ID, agentenv.ErrInvalid)
		}
		if prov != "" && prov != rt.Provider {
			return Result{}, fmt.Errorf("network: env %s runs on %s, the agent on %s: it joins the env's network only on the same provider", env.ID, rt.Provider, prov)
		}
		port := rt.GatewayPort
		if port == 0 {
			port = spec.DefaultPort
		}
		prov, sp.Network = rt.Provider, rt.Network
		gatewayURL = "http://gateway:" + strconv.Itoa(port) + "/mcp"
	}
	if prov == "" {
		return Result{}, fmt.Errorf("no provider: set provider in the step, give the run one, or name the env's network")
	}
	members, err := m.ParseChain(prov)
	if err != nil {
		return Result{}, err
	}
	ttl, _ := time.ParseDuration(s.TTL)
	req := lifecycle.CreateRequest{Provider: members[0], Run: sc.e.id, Role: agentenv.TaskRole(sc.s.ID), TTL: ttl, Spec: sp}
	rec, sb, err := sc.createSandbox(ctx, members, req)
	if err != nil {
		return Result{}, err
	}
	out := Result{Outputs: map[string]string{"record": rec.ID, "provider": rec.Provider, "sandbox_id": sb.ID, "gateway_url": gatewayURL}}
	addr := sb.Endpoints[strconv.Itoa(s.Port)]
	if addr == "" {
		return out, fmt.Errorf("agent sandbox %s publishes no address for port %d", rec.ID, s.Port)
	}
	base := addr
	if !strings.Contains(base, "://") {
		base = "http://" + base
	}
	out.Outputs["url"] = base
	wait := defaultCardWait
	if s.CardWait != "" {
		wait, _ = time.ParseDuration(s.CardWait)
	}
	card, err := a2a.FetchCard(ctx, &http.Client{}, base, wait)
	if err != nil {
		if logs, lerr := m.Logs(ctx, rec.ID, 20); lerr == nil && strings.TrimSpace(logs) != "" {
			err = fmt.Errorf("%w; its last output: %s", err, tail(logs, 600))
		}
		return out, err
	}
	out.Outputs["name"] = card.Card.Name
	return out, nil
}

// environment is the agent's env with its config: references resolved.
func (s *deployAgent) environment(sc *scope) (map[string]string, error) {
	out := make(map[string]string, len(s.Env))
	for k, v := range s.Env {
		key, ok := strings.CutPrefix(v, "config:")
		if !ok {
			out[k] = v
			continue
		}
		if sc.e.r.Model == nil {
			return nil, fmt.Errorf("env.%s: %s: no settings configured", k, v)
		}
		val, err := sc.e.r.Model.Get(key)
		if err != nil {
			return nil, fmt.Errorf("env.%s: %s: %w", k, key, err)
		}
		sc.secret(val)
		out[k] = val
	}
	return out, nil
}
