package harbor

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/task"
)

// The agents a Harbor task runs with: two that need no model, the built-in model agent, a
// command-line agent of the user's, and a running A2A agent of the user's.
const (
	AgentOracle    = "oracle"  // runs the task's solution/solve.sh in its container
	AgentNop       = "nop"     // does nothing: the tests see the container as it was built
	AgentCommand   = "command" // a command-line agent in the container: Options.Command
	AgentA2A       = "a2a"     // a running A2A agent at Options.URL, handed the container as MCP tools through the gateway
	AgentOpenAI    = task.AgentOpenAI
	AgentAnthropic = task.AgentAnthropic
)

// Agents lists the agents a Harbor task runs with, for flags and messages.
func Agents() []string {
	return []string{AgentOracle, AgentNop, AgentOpenAI, AgentAnthropic, AgentCommand, AgentA2A}
}

// Container paths a task's files are copied to, as Harbor lays them out.
const (
	SolutionDir = "/solution"
	TestsDir    = "/tests"
)

// Options say how a Harbor task runs as agentenv steps.
type Options struct {
	Agent string // one of Agents; AgentOracle if empty (AgentCommand if only Command is set)
	Model string // the model agent's model, over model.name; "" for the configured one
	// Command is AgentCommand's shell command, run with sh -c inside the task's container
	// under the agent's timeout, with the instruction in the file $AGENTENV_PROMPT_FILE (a
	// harness installed in the image, or by the command itself).
	Command string
	// URL is AgentA2A's agent: a running A2A agent (http://host:port) that gets the task's
	// container as MCP tools (run_command, read_file, write_file) and the task's MCP servers
	// through a gateway served on this host, with its role token.
	URL string
}

// mark is o as the part of a native task's File after its folder ("#agent=oracle"), from which
// cutMark reads o back: a resumed group loads each task as it ran.
func (o Options) mark() string {
	v := url.Values{"agent": {o.Agent}}
	if o.Model != "" {
		v.Set("model", o.Model)
	}
	if o.Command != "" {
		v.Set("command", o.Command)
	}
	if o.URL != "" {
		v.Set("url", o.URL)
	}
	return "#" + v.Encode()
}

// cutMark splits a native task's File into its folder and its Options; ok is false for a name
// without them.
func cutMark(name string) (dir string, o Options, ok bool) {
	dir, q, ok := strings.Cut(name, "#")
	if !ok {
		return name, Options{}, false
	}
	v, err := url.ParseQuery(q)
	if err != nil || v.Get("agent") == "" {
		return name, Options{}, false
	}
	return dir, Options{Agent: v.Get("agent"), Model: v.Get("model"), Command: v.Get("command"), URL: v.Get("url")}, true
}

// sandboxStep is the id of the step that makes the task's container.
const sandboxStep = "container"

// Native returns t as an agentenv task: its container built from environment/ (or its
// docker_image) with the resources it asks (a docker-compose environment: its services on a
// private network beside it, composeSteps), on an isolated network without internet, or
// behind an egress proxy to its allowed_hosts only (egress), as its network_mode says, the
// agent working inside it, then tests/ copied in
// and test.sh run as the verifier's user, scored from its reward file. A [[steps]] task runs
// each step's agent and verifier in turn in the one container, and scores the mean of its
// steps (multi_step_reward_strategy "mean", Harbor's default: over every step, a step that did
// not run counting 0) or its last step's reward ("final": the others' tests still run, and
// are recorded, with weight 0). A step's min_reward gates the rest: when the step's reward (a
// number) or a named metric of its reward.json (a table) is below it, or a gated metric is
// missing, the steps after it are skipped, agents and tests, and the task scores as above,
// the skipped steps 0 ("final": 0, the last step never ran). Its File and Dir are the task
// folder; its Digest covers every file of the folder and the options, so a resumed run
// refuses a task that changed.
func Native(t *Task, o Options) (*task.Task, error) {
	o = o.normal()
	doc, err := native(t, o)
	if err != nil {
		return nil, err
	}
	data, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("harbor task %s: %w", t.Dir, err)
	}
	nt, err := task.Parse(filepath.Join(t.Dir, "task.toml"), data)
	if err != nil {
		return nil, fmt.Errorf("harbor task %s as agentenv steps: %w", t.Dir, err)
	}
	nt.File, nt.Dir = t.Dir, t.Dir
	d, err := t.Digest()
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%s", d, o.mark()))
	nt.Digest = "sha256:" + hex.EncodeToString(sum[:])
	return nt, nil
}

