package harbor

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/spec"
	"github.com/agentenv/agentenv/task"
)

// stepIDs are the ids of a native task's steps, in order.
func stepIDs(t *testing.T, dir string, o Options) []string {
	t.Helper()
	nt, err := LoadNative(filepath.Join("testdata/corpus", dir), o)
	if err != nil {
		t.Fatalf("LoadNative(%s, %+v): %v", dir, o, err)
	}
	var ids []string
	for _, s := range nt.Steps {
		ids = append(ids, s.ID+":"+s.Type)
	}
	return ids
}

func TestNativeSteps(t *testing.T) {
	for _, c := range []struct {
		dir  string
		o    Options
		want []string
	}{
		// The oracle's solution/ and the verifier's tests/ are put in place by the harness's and
		// the reward's own command (their upload:), not by steps of their own; the artifacts
		// (Harbor's /logs/artifacts/ at least) are collected last.
		{"hello-file", Options{}, []string{"container:deploy_sandbox", "agent:prompt_agent", "verify:reward", "artifacts:collect_files"}},
		{"hello-file", Options{Agent: AgentNop}, []string{"container:deploy_sandbox", "verify:reward", "artifacts:collect_files"}},
		{"hello-file", Options{Agent: AgentOpenAI}, []string{"container:deploy_sandbox", "agent:prompt_agent", "verify:reward", "artifacts:collect_files"}},
		{"hello-file", Options{Command: "my-agent"}, []string{"container:deploy_sandbox", "agent:prompt_agent", "verify:reward", "artifacts:collect_files"}},
		{"hello-file", Options{Agent: AgentA2A, URL: "http://127.0.0.1:9"}, []string{"container:deploy_sandbox", "tools:serve_tools", "agent:prompt_agent", "verify:reward", "artifacts:collect_files"}},
		{"mcp-stdio", Options{Agent: AgentOpenAI}, []string{"container:deploy_sandbox", "tools:serve_tools", "agent:prompt_agent", "verify:reward", "artifacts:collect_files"}},
		{"mcp-stdio", Options{}, []string{"container:deploy_sandbox", "agent:prompt_agent", "verify:reward", "artifacts:collect_files"}},
		{"no-internet", Options{Agent: AgentNop}, []string{"network:deploy_network", "container:deploy_sandbox", "verify:reward", "artifacts:collect_files"}},
		{"multi-step", Options{Agent: AgentNop}, []string{"container:deploy_sandbox", "verify_1:reward", "verify_2:reward", "artifacts:collect_files"}},
		{"allowlist", Options{Agent: AgentNop}, []string{"network:deploy_network", "egress_network:deploy_network", "egress:deploy_sandbox",
			"container:deploy_sandbox", "verify:reward", "artifacts:collect_files"}},
	} {
		if got := stepIDs(t, c.dir, c.o); !slices.Equal(got, c.want) {
			t.Errorf("%s %+v: steps %q\nwant %q", c.dir, c.o, got, c.want)
		}
	}
}

// A multi-step task's phase gets the task's tests/, then its step's own merged over them.
func TestUploads(t *testing.T) {
	tk, err := Load("testdata/corpus/multi-step")
	if err != nil {
		t.Fatal(err)
	}
	got := uploads(tk, tk.Steps[0], "tests", TestsDir)
	want := []map[string]any{{"from": "tests", "to": TestsDir}, {"from": "steps/" + tk.Steps[0].Name + "/tests", "to": TestsDir, "merge": true}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("uploads of step 1 = %v, want %v", got, want)
	}
	hello, err := Load("testdata/corpus/hello-file")
	if err != nil {
		t.Fatal(err)
	}
	got = uploads(hello, Step{Dir: hello.Dir}, "solution", SolutionDir)
	if want := []map[string]any{{"from": "solution", "to": SolutionDir}}; !reflect.DeepEqual(got, want) {
		t.Errorf("uploads of solution = %v, want %v", got, want)
	}
}

// A native task's File names its folder and options; loading it again gives the same task, and
// another agent gives another digest (a resumed group refuses a task run differently).
func TestNativeFileRoundTrip(t *testing.T) {
	a, err := LoadNative("testdata/corpus/hello-file", Options{Command: "run it"})
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadNative(a.File, Options{})
	if err != nil {
		t.Fatalf("LoadNative(%q): %v", a.File, err)
	}
	if a.Digest != b.Digest || a.File != b.File {
		t.Errorf("reloaded %q (%s), want %q (%s)", b.File, b.Digest, a.File, a.Digest)
	}
	if !IsNative(a.File) {
		t.Errorf("IsNative(%q) = false", a.File)
	}
	c, err := LoadNative("testdata/corpus/hello-file", Options{Agent: AgentNop})
	if err != nil {
		t.Fatal(err)
	}
	if c.Digest == a.Digest {
		t.Errorf("nop and the command agent have one digest %s", c.Digest)
	}
}

