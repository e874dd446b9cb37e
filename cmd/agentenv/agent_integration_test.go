//go:build integration

package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/testproc"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
)

// jsAgentDir holds the A2A agent written with the official JS SDK (@a2a-js/sdk) and the MCP
// TypeScript client.
var jsAgentDir, _ = filepath.Abs("../../agent/a2a/testdata/jsagent")

// jsAgentModules installs the JS agent's locked dependencies from the npm registry, once.
// jsAgentModulesMu keeps two tests from running npm ci in the same folder at once.
var jsAgentModulesMu sync.Mutex

func jsAgentModules(t *testing.T) {
	t.Helper()
	jsAgentModulesMu.Lock()
	defer jsAgentModulesMu.Unlock()
	if _, err := os.Stat(filepath.Join(jsAgentDir, "node_modules", "@a2a-js", "sdk")); err == nil {
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = jsAgentDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", jsAgentDir, err, out)
	}
}

// jsAgentImage builds the JS agent into an image on agentenv-node:local, labelled with the
// test's tag, and removes it when the test ends.
func jsAgentImage(t *testing.T, c *cli) string {
	t.Helper()
	jsAgentModules(t)
	tag := "agentenv-test-jsagent:" + c.tag
	df := "FROM agentenv-node:local\nCOPY package.json agent.mjs /app/\nCOPY node_modules /app/node_modules\nWORKDIR /app\nUSER 65534\n"
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "build", "-q", "-t", tag, "--label", "agentenv-test="+c.tag, "-f", "-", jsAgentDir)
	cmd.Stdin = strings.NewReader(df)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output() // the image id alone; the legacy builder warns on stderr
	if err != nil {
		t.Fatalf("docker build %s: %v\n%s", tag, err, stderr.Bytes())
	}
	id := strings.TrimSpace(string(out))
	if !strings.HasPrefix(id, "sha256:") {
		t.Fatalf("docker build -q %s printed %q, want an image id", tag, out)
	}
	t.Cleanup(func() {
		// By id, not tag: removing a tag whose image a container still uses only untags it,
		// and the leftover check would find a nameless image. Such a container is the leak.
		if ps, _ := exec.Command("docker", "ps", "-a", "--filter", "ancestor="+id, "--format", "{{.Names}} {{.Status}} {{.Labels}}").Output(); len(bytes.TrimSpace(ps)) > 0 {
			t.Errorf("containers of %s are left:\n%s", tag, ps)
		}
		// docker rmi -f exits 0 even when it removed nothing: inspect says whether it did.
		out, _ := exec.Command("docker", "rmi", "-f", id).CombinedOutput()
		if exec.Command("docker", "image", "inspect", id).Run() == nil {
			t.Errorf("docker rmi -f %s (%s) left the image: %s", id, tag, out)
		}
	})
	return tag
}

// noRunLeftovers fails if the engine still has anything labelled with a run that out names
// (the agent's sandbox is the run's, not a deployment's), or of the runs' deployments.
func (c *cli) noRunLeftovers(out string) {
	c.t.Helper()
	var ids []string
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "run-") {
			ids = append(ids, strings.Fields(l)[0])
		}
	}
	if len(ids) == 0 {
		c.t.Fatalf("no run id in:\n%s", out)
	}
	left := c.deployLeftovers()
	for _, id := range ids {
		l, err := dockertest.Leftovers(context.Background(), c.dc, map[string]string{agentenv.LabelRun: id})
		if err != nil {
			c.t.Fatal(err)
		}
		left = append(left, l...)
	}
	if len(left) != 0 {
		c.t.Errorf("runs %v left %v", ids, left)
	}
}

