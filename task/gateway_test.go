package task_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/task"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// notesGateway is a stand-in for a deployed notes env behind its gateway: an in-test MCP
// server (the official Go SDK over streamable HTTP) with notes tools kept in memory, the
// data plane at /agentenv, and bearer-token authentication on every route.
type notesGateway struct {
	token      string            // the admin token: every route
	roleTokens map[string]string // role -> token: /mcp only, as the real gateway's /mcp and /step
	srv        *httptest.Server

	mu           sync.Mutex
	notes        []note
	unauthorized int
	roleMCP      map[string]int // /mcp requests per role token
	serverData   int            // requests on /servers/notes/agentenv, the notes server's own data route
}

type note struct {
	ID    int      `json:"id"`
	Title string   `json:"title"`
	Body  string   `json:"body"`
	Tags  []string `json:"tags"`
}

type noteInput struct {
	Title string   `json:"title"`
	Body  string   `json:"body,omitempty"`
	Tags  []string `json:"tags,omitempty"`
}

type notesResult struct {
	Notes []note `json:"notes"`
}

// notesScreenshot is the image the notes gateway's screenshot tool answers.
var notesScreenshot = []byte("\x89PNG\r\n\x1a\nnotes")

func newNotesGateway(tb testing.TB) *notesGateway {
	tb.Helper()
	g := &notesGateway{token: "gateway-token-s3cret", roleMCP: map[string]int{},
		roleTokens: map[string]string{"default": "default-role-token-s3cret", "reader": "reader-role-token-s3cret"}}
	server := mcp.NewServer(&mcp.Implementation{Name: "notes"}, nil)
	mcp.AddTool(server, &mcp.Tool{Name: "add_note", Description: "Add a note; returns its id."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in noteInput) (*mcp.CallToolResult, map[string]int, error) {
			if in.Title == "" {
				return nil, nil, fmt.Errorf("title is empty")
			}
			return nil, map[string]int{"id": g.add(in)}, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "search_notes", Description: "Find notes whose title or body contains query."},
		func(ctx context.Context, _ *mcp.CallToolRequest, in struct {
			Query string `json:"query"`
		}) (*mcp.CallToolResult, notesResult, error) {
			g.mu.Lock()
			defer g.mu.Unlock()
			out := notesResult{Notes: []note{}}
			for _, n := range g.notes {
				if strings.Contains(n.Title+" "+n.Body, in.Query) {
					out.Notes = append(out.Notes, n)
				}
			}
			return nil, out, nil
		})
	mcp.AddTool(server, &mcp.Tool{Name: "screenshot", Description: "The notes app as an image."},
		func(ctx context.Context, _ *mcp.CallToolRequest, _ struct{}) (*mcp.CallToolResult, any, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "took it"},
				&mcp.ImageContent{MIMEType: "image/png", Data: notesScreenshot}}}, nil, nil
		})
	mux := http.NewServeMux()
	mux.Handle("/mcp", mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return server }, nil))
	mux.HandleFunc("POST /agentenv", g.serveData)
	mux.HandleFunc("POST /servers/notes/agentenv", func(w http.ResponseWriter, r *http.Request) {
		g.mu.Lock()
		g.serverData++
		g.mu.Unlock()
		g.serveData(w, r)
	})
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for role, tok := range g.roleTokens {
			if r.Header.Get("Authorization") == "Bearer "+tok && r.URL.Path == "/mcp" {
				g.mu.Lock()
				g.roleMCP[role]++
				g.mu.Unlock()
				mux.ServeHTTP(w, r)
				return
			}
		}
		if r.Header.Get("Authorization") != "Bearer "+g.token {
			g.mu.Lock()
			g.unauthorized++
			g.mu.Unlock()
			http.Error(w, "unauthorized", http.StatusUnauthorized)
			return
		}
		mux.ServeHTTP(w, r)
	}))
	tb.Cleanup(g.srv.Close)
	return g
}

func (g *notesGateway) add(in noteInput) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if in.Tags == nil {
		in.Tags = []string{}
	}
	n := note{ID: len(g.notes) + 1, Title: in.Title, Body: in.Body, Tags: in.Tags}
	g.notes = append(g.notes, n)
	return n.ID
}