// native is t as the document of an agentenv task, for o (its defaults filled in).
func native(t *Task, o Options) (nativeDoc, error) {
	if !slices.Contains(Agents(), o.Agent) {
		return nativeDoc{}, fmt.Errorf("agent %q: want one of %s: %w", o.Agent, strings.Join(Agents(), ", "), agentenv.ErrInvalid)
	}
	if (o.Agent == AgentCommand) != (o.Command != "") {
		return nativeDoc{}, fmt.Errorf("agent %s and command %q: a command is the command agent's, and it needs one: %w", o.Agent, o.Command, agentenv.ErrInvalid)
	}
	if (o.Agent == AgentA2A) != (o.URL != "") {
		return nativeDoc{}, fmt.Errorf("agent %s and url %q: a URL is the a2a agent's, and it needs one: %w", o.Agent, o.URL, agentenv.ErrInvalid)
	}
	if t.Environment.GPUs > 0 {
		return nativeDoc{}, fmt.Errorf("%s: [environment] gpus = %d: no provider of agentenv gives sandboxes GPUs yet: %w", filepath.Join(t.Dir, "task.toml"), t.Environment.GPUs, agentenv.ErrInvalid)
	}
	doc := nativeDoc{Name: t.Name, Description: fmt.Sprintf("Harbor task %s, agent %s", t.Dir, o.Agent), Score: string(task.WeightedAverage)}
	if t.Environment.Compose != "" {
		env, err := composeSteps(t)
		if err != nil {
			return nativeDoc{}, err
		}
		doc.Steps = append(doc.Steps, env...)
	} else {
		doc.Steps = append(doc.Steps, containerStep(t))
	}
	base, byPhase := envPolicy(t), phased(t)
	if base.mode != NetworkPublic || byPhase {
		doc.Steps = isolate(doc.Steps)
	}
	if base.mode == NetworkAllowlist || byPhase {
		var err error
		if doc.Steps, err = egress(t, doc.Steps, base, byPhase); err != nil {
			return nativeDoc{}, err
		}
	}
	after := sandboxStep
	if tools, err := toolsStep(t, o, doc.Steps); err != nil {
		return nativeDoc{}, err
	} else if tools != nil {
		doc.Steps = append(doc.Steps, tools)
		after = toolsStepID
	}

	doc.Steps = append(doc.Steps, phaseSteps(t, o, after)...)
	last, _ := doc.Steps[len(doc.Steps)-1]["id"].(string)
	doc.Steps = append(doc.Steps, artifactSteps(t, doc.Steps, last)...)
	return doc, nil
}

