// Package modeltest is a test double for a model endpoint, standing in for a model we cannot
// reach in tests: an HTTP server that answers OpenAI's chat completions
// (POST /v1/chat/completions) and Anthropic's messages (POST /v1/messages) from one script of
// replies, with the usage numbers the script gives, and keeps every request so a test can
// check what the agent sent.
package modeltest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"
)

// Call is a tool call a Reply asks for.
type Call struct {
	ID, Name string
	Args     string // JSON object text
}

// Reply is one model turn of the script.
type Reply struct {
	Text                      string
	Calls                     []Call
	InputTokens, OutputTokens int64
	Delay                     time.Duration // how long the server waits before it answers
}

// Request is one request the server saw.
type Request struct {
	Path string
	Auth string // the x-api-key header, or else Authorization
	Body map[string]any
}

// Server serves a script. Requests past the script's end are answered 500 "script exhausted".
type Server struct {
	*httptest.Server

	mu       sync.Mutex
	script   []Reply
	requests []Request
}

// New starts a server of script, closed at the end of tb.
func New(tb testing.TB, script ...Reply) *Server {
	s := &Server{script: script}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	tb.Cleanup(s.Close)
	return s
}

// OpenAIURL is the base URL of the OpenAI-compatible API.
func (s *Server) OpenAIURL() string { return s.URL + "/v1" }

// AnthropicURL is the base URL of the Anthropic API.
func (s *Server) AnthropicURL() string { return s.URL + "/" }

// Requests are the requests seen so far.
func (s *Server) Requests() []Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Request(nil), s.requests...)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || (r.URL.Path != "/v1/chat/completions" && r.URL.Path != "/v1/messages") {
		http.NotFound(w, r)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	auth := r.Header.Get("X-Api-Key")
	if auth == "" {
		auth = r.Header.Get("Authorization")
	}
	s.mu.Lock()
	n := len(s.requests)
	s.requests = append(s.requests, Request{Path: r.URL.Path, Auth: auth, Body: body})
	s.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	if n >= len(s.script) {
		w.WriteHeader(http.StatusInternalServerError)
		if r.URL.Path == "/v1/messages" {
			fmt.Fprint(w, `{"type":"error","error":{"type":"api_error","message":"script exhausted"}}`)
		} else {
			fmt.Fprint(w, `{"error":{"message":"script exhausted","type":"server_error"}}`)
		}
		return
	}
	rep := s.script[n]
	if rep.Delay > 0 {
		select {
		case <-time.After(rep.Delay):
		case <-r.Context().Done():
			return
		}
	}
	model, _ := body["model"].(string)
	var out any
	if r.URL.Path == "/v1/messages" {
		out = anthropicReply(model, n, rep)
	} else {
		out = openaiReply(model, n, rep)
	}
	json.NewEncoder(w).Encode(out)
}

func openaiReply(model string, n int, rep Reply) any {
	var calls []any
	for _, c := range rep.Calls {
		calls = append(calls, map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Args}})
	}
	msg := map[string]any{"role": "assistant", "content": rep.Text}
	finish := "stop"
	if len(calls) > 0 {
		msg["tool_calls"], finish = calls, "tool_calls"
	}
	return map[string]any{
		"id": fmt.Sprintf("chatcmpl-%d", n), "object": "chat.completion", "created": 0, "model": model,
		"choices": []any{map[string]any{"index": 0, "finish_reason": finish, "message": msg}},
		"usage":   map[string]any{"prompt_tokens": rep.InputTokens, "completion_tokens": rep.OutputTokens, "total_tokens": rep.InputTokens + rep.OutputTokens},
	}
}

func anthropicReply(model string, n int, rep Reply) any {
	content := []any{}
	if rep.Text != "" {
		content = append(content, map[string]any{"type": "text", "text": rep.Text})
	}
	for _, c := range rep.Calls {
		content = append(content, map[string]any{"type": "tool_use", "id": c.ID, "name": c.Name, "input": json.RawMessage(c.Args)})
	}
	stop := "end_turn"
	if len(rep.Calls) > 0 {
		stop = "tool_use"
	}
	return map[string]any{
		"id": fmt.Sprintf("msg_%d", n), "type": "message", "role": "assistant", "model": model,
		"content": content, "stop_reason": stop,
		"usage": map[string]any{"input_tokens": rep.InputTokens, "output_tokens": rep.OutputTokens},
	}
}