func (g *notesGateway) serveData(w http.ResponseWriter, r *http.Request) {
	var req envproto.Request
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	resp := envproto.Response{JSONRPC: "2.0", ID: req.ID}
	switch req.Method {
	case envproto.MethodReset:
		g.mu.Lock()
		g.notes = nil
		g.mu.Unlock()
		resp.Result = json.RawMessage(`{}`)
	case envproto.MethodAdd:
		var p envproto.AddParams
		_ = json.Unmarshal(req.Params, &p)
		for _, part := range p.Parts {
			switch part.Kind {
			case "data":
				var in noteInput
				_ = json.Unmarshal(part.Data, &in)
				g.add(in)
			case "text":
				title, _, _ := strings.Cut(part.Text, "\n")
				g.add(noteInput{Title: title, Body: part.Text})
			}
		}
		resp.Result = json.RawMessage(`{}`)
	case envproto.MethodGet:
		g.mu.Lock()
		var res envproto.GetResult
		for _, n := range g.notes {
			b, _ := json.Marshal(n)
			res.Parts = append(res.Parts, envproto.Part{Kind: "data", Data: b})
		}
		g.mu.Unlock()
		b, _ := json.Marshal(res)
		resp.Result = b
	default:
		resp.Error = &envproto.Error{Code: envproto.CodeMethodNotFound, Message: "no method " + req.Method}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(resp)
}

// fakeDeployer "deploys" any env file as the notes gateway, and counts teardowns.
type fakeDeployer struct {
	g *notesGateway

	mu        sync.Mutex
	deployed  []string
	tornDown  []string
	lastOpts  task.DeployOptions
	deployErr error
}

var _ task.EnvDeployer = (*fakeDeployer)(nil)

func (d *fakeDeployer) Deploy(ctx context.Context, envFile string, opts task.DeployOptions) (task.DeployedEnv, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.deployErr != nil {
		return task.DeployedEnv{}, d.deployErr
	}
	id := fmt.Sprintf("dep-%d", len(d.deployed)+1)
	d.deployed = append(d.deployed, id)
	d.lastOpts = opts
	return task.DeployedEnv{ID: id, GatewayURL: d.g.srv.URL + "/mcp", Token: d.g.token, Tokens: d.g.roleTokens,
		DatabaseURL: "postgres://notes:db-pass-s3cret@127.0.0.1:1/notes"}, nil
}

func (d *fakeDeployer) Teardown(ctx context.Context, id string) (agentenv.Receipt, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.tornDown = append(d.tornDown, id)
	return agentenv.Receipt{Items: []agentenv.ReceiptItem{{Record: id + "-gw", Provider: "fake", Outcome: agentenv.OutcomeTerminated}}}, nil
}

// open reports the deployments not torn down.
func (d *fakeDeployer) open() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []string
	for _, id := range d.deployed {
		found := false
		for _, t := range d.tornDown {
			found = found || t == id
		}
		if !found {
			out = append(out, id)
		}
	}
	return out
}

// recordJSON returns the run record of id as JSON, to look for secrets in it.
func recordJSON(tb testing.TB, r *rig, id string) string {
	tb.Helper()
	doc, err := r.ledger.Runs().Get(tb.Context(), id)
	if err != nil {
		tb.Fatalf("Runs().Get(%s) = %v", id, err)
	}
	b, _ := json.Marshal(doc)
	return string(b)
}

func TestGatewaySteps(t *testing.T) {
	g := newNotesGateway(t)
	r := newRig(t, nil)
	dep := &fakeDeployer{g: g}
	r.runner.Deployer = dep
	tk := mustParse(t, "gw.yaml", `
steps:
- {id: env, type: deploy_env, file: env.yaml}
- id: seed
  type: load_data
  env: env
  parts:
  - data: {title: groceries, body: "milk, eggs"}
  - text: "standup\nship it"
- id: add
  type: call_tool
  env: env
  tool: add_note
  arguments: {title: "<title>", body: "Tuesday 10:00"}
- id: agent
  type: prompt_agent
  env: env
  agent: scripted
  calls:
  - {tool: search_notes, arguments: {query: milk}}
- {id: found, type: response_matches, step: agent, contains: groceries}
- id: ref
  type: response_matches
  step: add
  output: json
  equals: '{"id":3}'
- id: tool
  type: tool_result
  env: env
  tool: search_notes
  arguments: {query: "${steps.add.outputs.text}"}
  fail_task_on_error: false
  expect: {contains: x}
- id: dentist
  type: tool_result
  env: env
  tool: search_notes
  arguments: {query: Tuesday}
  expect: {contains: "Tuesday 10:00", json: {notes: [{title: dentist}]}}
- id: export
  type: data_get
  env: env
  expect: {count: 3, contains: standup, parts: [{kind: data, data: {title: dentist}}]}
- id: half
  type: data_get
  env: env
  expect: {count: 2, parts: [{kind: data, data: {title: groceries}}]}
- {id: db, type: sql, env: env, query: "select 1", expect: {value: "1"}, fail_task_on_error: false}
- {id: all, type: aggregate, verifiers: [found, ref, dentist, export], mode: all_pass}
- {id: avg, type: aggregate, verifiers: [half, tool], mode: weighted_average, weights: {half: 3}}
`)
	seeds := t.TempDir() + "/seeds.csv"
	writeFile(t, seeds, "title\ndentist\n")
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{Seeds: seeds})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	ep := sum.Episodes[0]
	steps := map[string]agentenv.StepRecord{}
	for _, s := range ep.Steps {
		steps[s.ID] = s
	}
	wantScore := map[string]float64{"found": 1, "ref": 1, "dentist": 1, "export": 1, "half": 0.5, "tool": 0, "all": 1, "avg": 0.375, "db": 0}
	for id, want := range wantScore {
		s := steps[id]
		if s.Score == nil || *s.Score != want {
			t.Errorf("step %s: score %v (status %s, error %q, rows %s), want %v", id, s.Score, s.Status, s.Error, s.Outputs["rows"], want)
		}
	}
	if steps["db"].Status != agentenv.StepFailed || !strings.Contains(steps["db"].Error, "connect to service DB") {
		t.Errorf("sql step on an unreachable DB: %+v, want failed with the reason", steps["db"])
	}
	if steps["env"].Outputs["database_url"] != "[redacted]" {
		t.Errorf("database_url output recorded as %q, want redacted", steps["env"].Outputs["database_url"])
	}
	// The task score combines the verifiers no aggregate consumes: all, avg and db. db could
	// not reach its DB: an infrastructure error, so the episode is an error, no sample.
	if ep.Score == nil || *ep.Score != 0 || ep.Outcome != task.OutcomeError || steps["db"].ErrorKind != agentenv.StepErrorInfra {
		t.Errorf("episode: %s score %v (db %s), want error with 0 (all_pass of 1, 0.5, 0)", ep.Outcome, ep.Score, steps["db"].ErrorKind)
	}
	if open := dep.open(); len(open) != 0 || len(dep.tornDown) != 1 {
		t.Errorf("deployments left %v, torn down %v; want the one torn down", open, dep.tornDown)
	}
	if dep.lastOpts.Run != ep.Run {
		t.Errorf("DeployOptions.Run = %q, want the run id %q", dep.lastOpts.Run, ep.Run)
	}
	if g.unauthorized != 0 {
		t.Errorf("gateway refused %d requests: the bearer token was missing", g.unauthorized)
	}
	if g.roleMCP["default"] == 0 || g.roleMCP["reader"] != 0 {
		t.Errorf("role-token requests %v: want the agent on the default role's token only", g.roleMCP)
	}
	rec := recordJSON(t, r, ep.Run)
	for _, secret := range []string{g.token, g.roleTokens["default"], "db-pass-s3cret"} {
		if strings.Contains(rec, secret) {
			t.Errorf("run record holds a secret %q: %s", secret, rec)
		}
	}
	r.assertClean(t)
}

