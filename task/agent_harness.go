package task

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/agent"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/lifecycle"
)

// Where a harness finds what agentenv hands it, in its sandbox; also in its environment as
// AGENTENV_PROMPT_FILE, AGENTENV_MCP_CONFIG and (if the spec names one) AGENTENV_TRAJECTORY.
const (
	harnessPromptFile = "/agentenv/prompt.txt"
	harnessMCPConfig  = "/agentenv/mcp.json"
)

// DefaultHarnessTimeout is a harness command's wall time when its spec sets none.
const DefaultHarnessTimeout = 10 * time.Minute

// harnessSpec is a command-line agent run in a sandbox next to the env, or in the task's own
// sandbox. A sandbox of its own (Image) runs `sleep infinity` (the image needs a sleep) and
// the command is run in it once the prompt and the MCP config are written; it is torn down
// with the episode. In a deploy_sandbox step's sandbox (In) the same files are written there
// and the command run under `env` with the harness's environment.
type harnessSpec struct {
	Image string `yaml:"image"` // a sandbox of its own from this image; or In
	// In is the deploy_sandbox step whose sandbox the harness runs in; the prompt_agent step's
	// sandbox if empty and the step names one.
	In      string            `yaml:"in"`
	Command []string          `yaml:"command" task:"required"` // argv, run in the sandbox
	Env     map[string]string `yaml:"env"`
	Files   map[string]string `yaml:"files"` // path in the sandbox -> a local file, relative to the task file
	// Upload are local files or folders put in place (as the upload step does) in the same
	// command that runs the harness: a Harbor task's solution/ for its oracle. Only with In.
	Upload []placement `yaml:"upload"`

	TimeoutSeconds float64 `yaml:"timeout_seconds"` // the command's wall time; DefaultHarnessTimeout if 0
	Trajectory     string  `yaml:"trajectory"`      // a file the harness writes in the agent.Line shape, read after it exits
}

// checkHarness checks a prompt_agent step whose agent is a harness.
func (s *promptAgent) checkHarness() error {
	h := s.Agent.Harness
	switch {
	case !s.hasPrompt():
		return errors.New("prompt: a harness agent needs a prompt")
	case len(h.Command) == 0:
		return errors.New("agent.harness.command: want a non-empty argv list")
	case h.TimeoutSeconds < 0:
		return errors.New("agent.harness.timeout_seconds: want a positive number")
	}
	in := s.harnessIn()
	switch {
	case h.Image != "" && in != "":
		return errors.New("agent.harness.image: a harness runs in a sandbox of its own (image) or in a deploy_sandbox step's (agent.harness.in, or the step's sandbox), not both")
	case h.Image == "" && in == "":
		return errors.New("agent.harness: name an image for a sandbox of its own, or in: a deploy_sandbox step to run in")
	case h.In != "" && s.Sandbox != "" && h.In != s.Sandbox:
		return fmt.Errorf("agent.harness.in: %q is not the step's sandbox %q", h.In, s.Sandbox)
	case h.Image != "" && s.Env == "":
		return errors.New("env: a harness in a sandbox of its own works through an env: set env, or run it in a deploy_sandbox step's sandbox (agent.harness.in)")
	case h.Image != "" && len(h.Upload) > 0:
		return errors.New("agent.harness.upload: uploads are put in a deploy_sandbox step's sandbox (agent.harness.in); a sandbox of its own takes files")
	}
	return checkPlacements("agent.harness.upload", h.Upload)
}

// harnessIn is the deploy_sandbox step a harness runs in; "" for a sandbox of its own.
func (s *promptAgent) harnessIn() string {
	if s.Agent.Harness.In != "" {
		return s.Agent.Harness.In
	}
	return s.Sandbox
}

// harnessAgent is the harness agent a prompt_agent step names.
func (s *promptAgent) harnessAgent(sc *scope, env DeployedEnv) (agent.Agent, error) {
	if sc.e.r.Manager == nil {
		return nil, fmt.Errorf("no lifecycle manager configured")
	}
	return &harness{spec: *s.Agent.Harness, in: s.harnessIn(), sc: sc, env: env, step: sc.s.ID}, nil
}

// harness runs one harnessSpec for one step.
type harness struct {
	spec harnessSpec
	in   string // the deploy_sandbox step it runs in; "" for a sandbox of its own
	sc   *scope
	env  DeployedEnv
	step string
}

// mcpConfig is the file CLI agents read: {"mcpServers": {NAME: {type, url, headers}}}.
type mcpConfig struct {
	MCPServers map[string]mcpServer `json:"mcpServers"`
}

type mcpServer struct {
	Type    string            `json:"type"`
	URL     string            `json:"url"`
	Headers map[string]string `json:"headers,omitempty"`
}

