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
	s, exts := NewWithExtensions(logger)
	if cfg.Stdio {
		return s.ServeStdio(ctx)
	}
	return s.ServeWithExtensions(ctx, cfg.Listen, exts...)
}

// ConfigExtension is the URI of kv's config extension: set_config {read_only} (POST) and
// get_config (GET) at /agentenv/ext/, for a harness (apply_server_config, call_extension),
// never the agent. A read-only store refuses set and delete.
const ConfigExtension = "urn:agentenv:kv-config/v1"

// KVConfig is kv's configuration, as its config extension sets and reads it.
type KVConfig struct {
	ReadOnly bool `json:"read_only"`
}

// Entry is one key and its value, the shape of a data part.
type Entry struct {
	Key   string `json:"key" jsonschema:"the key"`
	Value string `json:"value" jsonschema:"the value"`
}

// store is the key/value state; safe for concurrent use.
type store struct {
	mu  sync.Mutex
	m   map[string]string
	cfg KVConfig
}

// New returns the kv env server with an empty store. A nil logger discards.
func New(logger *slog.Logger) *envsdk.Server {
	s, _ := NewWithExtensions(logger)
	return s
}

// NewWithExtensions is [New] with the config extension's routes, to serve with
// [envsdk.WithExtensions].
func NewWithExtensions(logger *slog.Logger) (*envsdk.Server, []envsdk.Extension) {
	st := &store{m: map[string]string{}}
	s := envsdk.New(envsdk.Options{Name: "kv", Description: "An in-memory key/value store.", Logger: logger})

	envsdk.AddTool(s, "set", "Set key to value, replacing any value it had.",
		func(ctx context.Context, in Entry) (SetResult, error) {
			if in.Key == "" {
				return SetResult{}, errors.New("key is empty")
			}
			st.mu.Lock()
			defer st.mu.Unlock()
			if st.cfg.ReadOnly {
				return SetResult{}, errors.New("the store is read-only")
			}
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
			if st.cfg.ReadOnly {
				return DeleteResult{}, errors.New("the store is read-only")
			}
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
	return s, st.extensions()
}

// extensions are the config extension's methods.
func (st *store) extensions() []envsdk.Extension {
	schema := map[string]any{"type": "object", "properties": map[string]any{"read_only": map[string]any{"type": "boolean"}},
		"additionalProperties": false}
	return []envsdk.Extension{{
		URI: ConfigExtension, Name: "set_config", Description: "Configure the store (read_only refuses set and delete).",
		Request: schema,
		Handle: func(ctx context.Context, body json.RawMessage) (any, error) {
			var c KVConfig
			dec := json.NewDecoder(strings.NewReader(string(body)))
			dec.DisallowUnknownFields()
			if err := dec.Decode(&c); err != nil {
				return nil, fmt.Errorf("config: %w", err)
			}
			st.mu.Lock()
			st.cfg = c
			st.mu.Unlock()
			return c, nil
		},
	}, {
		URI: ConfigExtension, Name: "get_config", HTTPMethod: "GET", Description: "Read the store's configuration.",
		Handle: func(ctx context.Context, _ json.RawMessage) (any, error) {
			st.mu.Lock()
			defer st.mu.Unlock()
			return st.cfg, nil
		},
	}}
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
