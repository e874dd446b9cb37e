package a2a

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	sdk "github.com/a2aproject/a2a-go/a2a"
	"github.com/a2aproject/a2a-go/a2asrv"
	"github.com/a2aproject/a2a-go/a2asrv/eventqueue"

	"github.com/agentenv/agentenv/agent"
)

// RPCPath is where a Server answers A2A JSON-RPC.
const RPCPath = "/a2a"

// ServerOptions describe the agent a Server serves.
type ServerOptions struct {
	Name        string // the card's name
	Description string
	Log         *slog.Logger // default: discard
	// Dir holds each task's trajectory file while the server runs; default a temporary dir.
	Dir string
}

// Server serves an agent.Agent over A2A with mcp-config, agent-config and trajectory. The
// gateway of a prompt is the last one mcp-config added, else the first of the message's
// agentenv.mcp_servers metadata. It is an http.Handler.
type Server struct {
	ag   agent.Agent
	opts ServerOptions
	mux  *http.ServeMux

	mu     sync.Mutex
	mcp    []MCPServer
	cfg    agentConfigBody
	trajs  map[sdk.TaskID]string
	ownDir bool
}

// agentConfigBody is agent-config's request: the fields a Server lists on its card.
type agentConfigBody struct {
	Model          string `json:"model,omitempty"`
	SystemPrompt   string `json:"system_prompt,omitempty"`
	MaxTurns       int    `json:"max_turns,omitempty"`
	TimeoutSeconds int    `json:"timeout_seconds,omitempty"`
}

var configFieldNames = []string{"model", "system_prompt", "max_turns", "timeout_seconds"}

// NewServer returns a Server of ag.
func NewServer(ag agent.Agent, o ServerOptions) (*Server, error) {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Name == "" {
		o.Name = "agentenv agent"
	}
	own := o.Dir == ""
	if own {
		d, err := os.MkdirTemp("", "agentenv-a2a-")
		if err != nil {
			return nil, fmt.Errorf("a2a server: %w", err)
		}
		o.Dir = d
	}
	s := &Server{ag: ag, opts: o, mux: http.NewServeMux(), trajs: map[sdk.TaskID]string{}, ownDir: own}
	h := a2asrv.NewHandler(&executor{s: s}, a2asrv.WithLogger(o.Log))
	s.mux.Handle(RPCPath, a2asrv.NewJSONRPCHandler(h))
	s.mux.HandleFunc("GET "+CardPath, s.card)
	s.mux.HandleFunc("GET "+LegacyCardPath, s.card)
	s.mux.HandleFunc("POST "+defaultEndpoints[ExtMCPConfig], s.addMCP)
	s.mux.HandleFunc("GET "+defaultEndpoints[ExtMCPConfig], s.listMCP)
	s.mux.HandleFunc("POST "+defaultEndpoints[ExtAgentConfig], s.setConfig)
	s.mux.HandleFunc("POST "+defaultEndpoints[ExtTrajectory], s.trajectory)
	return s, nil
}

// Close removes the trajectories the server kept in a directory it made itself.
func (s *Server) Close() error {
	if !s.ownDir {
		return nil
	}
	return os.RemoveAll(s.opts.Dir)
}

// ServeHTTP answers the card, the extensions and A2A JSON-RPC.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.mux.ServeHTTP(w, r) }

// Card is the card the server gives a client that reached it at base (http://host:port).
func (s *Server) Card(base string) sdk.AgentCard {
	ext := func(uri, desc string, params map[string]any) sdk.AgentExtension {
		p := map[string]any{"endpoint": defaultEndpoints[uri]}
		for k, v := range params {
			p[k] = v
		}
		return sdk.AgentExtension{URI: uri, Description: desc, Params: p}
	}
	return sdk.AgentCard{
		Name:               s.opts.Name,
		Description:        s.opts.Description,
		URL:                base + RPCPath,
		PreferredTransport: sdk.TransportProtocolJSONRPC,
		ProtocolVersion:    "0.3.0",
		Version:            "1",
		DefaultInputModes:  []string{"text"},
		DefaultOutputModes: []string{"text", "application/json"},
		Capabilities: sdk.AgentCapabilities{Extensions: []sdk.AgentExtension{
			ext(ExtMCPConfig, "Register MCP servers the agent should use.", map[string]any{"methods": map[string]any{
				"add":  map[string]any{"method": "POST", "request": map[string]any{"required": []string{"url"}, "optional": []string{"headers", "name"}}},
				"list": map[string]any{"method": "GET", "response": map[string]any{"required": []string{"mcp_servers"}}},
			}}),
			ext(ExtAgentConfig, "Set agent configuration.", map[string]any{"methods": map[string]any{
				"set": map[string]any{"method": "POST", "request": map[string]any{"supported": configFieldNames}},
			}}),
			ext(ExtTrajectory, "Retrieve an agent trajectory.", map[string]any{"methods": map[string]any{
				"get": map[string]any{"method": "POST", "request": map[string]any{"required": []string{"task_id"}}},
			}}),
		}},
		Skills: []sdk.AgentSkill{{ID: "act", Name: "act", Description: "Acts in an env through its MCP gateway.", Tags: []string{"mcp"}}},
	}
}

func (s *Server) card(w http.ResponseWriter, r *http.Request) {
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	writeJSON(w, http.StatusOK, s.Card(scheme+"://"+r.Host))
}

func (s *Server) addMCP(w http.ResponseWriter, r *http.Request) {
	var m MCPServer
	if !readJSON(w, r, &m) {
		return
	}
	if m.URL == "" {
		http.Error(w, "url: required", http.StatusUnprocessableEntity)
		return
	}
	s.mu.Lock()
	s.mcp = append(s.mcp, m)
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

func (s *Server) listMCP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	list := make([]MCPServer, len(s.mcp))
	for i, m := range s.mcp {
		list[i] = MCPServer{Name: m.Name, URL: m.URL} // headers carry tokens: write-only
	}
	writeJSON(w, http.StatusOK, map[string]any{"mcp_servers": list})
}