func TestNativeRefuses(t *testing.T) {
	for _, o := range []Options{{Agent: "bogus"}, {Agent: AgentCommand}, {Agent: AgentNop, Command: "x"},
		{Agent: AgentA2A}, {Agent: AgentOpenAI, URL: "http://127.0.0.1:9"}, {Agent: AgentA2A, URL: "ftp://x"}} {
		if _, err := LoadNative("testdata/corpus/hello-file", o); !errors.Is(err, agentenv.ErrInvalid) {
			t.Errorf("LoadNative(%+v) = %v, want ErrInvalid", o, err)
		}
	}
}

// An a2a run is one prompt_agent step whose A2A agent works in the container, and its URL is
// part of the native task's File: a resumed group runs the same agent, another URL is another
// digest.
func TestNativeA2A(t *testing.T) {
	a, err := LoadNative("testdata/corpus/hello-file", Options{URL: "http://127.0.0.1:9"})
	if err != nil {
		t.Fatal(err)
	}
	ht, err := Load("testdata/corpus/hello-file")
	if err != nil {
		t.Fatal(err)
	}
	steps := agentSteps(ht, Step{Instruction: ht.Instruction, Agent: ht.Agent, Verifier: ht.Verifier, Dir: ht.Dir}, "", sandboxStep, Options{Agent: AgentA2A, URL: "http://127.0.0.1:9"})
	if len(steps) != 1 {
		t.Fatalf("%d agent steps, want 1: %v", len(steps), steps)
	}
	s := steps[0]
	if _, inSandbox := s["sandbox"]; s["type"] != task.TypePromptAgent || s["env"] != toolsStepID || inSandbox || s["prompt_file"] != "instruction.md" || !reflect.DeepEqual(s["agent"], map[string]any{"a2a": "http://127.0.0.1:9"}) {
		t.Errorf("agent step %v, want a prompt_agent of the a2a agent through the tools step's gateway", s)
	}
	tools, err := toolsStep(ht, Options{Agent: AgentA2A, URL: "http://127.0.0.1:9"}, nil)
	if err != nil || tools["terminal"] != true || tools["sandbox"] != sandboxStep || tools["servers"] != nil {
		t.Errorf("tools step %v, %v; want the container's terminal and no servers", tools, err)
	}
	b, err := LoadNative(a.File, Options{})
	if err != nil {
		t.Fatalf("LoadNative(%q): %v", a.File, err)
	}
	if b.Digest != a.Digest {
		t.Errorf("reloaded digest %s, want %s", b.Digest, a.Digest)
	}
	c, err := LoadNative("testdata/corpus/hello-file", Options{Agent: AgentA2A, URL: "http://127.0.0.1:10"})
	if err != nil {
		t.Fatal(err)
	}
	if c.Digest == a.Digest {
		t.Error("two agent URLs have one digest")
	}
}

// A task's stdio MCP servers run in its container behind the tools step's gateway, which the
// model agent gets as its env beside its own terminal; the A2A agent gets the terminal there too.
func TestNativeMCPServers(t *testing.T) {
	ht, err := Load("testdata/corpus/mcp-stdio")
	if err != nil {
		t.Fatal(err)
	}
	wantServers := []map[string]any{{"name": "vault", "command": []string{"/usr/local/bin/vault-mcp", "--vault", "/opt/vault"}}}
	for _, c := range []struct {
		o        Options
		terminal bool
	}{{Options{Agent: AgentOpenAI}, false}, {Options{Agent: AgentA2A, URL: "http://127.0.0.1:9"}, true}} {
		s, err := toolsStep(ht, c.o, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(s["servers"], wantServers) || (s["terminal"] == true) != c.terminal {
			t.Errorf("%s: tools step %v, want the vault server (terminal %v)", c.o.Agent, s, c.terminal)
		}
		nt, err := Native(ht, c.o)
		if err != nil {
			t.Fatal(err)
		}
		i := slices.IndexFunc(nt.Steps, func(s *task.StepSpec) bool { return s.ID == "agent" })
		if i < 0 || !slices.Contains(nt.Steps[i].DependsOn, toolsStepID) {
			t.Errorf("%s: the agent step does not follow the tools step: %+v", c.o.Agent, nt.Steps)
		}
	}
	if s, err := toolsStep(ht, Options{Agent: AgentOracle}, nil); s != nil || err != nil {
		t.Errorf("the oracle gets tools step %v, %v; want none", s, err)
	}

	// A server over HTTP in a task without a compose file is refused by its key, nothing deployed.
	ht.MCPServers = append(ht.MCPServers, MCPServer{Name: "web", Transport: "streamable-http", URL: "http://mcp:8000/mcp"})
	_, err = Native(ht, Options{Agent: AgentOpenAI})
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "task.toml: key environment.mcp_servers[1].url") {
		t.Errorf("Native with an http server = %v, want ErrInvalid naming task.toml's key", err)
	}
}