// phaseSteps are the steps of t's phases after the step after: the task's own instruction and
// tests, or each of its [[steps]] in turn, each phase's agent steps then its verifier, each
// after the one before. Every phase's tests run; with the "final" strategy all but the last
// have weight 0. A phase's min_reward is its verifier's min_rewards, the gate of the phases
// after it.
func phaseSteps(t *Task, o Options, after string) []step {
	var out []step
	phases := phaseList(t)
	base, byPhase := envPolicy(t), phased(t)
	for i, ph := range phases {
		sfx := ""
		if len(phases) > 1 {
			sfx = fmt.Sprintf("_%d", i+1)
		}
		if byPhase && o.Agent != AgentNop {
			// The agent phase's network policy, in force before the agent starts.
			out = append(out, policyStep("network_agent"+sfx, after, overPolicy(base, ph.Agent.NetworkMode, ph.Agent.AllowedHosts)))
			after = "network_agent" + sfx
		}
		agentSteps := agentSteps(t, ph, sfx, after, o)
		out = append(out, agentSteps...)
		if len(agentSteps) > 0 {
			after = agentSteps[len(agentSteps)-1]["id"].(string)
		}
		v := ph.Verifier
		if byPhase {
			out = append(out, policyStep("network_verify"+sfx, after, overPolicy(base, v.NetworkMode, v.AllowedHosts)))
			after = "network_verify" + sfx
		}
		verify := step{
			"id": "verify" + sfx, "type": task.TypeReward, "depends_on": []string{after},
			"sandbox": sandboxStep, "timeout": seconds(v.Timeout + 10*time.Second),
			"upload": uploads(t, ph, "tests", TestsDir),
		}
		// Every step's tests run, as Harbor runs them: with the "final" strategy only the last
		// one scores, the others' rewards recorded with weight 0. A step's min_reward gates the
		// steps after it: below it they are skipped, and count 0.
		if t.RewardStrategy == "final" && i < len(phases)-1 {
			verify["weight"] = 0
		}
		if len(ph.MinReward) > 0 {
			verify["min_rewards"] = ph.MinReward
		}
		if v.User != "" {
			verify["user"] = v.User
		}
		if len(v.Env) > 0 {
			verify["env"] = expandEnv(v.Env)
		}
		out = append(out, verify)
		after = "verify" + sfx
	}
	return out
}

// isolate cuts the environment of steps off the internet, as [environment] network_mode
// "no-network" (allow_internet = false) asks, and "allowlist" before egress puts its proxy
// beside it: the compose network is made isolated, or a container without one gets an
// isolated network of its own.
func isolate(steps []step) []step {
	for _, s := range steps {
		if s["id"] == networkStep {
			s["isolated"] = true
			return steps
		}
	}
	for _, s := range steps {
		if s["id"] == sandboxStep {
			s["network"], s["aliases"], s["depends_on"] = networkStep, []string{"main"}, []string{networkStep}
		}
	}
	return append([]step{{"id": networkStep, "type": task.TypeDeployNetwork, "isolated": true}}, steps...)
}

// normal is o with its defaults: the oracle, or the command agent when only a command is given,
// the a2a agent when only a URL is.
func (o Options) normal() Options {
	if o.Agent == "" {
		o.Agent = AgentOracle
		if o.Command != "" {
			o.Agent = AgentCommand
		}
		if o.URL != "" {
			o.Agent = AgentA2A
		}
	}
	return o
}

// nativeDoc is the task file a Harbor task becomes.
type nativeDoc struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description"`
	Score       string `yaml:"score"`
	Steps       []step `yaml:"steps"`
}

// step is one step of a nativeDoc, its fields as a task file writes them.
type step map[string]any

// containerStep is the deploy_sandbox step of t's container: built from environment/, or its
// docker_image, kept alive by sleep as Harbor keeps it, with t's resources, and its
// [environment.healthcheck] passed before the step ends.
func containerStep(t *Task) step {
	env := t.Environment
	s := step{"id": sandboxStep, "type": task.TypeDeploySandbox, "command": []string{"sh", "-c", "sleep infinity"},
		"cap_add": task.ContainerCaps}
	if env.DockerImage != "" {
		s["image"] = env.DockerImage
	} else {
		s["build"] = map[string]any{"context": "environment", "dockerfile": filepath.ToSlash(strings.TrimPrefix(env.Dockerfile, "environment/"))}
		if env.BuildTimeout > 0 {
			s["build_timeout_sec"] = env.BuildTimeout.Seconds()
			s["timeout"] = seconds(env.BuildTimeout + 2*time.Minute)
		}
	}
	if env.CPUs > 0 {
		s["cpus"] = env.CPUs
	}
	if env.MemoryMB > 0 {
		s["memory_mb"] = env.MemoryMB
	}
	if len(env.Env) > 0 {
		s["env"] = expandEnv(env.Env)
	}
	if env.Healthcheck != nil {
		h := taskHealthcheck(env.Healthcheck)
		d := healthBudget(h)
		if env.DockerImage == "" && env.BuildTimeout > 0 {
			d += env.BuildTimeout
		}
		s["healthcheck"], s["timeout"] = h, stepTimeout(d)
	}
	return s
}

