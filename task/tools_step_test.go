package task_test

import (
	"context"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/mcpclient"
	"github.com/agentenv/agentenv/task"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// TestServeToolsTerminalForA2A: a serve_tools step with terminal: true serves the sandbox's
// terminal tools behind a gateway in this process; an A2A agent given it as env is handed the
// gateway with its role token (not the admin's), its run_command writes the file the verifier
// finds, the call is in the gateway trajectory kept at the episode's end, and the gateway is
// closed after the episode.
func TestServeToolsTerminalForA2A(t *testing.T) {
	ag := &commandRunner{}
	url := a2aAgentURL(t, ag)
	r := newRig(t, nil)
	tk := mustParse(t, "t.yaml", `name: tools
steps:
- {id: sb, type: deploy_sandbox, provider: process}
- {id: tools, type: serve_tools, sandbox: sb, terminal: true}
- {id: agent, type: prompt_agent, env: tools, agent: {a2a: '`+url+`'}, prompt: "mkdir -p out && echo 42 > out/answer.txt && echo wrote", timeout_seconds: 60}
- {id: file, type: file_contains, sandbox: sb, path: out/answer.txt, contains: "42"}
`)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	for _, s := range ep.Steps {
		if s.Status != agentenv.StepPassed {
			t.Errorf("step %s: %s %q", s.ID, s.Status, s.Error)
		}
	}
	if ep.Score == nil || *ep.Score != 1 {
		t.Errorf("score %v, want 1 (%s)", ep.Score, ep.Error)
	}
	ag.mu.Lock()
	handed, tools := ag.handed, slices.Sorted(slices.Values(ag.tools))
	ag.mu.Unlock()
	if handed.Name != "tools" || !strings.HasPrefix(handed.URL, "http://127.0.0.1:") || !strings.HasPrefix(handed.Headers["Authorization"], "Bearer ") {
		t.Errorf("the agent was handed %+v, want the step's gateway with a bearer token", handed)
	}
	if want := []string{"read_file", "run_command", "write_file"}; !slices.Equal(tools, want) {
		t.Errorf("the agent saw tools %v, want %v", tools, want)
	}
	if out := stepOf(ep, "tools").Outputs; !strings.HasPrefix(out["gateway_url"], "http://127.0.0.1:") || out["servers"] != `["terminal"]` {
		t.Errorf("serve_tools outputs %v", out)
	}

	doc, err := r.ledger.Runs().Get(t.Context(), ep.Run)
	if err != nil {
		t.Fatal(err)
	}
	path := doc.Attrs[task.GatewayTrajectoryAttr+"tools"]
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the gateway trajectory (attr %q): %v", path, err)
	}
	for _, want := range []string{`"tool":"run_command"`, `"role":"default"`, `echo 42`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("gateway trajectory lacks %s:\n%s", want, data)
		}
	}

	// The gateway lived only as long as the episode.
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if cs, err := (mcpclient.Client{Headers: handed.Headers, NoStandaloneSSE: true}).Connect(ctx, handed.URL, ""); err == nil {
		cs.Close()
		t.Error("the gateway still answers after the episode")
	}
	r.assertClean(t)
}