// Prompt implements agent.Agent.
func (h *harness) Prompt(ctx context.Context, p agent.Prompt, tr *agent.Trajectory) (agent.Answer, error) {
	var ans agent.Answer
	m := h.sc.e.r.Manager
	var gwURL, network, provider string
	var err error
	switch {
	case h.in == "":
		if gwURL, network, provider, err = h.route(ctx); err != nil {
			return ans, err
		}
	case p.Gateway.URL != "":
		// The task's sandbox is on no deployment's network: the gateway as agentenv reaches it.
		gwURL = p.Gateway.URL
	}
	files := map[string][]byte{harnessPromptFile: []byte(p.Text)}
	envv := map[string]string{"AGENTENV_PROMPT_FILE": harnessPromptFile}
	if gwURL != "" {
		name := p.Gateway.Name
		if name == "" {
			name = "env"
		}
		cfg, _ := json.MarshalIndent(mcpConfig{MCPServers: map[string]mcpServer{name: {Type: "http", URL: gwURL, Headers: p.Gateway.Headers}}}, "", "  ")
		files[harnessMCPConfig] = cfg
		envv["AGENTENV_MCP_CONFIG"] = harnessMCPConfig
	}
	for path, from := range h.spec.Files {
		local, err := h.sc.within("agent.harness.files", from)
		if err != nil {
			return ans, err
		}
		if files[path], err = os.ReadFile(local); err != nil {
			return ans, fmt.Errorf("agent.harness.files: %w", err)
		}
	}
	if h.spec.Trajectory != "" {
		envv["AGENTENV_TRAJECTORY"] = h.spec.Trajectory
	}
	for k, v := range h.spec.Env {
		envv[k] = v
	}
	var record, place string
	if h.in != "" {
		ref, err := h.sc.sandbox(h.in)
		if err != nil {
			return ans, err
		}
		record = ref.Record
		for _, path := range slices.Sorted(maps.Keys(files)) {
			if err := m.WriteFile(ctx, record, path, files[path]); err != nil {
				return ans, fmt.Errorf("harness: write %s: %w", path, err)
			}
		}
		if len(h.spec.Upload) > 0 {
			st, err := stage(ctx, h.sc, record, "agent.harness.upload", h.spec.Upload)
			if err != nil {
				return ans, fmt.Errorf("harness: %w", err)
			}
			place = st.script
		}
	} else {
		req := lifecycle.CreateRequest{
			Provider: provider, Run: h.sc.e.id, Role: agentenv.TaskRole(h.step),
			Spec: agentenv.SandboxSpec{Image: h.spec.Image, Command: []string{"sleep", "infinity"}, Env: envv, Files: files, Network: network},
		}
		start := time.Now()
		// Torn down with the episode, as deploy_sandbox's sandboxes are.
		rec, _, err := h.sc.createSandbox(ctx, []string{provider}, req)
		if err != nil {
			return ans, fmt.Errorf("harness sandbox: %w", err)
		}
		record = rec.ID
		h.sc.e.r.logger().Debug("harness sandbox up", "step", h.step, "record", rec.ID, "took", time.Since(start))
	}

	limit := time.Duration(h.spec.TimeoutSeconds * float64(time.Second))
	if limit <= 0 {
		limit = DefaultHarnessTimeout
	}
	if p.Timeout > 0 && p.Timeout < limit {
		limit = p.Timeout
	}
	run := time.Now()
	res, timedOut, err := h.exec(ctx, record, envv, place, limit)
	took := time.Since(run)
	if h.spec.Trajectory != "" {
		// The harness's own trajectory, even after a failure: it is what it did. On a
		// detached bounded context, as the step's may have ended.
		err := cleanup.Do(ctx, 30*time.Second, func(c context.Context) error { return h.copyTrajectory(c, record, tr, &ans) })
		if err != nil {
			h.sc.e.r.logger().Warn("harness trajectory", "step", h.step, "error", err)
		}
	}
	switch {
	case ctx.Err() != nil:
		return ans, ctx.Err()
	case timedOut:
		ans.Stop = agent.StopTimeout
		return ans, fmt.Errorf("harness ran out of its wall time of %s: %w", limit, agent.ErrAgent)
	case err != nil:
		return ans, fmt.Errorf("harness command: %w", err)
	}
	if place != "" && res.ExitCode == 125 && strings.Contains(string(res.Stderr), uploadsFailed) {
		return ans, fmt.Errorf("harness: %s", tail(string(res.Stderr), 300)) // ours, not the agent's
	}
	stdout := strings.TrimSpace(string(res.Stdout))
	tr.Write(agent.Line{Kind: agent.KindModel, Model: "harness", Text: stdout, DurationMS: took.Milliseconds(),
		JSON: json.RawMessage(`{"exit_code":` + strconv.Itoa(res.ExitCode) + `}`)})
	if ans.Turns == 0 {
		ans.Turns = 1
	}
	ans.Text = stdout
	if res.ExitCode != 0 {
		ans.Stop = agent.StopError
		return ans, fmt.Errorf("harness %s exited %d: %s: %w", h.spec.Command[0], res.ExitCode, tail(string(res.Stderr), 300), agent.ErrAgent)
	}
	ans.Stop = agent.StopAnswer
	return ans, nil
}