// A task's MCP servers over HTTP are its compose services: the service's step publishes the
// URL's port, the tools step reaches the server there by the step, port, path and transport;
// the oracle publishes nothing. A URL that names no service, or not over http, is refused by
// its key.
func TestNativeMCPHTTPServers(t *testing.T) {
	ht, err := Load("testdata/corpus/mcp-http")
	if err != nil {
		t.Fatal(err)
	}
	steps, err := composeSteps(ht)
	if err != nil {
		t.Fatal(err)
	}
	s, err := toolsStep(ht, Options{Agent: AgentOpenAI}, steps)
	if err != nil {
		t.Fatal(err)
	}
	want := []map[string]any{
		{"name": "codes", "sandbox": "svc_mcp-server", "port": 8000, "path": "/mcp", "transport": "streamable-http"},
		{"name": "words", "sandbox": "svc_mcp-server", "port": 8000, "path": "/sse", "transport": "sse"},
	}
	deepEq(t, "servers", s["servers"], want)
	i := slices.IndexFunc(steps, func(s step) bool { return s["id"] == "svc_mcp-server" })
	deepEq(t, "mcp-server's ports", steps[i]["ports"], []int{8000})
	if _, err := Native(ht, Options{Agent: AgentOpenAI}); err != nil {
		t.Errorf("Native(mcp-http, openai) = %v", err)
	}
	oracle, err := Native(ht, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for _, st := range oracle.Steps {
		if st.ID == toolsStepID {
			t.Error("the oracle gets a tools step")
		}
	}

	for _, c := range []struct{ url, err string }{
		{"https://mcp-server:8000/mcp", "want http://SERVICE:PORT/PATH"},
		{"http://elsewhere:8000/mcp", `host "elsewhere" is not a service`},
		{"http://mcp-server:0/mcp", `port "0": want 1-65535`},
		{"http://mcp-server:8000/mcp?x=1", "without user, query or fragment"},
	} {
		bad := *ht
		bad.MCPServers = []MCPServer{ht.MCPServers[0], {Name: "x", Transport: "sse", URL: c.url}}
		_, err := Native(&bad, Options{Agent: AgentOpenAI})
		if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "task.toml: key environment.mcp_servers[1].url") || !strings.Contains(err.Error(), c.err) {
			t.Errorf("url %s: %v, want ErrInvalid naming the key and %q", c.url, err, c.err)
		}
	}
}