// toolsStepID is the id of the serve_tools step of a task's MCP servers and, for an A2A
// agent, the container's terminal tools.
const toolsStepID = "tools"

// toolsStep is the serve_tools step of t for an agent that speaks MCP (the model agent, an
// A2A agent), or nil: t's stdio MCP servers run in its container, and its servers over HTTP
// (sse, streamable-http) are services of its docker-compose file, whose step of steps publishes
// the server's port on this host's loopback; all of them behind a gateway served on this
// host, and for an A2A agent the container's terminal tools beside them. A server over HTTP
// whose URL names no service of the compose file is refused by its key.
func toolsStep(t *Task, o Options, steps []step) (step, error) {
	modelAgent := o.Agent == AgentOpenAI || o.Agent == AgentAnthropic
	if !modelAgent && o.Agent != AgentA2A {
		return nil, nil
	}
	var servers []map[string]any
	for i, sv := range t.MCPServers {
		if sv.Transport == "stdio" {
			servers = append(servers, map[string]any{"name": sv.Name, "command": append([]string{sv.Command}, sv.Args...)})
			continue
		}
		srv, err := httpServer(t, i, sv, steps)
		if err != nil {
			return nil, err
		}
		servers = append(servers, srv)
	}
	if len(servers) == 0 && o.Agent != AgentA2A {
		return nil, nil
	}
	s := step{"id": toolsStepID, "type": task.TypeServeTools, "depends_on": []string{sandboxStep}, "sandbox": sandboxStep}
	if len(servers) > 0 {
		s["servers"] = servers
	}
	if o.Agent == AgentA2A {
		s["terminal"] = true
	}
	return s, nil
}

// httpServer is the serve_tools server of t's i-th MCP server, sv, over HTTP: its URL's host is
// a service of the compose file (main included), whose step in steps gets the URL's port in its
// ports, so that the gateway on this host reaches the server there.
func httpServer(t *Task, i int, sv MCPServer, steps []step) (map[string]any, error) {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%s: key environment.mcp_servers[%d].url: %q (server %s): %s: %w",
			filepath.Join(t.Dir, "task.toml"), i, sv.URL, sv.Name, fmt.Sprintf(format, args...), agentenv.ErrInvalid)
	}
	u, err := url.Parse(sv.URL)
	switch {
	case err != nil:
		return nil, bad("not a URL: %v", err)
	case u.Scheme != "http":
		return nil, bad("want http://SERVICE:PORT/PATH, a service of environment/docker-compose.yaml (agentenv reaches it at the port it publishes on this host)")
	case u.RawQuery != "" || u.Fragment != "" || u.User != nil:
		return nil, bad("want http://SERVICE:PORT/PATH, without user, query or fragment")
	case t.Environment.Compose == "":
		return nil, bad("a server over HTTP must be a service of environment/docker-compose.yaml, and the task has none")
	}
	port := 80
	if p := u.Port(); p != "" {
		if port, err = strconv.Atoi(p); err != nil || port < 1 || port > 65535 {
			return nil, bad("port %q: want 1-65535", p)
		}
	}
	host := u.Hostname()
	at := slices.IndexFunc(steps, func(s step) bool {
		aliases, _ := s["aliases"].([]string)
		return s["type"] == task.TypeDeploySandbox && slices.Contains(aliases, host)
	})
	if at < 0 {
		return nil, bad("host %q is not a service of environment/docker-compose.yaml", host)
	}
	svc := steps[at]
	ports, _ := svc["ports"].([]int)
	if !slices.Contains(ports, port) {
		svc["ports"] = append(ports, port)
	}
	path := u.EscapedPath()
	if path == "" {
		path = "/"
	}
	return map[string]any{"name": sv.Name, "sandbox": svc["id"], "port": port, "path": path, "transport": sv.Transport}, nil
}