// uploadsFailed is what a harness's command says on stderr, exiting 125, when its uploads could
// not be put in place: the infrastructure's failure, not the agent's.
const uploadsFailed = "agentenv: cannot put the harness's uploads in place"

// exec runs the harness's command in record's sandbox within limit. In a sandbox of its own
// the environment was set at create; in a deploy_sandbox step's it is given through `env`, in
// one sh command that first runs place (the uploads' script, if any), then the command under
// coreutils' `timeout -k` when the sandbox has it (else bounded from here only, a little later:
// the limit and the kill grace).
func (h *harness) exec(ctx context.Context, record string, envv map[string]string, place string, limit time.Duration) (agentenv.ExecResult, bool, error) {
	m := h.sc.e.r.Manager
	if h.in == "" {
		cctx, cancel := context.WithTimeout(ctx, limit)
		defer cancel()
		res, err := m.Exec(cctx, record, h.spec.Command)
		return res, cctx.Err() != nil && ctx.Err() == nil, err
	}
	secs := int64(math.Ceil(limit.Seconds()))
	script := fmt.Sprintf(`if timeout --version 2>/dev/null | head -n 1 | grep -q coreutils; then exec timeout -k %d %d "$@"; fi; exec "$@"`, int(killGrace.Seconds()), secs)
	if place != "" {
		script = place + ` || { echo "` + uploadsFailed + `" >&2; exit 125; }; ` + script
	}
	argv := []string{"sh", "-c", script, "sh", "env"}
	for _, k := range slices.Sorted(maps.Keys(envv)) {
		argv = append(argv, k+"="+envv[k])
	}
	argv = append(argv, h.spec.Command...)
	cctx, cancel := context.WithTimeout(ctx, time.Duration(secs)*time.Second+killGrace+5*time.Second)
	defer cancel()
	start := time.Now()
	res, err := m.Exec(cctx, record, argv)
	switch {
	case ctx.Err() != nil:
		return res, false, ctx.Err()
	case cctx.Err() != nil || errors.Is(err, context.DeadlineExceeded):
		if res.ExitCode == 0 {
			res.ExitCode = -1
		}
		return res, true, nil
	case err != nil:
		return res, false, err
	case (res.ExitCode == 124 || res.ExitCode == 137) && time.Since(start) >= limit:
		return res, true, nil
	}
	return res, false, nil
}

// route is how a sandbox of the env's provider reaches the gateway: on the deployment's
// private network, at the gateway's name and container port, when the deployment has one;
// else at the gateway's URL as agentenv reaches it.
func (h *harness) route(ctx context.Context) (gatewayURL, network, provider string, err error) {
	gatewayURL = h.env.GatewayURL
	rt, err := routeTo(ctx, h.sc.e.r.ledger(), h.env)
	if err != nil {
		return "", "", "", fmt.Errorf("harness: %w", err)
	}
	provider = rt.Provider
	if provider == "" {
		// An env whose records agentenv does not know: the run's provider.
		provider = h.sc.e.opts.Provider
	}
	if provider == "" {
		return "", "", "", errors.New("harness: no provider: give the run one")
	}
	u, err := url.Parse(gatewayURL)
	if rt.Network == "" || rt.GatewayPort == 0 || err != nil {
		return gatewayURL, "", provider, nil
	}
	u.Host = "gateway:" + strconv.Itoa(rt.GatewayPort)
	return u.String(), rt.Network, provider, nil
}

// copyTrajectory reads the harness's trajectory file and writes its lines into tr, counting
// its turns and tool calls into ans. A line that is not an agent.Line is kept as a model
// line's text.
func (h *harness) copyTrajectory(ctx context.Context, record string, tr *agent.Trajectory, ans *agent.Answer) error {
	data, err := h.sc.e.r.Manager.ReadFile(ctx, record, h.spec.Trajectory)
	if errors.Is(err, agentenv.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(nil, 16<<20)
	for sc.Scan() {
		raw := bytes.TrimSpace(sc.Bytes())
		if len(raw) == 0 {
			continue
		}
		var l agent.Line
		if json.Unmarshal(raw, &l) != nil || l.Kind == "" {
			l = agent.Line{Kind: agent.KindModel, Model: "harness", Text: string(raw)}
		}
		switch l.Kind {
		case agent.KindModel:
			ans.Turns++
			if l.Usage != nil {
				ans.Usage = ans.Usage.Add(*l.Usage)
			}
		case agent.KindToolCall:
			ans.ToolCalls++
		case agent.KindPrompt, agent.KindResponse, agent.KindStop:
			continue // agentenv writes these itself
		}
		tr.Write(l)
	}
	return sc.Err()
}