// TestServeToolsCheck: a serve_tools step's fields are checked at load, naming the field.
func TestServeToolsCheck(t *testing.T) {
	for _, c := range []struct{ steps, want string }{
		{`- {id: tools, type: serve_tools, sandbox: sb}`, "servers: set servers, terminal: true, or both"},
		{`- {id: tools, type: serve_tools, sandbox: sb, servers: [{name: a, command: [x]}, {name: a, command: [y]}]}`, `servers[1].name: "a" is served twice`},
		{`- {id: tools, type: serve_tools, sandbox: sb, terminal: true, servers: [{name: terminal, command: [x]}]}`, `servers[0].name: "terminal" is the terminal's name`},
		{`- {id: tools, type: serve_tools, sandbox: sb, servers: [{name: "a b", command: [x]}]}`, "servers[0].name: want 1-64 of letters"},
		{`- {id: tools, type: serve_tools, sandbox: sb, servers: [{name: a}]}`, "command"},
		{`- {id: tools, type: serve_tools, sandbox: nope, terminal: true}`, "nope"},
		{`- {id: tools, type: serve_tools, servers: [{name: a, command: [x]}]}`, "sandbox: want the deploy_sandbox step whose sandbox runs the stdio servers"},
		{`- {id: tools, type: serve_tools, depends_on: [sb], servers: [{name: a, sandbox: sb}]}`, "servers[0].port: want the container port"},
		{`- {id: tools, type: serve_tools, depends_on: [sb], servers: [{name: a, sandbox: sb, port: 8000, command: [x]}]}`, "servers[0].command: a stdio server's"},
		{`- {id: tools, type: serve_tools, servers: [{name: a, port: 8000}]}`, "servers[0].sandbox: want the deploy_sandbox step"},
		{`- {id: tools, type: serve_tools, depends_on: [sb], servers: [{name: a, sandbox: sb, port: 8000, path: mcp}]}`, "servers[0].path: want a path starting with /"},
		{`- {id: tools, type: serve_tools, depends_on: [sb], servers: [{name: a, sandbox: sb, port: 8000, transport: ws}]}`, "servers[0].transport: want streamable-http (the default) or sse"},
		{`- {id: tools, type: serve_tools, servers: [{name: a, sandbox: nope, port: 8000}]}`, `servers[0].sandbox: unknown step "nope"`},
	} {
		src := "name: t\nsteps:\n- {id: sb, type: deploy_sandbox, provider: process}\n" + c.steps + "\n"
		_, err := task.Parse("t.yaml", []byte(src))
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "t.yaml:4") {
			t.Errorf("Parse(%s) = %v, want an error at t.yaml:4 naming %q", c.steps, err, c.want)
		}
	}
}

// TestServeToolsHTTPServers: a serve_tools step reaches MCP servers over HTTP at the port a
// deploy_sandbox step publishes (the process provider publishes a port as itself on 127.0.0.1,
// where this test serves a real go-sdk MCP server over streamable HTTP at /mcp and over SSE at
// /sse); call_tool through the step's gateway reaches both.
func TestServeToolsHTTPServers(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "codes", Version: "v1"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "get_code", Description: "The code."},
		func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "code-7731"}}}, nil, nil
		})
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	mux.Handle("/sse", mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return server }, nil))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)

	r := newRig(t, nil)
	tk := mustParse(t, "t.yaml", `name: tools
steps:
- {id: sb, type: deploy_sandbox, provider: process, ports: [`+port+`]}
- {id: tools, type: serve_tools, depends_on: [sb], servers: [
    {name: http, sandbox: sb, port: `+port+`},
    {name: events, sandbox: sb, port: `+port+`, transport: sse}]}
- {id: call, type: call_tool, env: tools, tool: http__get_code}
- {id: call_sse, type: call_tool, env: tools, tool: events__get_code}
`)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	for _, s := range ep.Steps {
		if s.Status != agentenv.StepPassed {
			t.Errorf("step %s: %s %q", s.ID, s.Status, s.Error)
		}
	}
	for _, id := range []string{"call", "call_sse"} {
		if got := stepOf(ep, id).Outputs["text"]; got != "code-7731" {
			t.Errorf("%s: text %q, want code-7731", id, got)
		}
	}
	if got, want := stepOf(ep, "sb").Outputs["endpoints"], `{"`+port+`":"127.0.0.1:`+port+`"}`; got != want {
		t.Errorf("deploy_sandbox endpoints %s, want %s", got, want)
	}
	if got := stepOf(ep, "tools").Outputs["servers"]; got != `["http","events"]` {
		t.Errorf("serve_tools servers %s", got)
	}
	r.assertClean(t)
}