// interrupted runs the task file tk, sends SIGINT once stderr shows line, and fails unless the
// run exits 130 and leaves nothing.
func (c *cli) interrupted(tk, line string, after time.Duration) {
	c.t.Helper()
	cmd := c.cmd(c.t.Context(), nil, "run", tk)
	var out, errb testproc.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(errb.String(), line) {
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
			c.t.Fatalf("never saw %q:\n%s", line, errb.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(after)
	start := time.Now()
	_ = cmd.Process.Signal(syscall.SIGINT)
	err := cmd.Wait()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	}
	if code != 130 {
		c.t.Errorf("exit %d after SIGINT, want 130\n%s%s", code, out.String(), errb.String())
	}
	c.t.Logf("SIGINT during %q: exit %d after %s", line, code, time.Since(start).Round(time.Millisecond))
	id := ""
	for _, f := range strings.Fields(errb.String() + " " + out.String()) {
		if strings.HasPrefix(f, "run-") {
			id = f
			break
		}
	}
	c.noRunLeftovers(id + "\n")
}

// TestSIGINTDuringDeployAgent: Ctrl-C while deploy_agent waits for a card: exit 130, nothing left.
func TestSIGINTDuringDeployAgent(t *testing.T) {
	c := newCLI(t)
	tk := writeTask(t, `
name: sigint-deploy
steps:
- {id: agent, type: deploy_agent, provider: docker, image: agentenv-node:local, command: [sleep, "300"], port: 8080, card_wait: 90s}
`)
	c.interrupted(tk, "agent (deploy_agent) running", 1500*time.Millisecond)
}

// TestSIGINTDuringA2APrompt: Ctrl-C while the deployed JS agent works on a prompt: exit 130,
// nothing left.
func TestSIGINTDuringA2APrompt(t *testing.T) {
	c := newCLI(t)
	c.buildRuntimeImage()
	img := jsAgentImage(t, c)
	tk := writeTask(t, `
name: sigint-prompt
steps:
- {id: env, type: deploy_env, file: NOTES_ENV}
- {id: agent, type: deploy_agent, image: `+img+`, command: [node, /app/agent.mjs], env: {DELAY_MS: "60000"}, port: 8080, network: env}
- {id: act, type: prompt_agent, env: env, agent: {deployed: agent}, prompt: slow}
`)
	c.interrupted(tk, "act (prompt_agent) running", time.Second)
}

func writeTask(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "task.yaml")
	notes, _ := filepath.Abs("../../examples/notes/env.yaml")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(body, "NOTES_ENV", notes)), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestDeployedJSAgentAddsANote: deploy_agent starts the JS agent next to the notes env, it gets
// the gateway through mcp-config, adds a note through it, and a sql verifier scores 1.
func TestDeployedJSAgentAddsANote(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.buildRuntimeImage()
	img := jsAgentImage(t, c)
	tk := writeTask(t, `
name: js-a2a
score: all_pass
steps:
- {id: env, type: deploy_env, file: NOTES_ENV}
- {id: agent, type: deploy_agent, image: `+img+`, command: [node, /app/agent.mjs], port: 8080, network: env, card_wait: 60s}
- {id: act, type: prompt_agent, env: env, agent: {deployed: agent}, prompt: a2a-deployed}
- {id: said, type: response_matches, step: act, contains: "via mcp-config"}
- {id: wrote, type: sql, env: env, query: "SELECT count(*) FROM notes.notes WHERE title = 'a2a-deployed' AND body = 'via mcp-config'", expect: {value: "1"}}
`)
	// Three episodes one after another, each deploying the notes env: about 25 s each here,
	// more on a loaded machine.
	ctx, cancel := context.WithTimeout(t.Context(), 6*time.Minute)
	defer cancel()
	r := c.run(ctx, nil, "run", tk, "--k", "3")
	if r.code != 0 || !strings.Contains(r.stdout, "passed: 3 passed") {
		t.Fatalf("run: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, l := range strings.Split(r.stderr, "\n") {
		if strings.Contains(l, "(prompt_agent) passed") || strings.Contains(l, "(deploy_agent) passed") {
			t.Log(l)
		}
	}
	c.noRunLeftovers(r.stdout)
}

// TestHostJSAgentAddsANote: the same agent as a plain process on the host, without the
// extension on its card, driven with {a2a: URL}: it finds the gateway in the message metadata.
func TestHostJSAgentAddsANote(t *testing.T) {
	c := newCLI(t)
	c.buildRuntimeImage()
	port, out := hostJSAgent(t, "MCP_CONFIG=off")
	tk := writeTask(t, fmt.Sprintf(`
name: js-a2a-host
score: all_pass
steps:
- {id: env, type: deploy_env, file: NOTES_ENV}
- {id: act, type: prompt_agent, env: env, agent: {a2a: "http://127.0.0.1:%d"}, prompt: a2a-host}
- {id: said, type: response_matches, step: act, contains: "via metadata"}
- {id: wrote, type: sql, env: env, query: "SELECT count(*) FROM notes.notes WHERE title = 'a2a-host'", expect: {value: "1"}}
`, port))
	r := c.run(t.Context(), nil, "run", tk)
	if r.code != 0 || !strings.Contains(r.stdout, "mean score 1") {
		t.Fatalf("run: exit %d\n%s%s\nagent:\n%s", r.code, r.stdout, r.stderr, out.String())
	}
	c.noRunLeftovers(r.stdout)
}

// hostJSAgent runs the JS agent on this host, with env added to its environment, until the
// test ends: its port on 127.0.0.1, and what it prints.
func hostJSAgent(t *testing.T, env ...string) (int, *testproc.Buffer) {
	t.Helper()
	jsAgentModules(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	ctx, cancel := context.WithCancel(t.Context())
	node := exec.CommandContext(ctx, "node", "agent.mjs")
	node.Dir = jsAgentDir
	node.Env = append(append(os.Environ(), fmt.Sprintf("PORT=%d", port)), env...)
	out := &testproc.Buffer{}
	node.Stdout, node.Stderr = out, out
	if err := node.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		_ = node.Wait()
	})
	return port, out
}

