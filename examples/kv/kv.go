// Package kv is an example env with no database: an in-memory key/value store with the tools
// set, get, list and delete, and a data plane whose parts are data parts {"key", "value"}.
// State lives in the process and is lost when it exits.
package kv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/envsdk"
)

// Config configures [Run].
type Config struct {
	// Listen is the HTTP address (host:port) to serve on, unless Stdio is set.
	Listen string
	// Stdio serves the MCP tools over stdin/stdout instead of HTTP.
	Stdio bool
}

// Run serves the kv env until ctx ends. A nil logger discards.
func Run(ctx context.Context, cfg Config, logger *slog.Logger) error {
	s := New(logger)
	if cfg.Stdio {
		return s.ServeStdio(ctx)
	}
	return s.Serve(ctx, cfg.Listen)
}

// Entry is one key and its value, the shape of a data part.
type Entry struct {
	Key   string `json:"key" jsonschema:"the key"`
	Value string `json:"value" jsonschema:"the value"`
}

// store is the key/value state; safe for concurrent use.
type store struct {
	mu sync.Mutex
	m  map[string]string
}

// New returns the kv env server with an empty store. A nil logger discards.
func New(logger *slog.Logger) *envsdk.Server {
	st := &store{m: map[string]string{}}
	s := envsdk.New(envsdk.Options{Name: "kv", Description: "An in-memory key/value store.", Logger: logger})

	envsdk.AddTool(s, "set", "Set key to value, replacing any value it had.",
		func(ctx context.Context, in Entry) (SetResult, error) {
			if in.Key == "" {
				return SetResult{}, errors.New("key is empty")
			}
			st.mu.Lock()
			defer st.mu.Unlock()
			st.m[in.Key] = in.Value
			return SetResult{OK: true}, nil
		})
	envsdk.AddTool(s, "get", "Get the value of key.",
		func(ctx context.Context, in struct {
			Key string `json:"key" jsonschema:"the key"`
		}) (GetResult, error) {
			st.mu.Lock()
			defer st.mu.Unlock()
			v, ok := st.m[in.Key]
			return GetResult{Value: v, Found: ok}, nil
		})
	envsdk.AddTool(s, "list", "List the entries whose key starts with prefix, sorted by key.",
		func(ctx context.Context, in struct {
			Prefix string `json:"prefix,omitempty" jsonschema:"only keys starting with this; empty lists all"`
		}) (ListResult, error) {
			return ListResult{Entries: st.entries(in.Prefix)}, nil
		})
	envsdk.AddTool(s, "delete", "Delete key.",
		func(ctx context.Context, in struct {
			Key string `json:"key" jsonschema:"the key"`
		}) (DeleteResult, error) {
			st.mu.Lock()
			defer st.mu.Unlock()
			_, ok := st.m[in.Key]
			delete(st.m, in.Key)
			return DeleteResult{Deleted: ok}, nil
		})

	s.HandleReset(func(ctx context.Context) error {
		st.mu.Lock()
		clear(st.m)
		st.mu.Unlock()
		return nil
	})
	s.HandleAdd(st.add)
	s.HandleGet(func(ctx context.Context, p envproto.GetParams) ([]envproto.Part, error) {
		var q struct {
			Prefix string `json:"prefix"`
		}
		if len(p.Query) > 0 && string(p.Query) != "null" {
			if err := json.Unmarshal(p.Query, &q); err != nil {
				return nil, &envproto.Error{Code: envproto.CodeInvalidParams, Message: `query must be {"prefix": "..."}`}
			}
		}
		var parts []envproto.Part
		for _, e := range st.entries(q.Prefix) {
			data, err := json.Marshal(e)
			if err != nil {
				return nil, fmt.Errorf("encode entry %q: %w", e.Key, err)
			}
			parts = append(parts, envproto.Part{Kind: "data", Data: data})
		}
		return parts, nil
	})
	return s
}

// SetResult is the result of the set tool.
type SetResult struct {
	OK bool `json:"ok"`
}

// GetResult is the result of the get tool.
type GetResult struct {
	Value string `json:"value"`
	Found bool   `json:"found"`
}

// ListResult is the result of the list tool.
type ListResult struct {
	Entries []Entry `json:"entries"`
}

// DeleteResult is the result of the delete tool.
type DeleteResult struct {
	Deleted bool `json:"deleted"`
}

// entries returns the entries whose key has prefix, sorted by key.
func (st *store) entries(prefix string) []Entry {
	st.mu.Lock()
	defer st.mu.Unlock()
	out := []Entry{}
	for _, k := range slices.Sorted(maps.Keys(st.m)) {
		if strings.HasPrefix(k, prefix) {
			out = append(out, Entry{Key: k, Value: st.m[k]})
		}
	}
	return out
}

// add stores data parts {"key", "value"}; it takes all of them or none.
func (st *store) add(ctx context.Context, parts []envproto.Part) error {
	entries := make([]Entry, 0, len(parts))
	for i, p := range parts {
		var e Entry
		if p.Kind != "data" {
			return &envproto.Error{Code: envproto.CodeInvalidParams, Message: fmt.Sprintf("parts[%d]: kv takes data parts {key, value}, not %s", i, p.Kind)}
		}
		if err := json.Unmarshal(p.Data, &e); err != nil || e.Key == "" {
			return &envproto.Error{Code: envproto.CodeInvalidParams, Message: fmt.Sprintf("parts[%d]: want {\"key\": non-empty string, \"value\": string}", i)}
		}
		entries = append(entries, e)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	for _, e := range entries {
		st.m[e.Key] = e.Value
	}
	return nil
}