func (s *Server) setConfig(w http.ResponseWriter, r *http.Request) {
	var c agentConfigBody
	if !readJSON(w, r, &c) {
		return
	}
	s.mu.Lock()
	s.cfg = c
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, map[string]any{"ok": true})
}

func (s *Server) trajectory(w http.ResponseWriter, r *http.Request) {
	var q struct {
		TaskID string `json:"task_id"`
	}
	if !readJSON(w, r, &q) {
		return
	}
	s.mu.Lock()
	path, ok := s.trajs[sdk.TaskID(q.TaskID)]
	s.mu.Unlock()
	if !ok {
		http.Error(w, "task_id: unknown task", http.StatusNotFound)
		return
	}
	lines, err := readLines(path)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"trajectory": lines})
}

// prompt is what a message asks, with the server's gateway and config.
func (s *Server) prompt(rc *a2asrv.RequestContext) (agent.Prompt, error) {
	var p agent.Prompt
	if rc.Message != nil {
		var a agent.Answer
		fillAnswer(&a, rc.Message.Parts)
		p.Text = a.Text
	}
	s.mu.Lock()
	cfg, mcp := s.cfg, s.mcp
	s.mu.Unlock()
	p.Model, p.SystemPrompt, p.MaxTurns = cfg.Model, cfg.SystemPrompt, cfg.MaxTurns
	p.Timeout = time.Duration(cfg.TimeoutSeconds) * time.Second
	if len(mcp) > 0 {
		m := mcp[len(mcp)-1]
		p.Gateway = agent.Gateway{Name: m.Name, URL: m.URL, Headers: m.Headers}
	} else if rc.Message != nil {
		if raw, ok := rc.Message.Metadata[MetadataMCPServers]; ok {
			b, _ := json.Marshal(raw)
			var list []MCPServer
			if err := json.Unmarshal(b, &list); err != nil {
				return p, fmt.Errorf("metadata %s: %w", MetadataMCPServers, err)
			}
			if len(list) > 0 {
				p.Gateway = agent.Gateway{Name: list[0].Name, URL: list[0].URL, Headers: list[0].Headers}
			}
		}
	}
	if p.Text == "" {
		return p, errors.New("message: no text part")
	}
	return p, nil
}

// executor runs one task: the agent's prompt, then its answer as an artifact.
type executor struct{ s *Server }

func (e *executor) Execute(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	s := e.s
	fail := func(reason, kind string) error {
		msg := sdk.NewMessageForTask(sdk.MessageRoleAgent, rc, sdk.TextPart{Text: reason})
		msg.Metadata = map[string]any{MetadataErrorKind: kind}
		ev := sdk.NewStatusUpdateEvent(rc, sdk.TaskStateFailed, msg)
		ev.Final = true
		return q.Write(ctx, ev)
	}
	if rc.StoredTask == nil {
		if err := q.Write(ctx, sdk.NewSubmittedTask(rc, rc.Message)); err != nil {
			return err
		}
	}
	p, err := s.prompt(rc)
	if err != nil {
		return fail(err.Error(), ErrorKindAgent)
	}
	path := filepath.Join(s.opts.Dir, string(rc.TaskID)+".jsonl")
	tr, err := agent.Create(path)
	if err != nil {
		return fail(err.Error(), ErrorKindInfra)
	}
	s.mu.Lock()
	s.trajs[rc.TaskID] = path
	s.mu.Unlock()
	if err := q.Write(ctx, sdk.NewStatusUpdateEvent(rc, sdk.TaskStateWorking, nil)); err != nil {
		tr.Close()
		return err
	}
	ans, err := s.ag.Prompt(ctx, p, tr)
	tr.Close()
	s.opts.Log.Info("a2a prompt", "task", rc.TaskID, "stop", ans.Stop, "err", err)
	if err != nil {
		kind := ErrorKindInfra
		if errors.Is(err, agent.ErrAgent) {
			kind = ErrorKindAgent
		}
		return fail(err.Error(), kind)
	}
	parts := sdk.ContentParts{sdk.TextPart{Text: ans.Text}}
	if len(ans.Structured) > 0 {
		var data map[string]any
		if json.Unmarshal(ans.Structured, &data) == nil {
			parts = append(parts, sdk.DataPart{Data: data})
		}
	}
	if err := q.Write(ctx, sdk.NewArtifactEvent(rc, parts...)); err != nil {
		return err
	}
	ev := sdk.NewStatusUpdateEvent(rc, sdk.TaskStateCompleted, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

func (e *executor) Cancel(ctx context.Context, rc *a2asrv.RequestContext, q eventqueue.Queue) error {
	ev := sdk.NewStatusUpdateEvent(rc, sdk.TaskStateCanceled, nil)
	ev.Final = true
	return q.Write(ctx, ev)
}

// readLines reads a trajectory file the server's agent wrote.
func readLines(path string) ([]agent.Line, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("trajectory: %w", err)
	}
	lines := []agent.Line{}
	dec := json.NewDecoder(bytes.NewReader(b))
	for dec.More() {
		var l agent.Line
		if err := dec.Decode(&l); err != nil {
			return nil, fmt.Errorf("trajectory %s: %w", path, err)
		}
		lines = append(lines, l)
	}
	return lines, nil
}

func readJSON(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<20))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		http.Error(w, "body: "+err.Error(), http.StatusUnprocessableEntity)
		return false
	}
	return true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}