// TestDeployedAgentWithoutCardFails: an agent whose card never appears fails deploy_agent
// within its card_wait, naming the URL, and nothing is left.
func TestDeployedAgentWithoutCardFails(t *testing.T) {
	c := newCLI(t)
	c.buildRuntimeImage()
	tk := writeTask(t, `
name: no-card
steps:
- {id: agent, type: deploy_agent, provider: docker, image: agentenv-node:local, command: [sleep, "300"], port: 8080, card_wait: 3s}
`)
	start := time.Now()
	r := c.run(t.Context(), nil, "run", tk)
	if r.code == 0 || !strings.Contains(r.stdout+r.stderr, "no card at /.well-known/agent-card.json within 3s") || !strings.Contains(r.stdout+r.stderr, "http://127.0.0.1:") {
		t.Fatalf("run: exit %d, want a failure naming the URL\n%s%s", r.code, r.stdout, r.stderr)
	}
	if d := time.Since(start); d > 90*time.Second {
		t.Errorf("took %s", d)
	}
	c.noRunLeftovers(r.stdout)
}

// scriptedModel is a test double for an OpenAI-compatible chat completions endpoint (a model we
// cannot reach here): it asks for add_note once, then answers. It listens on every interface,
// so that a container reaches it through the docker host's bridge address.
func scriptedModel(t *testing.T) (url string, calls func() int) {
	t.Helper()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	n := 0
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct {
				Role string `json:"role"`
			} `json:"messages"`
		}
		_ = json.NewDecoder(r.Body).Decode(&req)
		mu.Lock()
		n++
		mu.Unlock()
		msg := `{"role":"assistant","content":"","tool_calls":[{"id":"c1","type":"function","function":{"name":"add_note","arguments":"{\"title\":\"dentist\",\"body\":\"Tuesday 10:00\"}"}}]}`
		if last := req.Messages[len(req.Messages)-1]; last.Role == "tool" {
			msg = `{"role":"assistant","content":"Added the dentist note."}`
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"choices":[{"message":` + msg + `,"finish_reason":"stop"}]}`))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	// The engine's default bridge: its gateway, else the first address of its subnet (docker
	// 20.10 may leave the gateway out of the IPAM config).
	out, err := exec.Command("docker", "network", "inspect", "bridge", "--format", "{{range .IPAM.Config}}{{.Gateway}} {{.Subnet}}{{end}}").Output()
	if err != nil {
		t.Fatalf("docker bridge address: %v", err)
	}
	host := ""
	for _, f := range strings.Fields(string(out)) {
		if ip := net.ParseIP(f); ip != nil {
			host = f
			break
		}
		if _, n, err := net.ParseCIDR(f); err == nil && host == "" {
			ip := n.IP.To4()
			ip[3]++
			host = ip.String()
		}
	}
	if host == "" {
		t.Fatalf("docker bridge address: none in %q", out)
	}
	return fmt.Sprintf("http://%s:%d/v1", host, ln.Addr().(*net.TCPAddr).Port),
		func() int { mu.Lock(); defer mu.Unlock(); return n }
}

// TestAgentTaskExample: examples/agent-task, `agentenv serve agent` deployed as an A2A agent
// against the scripted model, adds the note the sql verifier looks for.
func TestAgentTaskExample(t *testing.T) {
	c := newCLI(t)
	c.buildRuntimeImage()
	url, calls := scriptedModel(t)
	r := c.run(t.Context(), []string{"AGENTENV_MODEL_BASE_URL=" + url, "AGENTENV_MODEL_NAME=scripted"}, "run", "../../examples/agent-task")
	if r.code != 0 || !strings.Contains(r.stdout, "mean score 1") {
		t.Fatalf("run agent-task: exit %d (model called %d times)\n%s%s", r.code, calls(), r.stdout, r.stderr)
	}
	if calls() != 2 {
		t.Errorf("model called %d times, want 2 (the tool call, then the answer)", calls())
	}
	c.noRunLeftovers(r.stdout)
}