// load_data and data_get with server: use that server's own data route, which an env of
// several data planes needs; a server the gateway does not have fails the step plainly.
func TestDataStepsOfOneServer(t *testing.T) {
	g := newNotesGateway(t)
	r := newRig(t, nil)
	r.runner.Deployer = &fakeDeployer{g: g}
	tk := mustParse(t, "data.yaml", `
steps:
- {id: env, type: deploy_env, file: env.yaml}
- {id: seed, type: load_data, env: env, server: notes, parts: [{text: standup}]}
- {id: got, type: data_get, env: env, server: notes, expect: {count: 1, contains: standup}}
- {id: other, type: data_get, env: env, server: calendar, expect: {count: 0}, fail_task_on_error: false}
`)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	steps := map[string]agentenv.StepRecord{}
	for _, s := range sum.Episodes[0].Steps {
		steps[s.ID] = s
	}
	if s := steps["got"]; s.Score == nil || *s.Score != 1 {
		t.Errorf("data_get of the notes server: %+v, want score 1", s)
	}
	if s := steps["other"]; s.Status != agentenv.StepFailed || !strings.Contains(s.Error, "404") {
		t.Errorf("data_get of a server the gateway lacks: %+v, want failed with the gateway's 404", s)
	}
	if g.serverData != 3 { // reset, add and get
		t.Errorf("the notes server's data route served %d requests, want 3", g.serverData)
	}
	r.assertClean(t)
}

// prompt_agent hands the agent its step's role token, and fails plainly for a role the env
// does not have.
func TestPromptAgentRoleToken(t *testing.T) {
	g := newNotesGateway(t)
	r := newRig(t, nil)
	r.runner.Deployer = &fakeDeployer{g: g}
	tk := mustParse(t, "role.yaml", `
steps:
- {id: env, type: deploy_env, file: env.yaml}
- id: agent
  type: prompt_agent
  env: env
  role: reader
  agent: scripted
  calls:
  - {tool: search_notes, arguments: {query: milk}}
- id: nobody
  type: prompt_agent
  env: env
  role: readr
  fail_task_on_error: false
  agent: scripted
  calls:
  - {tool: search_notes, arguments: {query: milk}}
`)
	sum, err := r.runner.Run(t.Context(), tk, task.RunOptions{})
	if err != nil {
		t.Fatalf("Run = %v", err)
	}
	steps := map[string]agentenv.StepRecord{}
	for _, s := range sum.Episodes[0].Steps {
		steps[s.ID] = s
	}
	if steps["agent"].Status != agentenv.StepPassed {
		t.Errorf("agent as reader: %+v", steps["agent"])
	}
	if g.roleMCP["reader"] == 0 || g.roleMCP["default"] != 0 {
		t.Errorf("role-token requests %v: want the reader's only", g.roleMCP)
	}
	if steps["nobody"].Status != agentenv.StepFailed || !strings.Contains(steps["nobody"].Error, `no role "readr"`) ||
		!strings.Contains(steps["nobody"].Error, "reader") {
		t.Errorf("agent of an unknown role: %+v, want failed naming the roles", steps["nobody"])
	}
}