// agentSteps are the steps of one agent phase: none for nop; the solution copied in and
// solve.sh run inside the container for the oracle; the built-in model agent with a terminal
// in the container for a model, and the task's MCP servers through the tools step's gateway;
// an A2A agent with that gateway only, the container's terminal among its tools.
func agentSteps(t *Task, ph Step, sfx, after string, o Options) []step {
	timeout := ph.Agent.Timeout
	if timeout <= 0 {
		timeout = t.Agent.Timeout
	}
	prompt := step{
		"id": "agent" + sfx, "type": task.TypePromptAgent, "depends_on": []string{after}, "sandbox": sandboxStep,
		"prompt_file": instructionFile(t, ph), "timeout": seconds(timeout + 30*time.Second),
	}
	if timeout > 0 {
		prompt["timeout_seconds"] = timeout.Seconds()
	}
	switch o.Agent {
	case AgentNop:
		return nil
	case AgentCommand:
		harness := map[string]any{"in": sandboxStep, "command": []string{"sh", "-c", o.Command}}
		if timeout > 0 {
			harness["timeout_seconds"] = timeout.Seconds()
		}
		prompt["agent"] = map[string]any{"harness": harness}
		return []step{prompt}
	case AgentA2A:
		prompt["agent"] = map[string]any{"a2a": o.URL}
		prompt["env"] = toolsStepID
		delete(prompt, "sandbox")
		return []step{prompt}
	case AgentOracle:
		harness := map[string]any{"in": sandboxStep, "command": []string{"bash", SolutionDir + "/solve.sh"},
			"upload": uploads(t, ph, "solution", SolutionDir)}
		if timeout > 0 {
			harness["timeout_seconds"] = timeout.Seconds()
		}
		if len(t.Solution.Env) > 0 {
			harness["env"] = expandEnv(t.Solution.Env)
		}
		prompt["agent"] = map[string]any{"harness": harness}
		return []step{prompt}
	default:
		prompt["agent"] = o.Agent
		if o.Model != "" {
			prompt["model"] = o.Model
		}
		if len(t.MCPServers) > 0 {
			prompt["env"] = toolsStepID
		}
		return []step{prompt}
	}
}

// instructionFile is the file of a phase's instruction, relative to the task folder: the
// step's own instruction.md, else the task's.
func instructionFile(t *Task, ph Step) string {
	if p := filepath.Join(ph.Dir, "instruction.md"); ph.Dir != "" && exists(p) {
		return relSlash(t.Dir, p)
	}
	return "instruction.md"
}

// uploads are the uploads that put a phase's folder name (tests, solution) at to, as Harbor
// does: the task's folder, then a step's own over it (same-named files replaced). A task with
// neither folder still gets the task's, which fails naming the missing folder.
func uploads(t *Task, ph Step, name, to string) []map[string]any {
	var froms []string
	if exists(filepath.Join(t.Dir, name)) || ph.Dir == "" || ph.Dir == t.Dir {
		froms = append(froms, name)
	}
	if own := filepath.Join(ph.Dir, name); ph.Dir != "" && ph.Dir != t.Dir && exists(own) {
		froms = append(froms, relSlash(t.Dir, own))
	}
	if len(froms) == 0 {
		froms = append(froms, name)
	}
	var out []map[string]any
	for i, from := range froms {
		u := map[string]any{"from": from, "to": to}
		if i > 0 {
			u["merge"] = true
		}
		out = append(out, u)
	}
	return out
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// relSlash is p relative to dir, with slashes, as a task file names files.
func relSlash(dir, p string) string {
	r, err := filepath.Rel(dir, p)
	if err != nil {
		return filepath.ToSlash(p)
	}
	return filepath.ToSlash(r)
}

// expandEnv fills ${VAR} and ${VAR:-default} in env's values from this host's environment,
// as Harbor does for [environment].env, [verifier].env and [solution].env (interpolate).
func expandEnv(env map[string]string) map[string]string {
	out := make(map[string]string, len(env))
	for k, v := range env {
		out[k] = interpolate(v, nil)
	}
	return out
}

// seconds is d as a task file's timeout.
func seconds(d time.Duration) string { return d.Round(time.Second).String() }