// Every phase's tests run, each after the one before, so that a step's min_reward (its
// verifier's min_rewards) skips the phases after it when its reward is below; with the
// "final" strategy all but the last verifier have weight 0 (recorded, not scored), with "mean"
// every one weighs 1 and one that did not run counts 0.
func TestNativeGates(t *testing.T) {
	for _, c := range []struct {
		dir     string
		o       Options
		ids     []string
		weights []float64
		mins    []map[string]float64
	}{
		{"multi-step", Options{}, []string{"container", "agent_1", "verify_1", "agent_2", "verify_2", "artifacts"},
			[]float64{1, 1}, []map[string]float64{{"reward": 1}, nil}},
		{"multi-step-gate", Options{}, []string{"container", "agent_1", "verify_1", "agent_2", "verify_2", "agent_3", "verify_3", "artifacts"},
			[]float64{0, 0, 1}, []map[string]float64{{"reward": 1}, {"lines": 1}, nil}},
		{"multi-step-gate", Options{Agent: AgentNop}, []string{"container", "verify_1", "verify_2", "verify_3", "artifacts"},
			[]float64{0, 0, 1}, []map[string]float64{{"reward": 1}, {"lines": 1}, nil}},
	} {
		ht, err := Load(filepath.Join("testdata/corpus", c.dir))
		if err != nil {
			t.Fatal(err)
		}
		nt, err := Native(ht, c.o)
		if err != nil {
			t.Fatalf("Native(%s): %v", c.dir, err)
		}
		var ids []string
		var weights []float64
		for i, s := range nt.Steps {
			ids = append(ids, s.ID)
			if i > 0 && (len(s.DependsOn) != 1 || s.DependsOn[0] != nt.Steps[i-1].ID) {
				t.Errorf("%s: step %s depends on %v, want the step before it", c.dir, s.ID, s.DependsOn)
			}
			if s.Type == task.TypeReward {
				weights = append(weights, s.Weight)
			}
		}
		if !slices.Equal(ids, c.ids) || !slices.Equal(weights, c.weights) {
			t.Errorf("%s %s: steps %q, verifier weights %v; want %q, %v", c.dir, c.o.Agent, ids, weights, c.ids, c.weights)
		}
		var mins []map[string]float64
		for _, s := range phaseSteps(ht, c.o, sandboxStep) {
			if s["type"] == task.TypeReward {
				m, _ := s["min_rewards"].(map[string]float64)
				mins = append(mins, m)
			}
		}
		deepEq(t, c.dir+" min_rewards", mins, c.mins)
	}
}

// An allowlist task runs on an isolated network, with the egress proxy beside it: agentenv's
// runtime image serving the task's allowed hosts, on a network with a route out and joined to
// the task's as egress-proxy, and the container (every compose service) starting after it with
// the proxy in its environment (what the task sets itself kept).
func TestNativeAllowlist(t *testing.T) {
	dir, put := taskFolder(t)
	put("task.toml", "[environment]\nnetwork_mode = \"allowlist\"\nallowed_hosts = [\"Example.org\", \"*.pypi.org\"]\nenv = { NO_PROXY = \"mine\" }\n")
	put("instruction.md", "do it")
	put("environment/Dockerfile", "FROM x")
	tk, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if w := warnings(tk); len(w) != 0 {
		t.Errorf("warnings %q, want none: the allowlist is enforced", w)
	}
	nt, err := Native(tk, Options{Agent: AgentNop})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range nt.Steps {
		if s.ID == sandboxStep && !slices.Contains(s.DependsOn, egressStep) {
			t.Errorf("container depends on %v, want the egress proxy among them", s.DependsOn)
		}
	}
	steps, err := egress(tk, isolate([]step{containerStep(tk)}), envPolicy(tk), false)
	if err != nil {
		t.Fatal(err)
	}
	data, err := yaml.Marshal(steps)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(data)
	for _, want := range []string{
		"isolated: true",
		"image: " + spec.DefaultImage,
		"- /agentenv\n", "- egress-proxy\n", "- example.org,*.pypi.org\n",
		"network: egress_network",
		"join:\n    - aliases:\n        - egress-proxy\n      network: network\n",
		"HTTPS_PROXY: http://egress-proxy:3128", "http_proxy: http://egress-proxy:3128",
		"NO_PROXY: mine", "no_proxy: localhost,127.0.0.1,::1,main",
	} {
		if !strings.Contains(doc, want) {
			t.Errorf("steps lack %q:\n%s", want, doc)
		}
	}

	put("task.toml", "[environment]\nallowed_hosts = [\"ok.test\", \"http://bad.test\"]\n")
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), "environment.allowed_hosts[1]") {
		t.Errorf("Load with a URL in allowed_hosts: %v, want an error naming the key", err)
	}
	put("task.toml", "[environment]\nallowed_hosts = [\"ok.test\"]\n")
	put("environment/docker-compose.yaml", "services:\n  main:\n    build: .\n  egress-proxy:\n    image: x\n")
	if _, err := LoadNative(dir, Options{Agent: AgentNop}); !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "a service is named egress-proxy") {
		t.Errorf("LoadNative with a service named egress-proxy: %v, want it refused", err)
	}
}

// A task whose [agent] or [verifier] network mode differs from its [environment]'s runs behind
// the egress proxy in every phase, the proxy starting with the environment's policy ("public":
// --any) and reading each phase's from PolicyFile, written by an exec step in its sandbox just
// before the agent (none for nop) and just before the verifier. A task whose phases all keep the
// environment's mode gets neither the proxy nor the steps.
func TestNativePhaseNetworks(t *testing.T) {
	dir, put := taskFolder(t)
	put("instruction.md", "do it")
	put("environment/Dockerfile", "FROM x")
	put("solution/solve.sh", "true")
	put("task.toml", "[agent]\nnetwork_mode = \"no-network\"\n[verifier]\nallowed_hosts = [\"v.test\", \"*.v.test\"]\n")
	steps := func(o Options) map[string][]string {
		t.Helper()
		tk, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := Native(tk, o); err != nil { // the steps as agentenv reads them
			t.Fatal(err)
		}
		doc, err := native(tk, o.normal())
		if err != nil {
			t.Fatal(err)
		}
		out := map[string][]string{}
		for _, s := range doc.Steps {
			deps, _ := s["depends_on"].([]string)
			cmd, _ := s["command"].([]string)
			out[s["id"].(string)] = append([]string{strings.Join(deps, ","), "|"}, cmd...)
		}
		return out
	}
	got := steps(Options{Agent: AgentOracle})
	want := map[string]string{
		egressStep:       "network,egress_network | /agentenv serve egress-proxy --listen :3128 --any --policy-file " + PolicyFile,
		"network_agent":  sandboxStep + " | /agentenv serve egress-policy --file " + PolicyFile,
		"agent":          "network_agent |",
		"network_verify": "agent | /agentenv serve egress-policy --file " + PolicyFile + " --allow v.test,*.v.test",
		"verify":         "network_verify |",
	}
	for id, w := range want {
		if g := strings.Join(got[id], " "); g != w {
			t.Errorf("step %s: %q, want %q", id, g, w)
		}
	}
	if _, ok := got[networkStep]; !ok {
		t.Errorf("no isolated network step: %v", got)
	}
	if got := steps(Options{Agent: AgentNop}); got["network_agent"] != nil || strings.Join(got["network_verify"], " ") != sandboxStep+" | /agentenv serve egress-policy --file "+PolicyFile+" --allow v.test,*.v.test" {
		t.Errorf("nop: network_agent %q, network_verify %q; want only the verifier's switch, after the sandbox", got["network_agent"], got["network_verify"])
	}

	put("task.toml", "[environment]\nnetwork_mode = \"no-network\"\n[agent]\nnetwork_mode = \"no-network\"\n")
	if got := steps(Options{Agent: AgentOracle}); got[egressStep] != nil || got["network_agent"] != nil || got["network_verify"] != nil {
		t.Errorf("phases that keep the environment's mode: steps %v, want no proxy and no switch", got)
	}
}

// Artifacts are collected last, each from the sandbox of its service: Harbor's /logs/artifacts/
// and the main container's entries (the task's, then its steps', each once) from the container,
// a compose service's from that service's sandbox, one of no such service nowhere; every path
// optional, and a failure leaves the outcome alone.
func TestArtifactSteps(t *testing.T) {
	tk := &Task{
		Artifacts: []Artifact{{Source: "/app/out"}, {Source: "/var/log/db.log", Service: "db"}, {Source: "/x", Service: "ghost"}},
		Steps:     []Step{{Artifacts: []Artifact{{Source: "/app/out"}, {Source: "/app/step.txt", Service: MainService}}}},
	}
	env := []step{{"id": sandboxStep, "type": task.TypeDeploySandbox}, {"id": "svc_db", "type": task.TypeDeploySandbox}}
	got := artifactSteps(tk, env, "verify_1")
	want := []step{
		{"id": "artifacts", "type": task.TypeCollectFiles, "sandbox": sandboxStep, "paths": []string{LogArtifactsDir, "/app/out", "/app/step.txt"},
			"optional": true, "max_bytes": artifactBytes, "fail_task_on_error": false, "depends_on": []string{"verify_1"}},
		{"id": "artifacts_svc_db", "type": task.TypeCollectFiles, "sandbox": "svc_db", "paths": []string{"/var/log/db.log"},
			"optional": true, "max_bytes": artifactBytes, "fail_task_on_error": false, "depends_on": []string{"verify_1"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("artifact steps\n %v\nwant\n %v", got, want)
	}
}

// taskFolder is an empty task folder and a function that writes a file of it, its folders made.
func taskFolder(t *testing.T) (string, func(name, text string)) {
	dir := t.TempDir()
	return dir, func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
