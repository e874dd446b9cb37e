// Package schematest checks YAML documents against agentenv's published JSON Schemas (the env
// file's and the task file's) in tests.
package schematest

import (
	"encoding/json"
	"testing"

	"github.com/google/jsonschema-go/jsonschema"
	"gopkg.in/yaml.v3"
)

// Resolve parses and resolves the JSON Schema schema (named name in failures), failing the
// test if it cannot.
func Resolve(tb testing.TB, name string, schema []byte) *jsonschema.Resolved {
	tb.Helper()
	var s jsonschema.Schema
	if err := json.Unmarshal(schema, &s); err != nil {
		tb.Fatalf("unmarshal %s: %v", name, err)
	}
	rs, err := s.Resolve(nil)
	if err != nil {
		tb.Fatalf("resolve %s: %v", name, err)
	}
	return rs
}

// YAMLValue decodes YAML into the value encoding/json would produce for the same document, as
// the validator wants.
func YAMLValue(tb testing.TB, data []byte) any {
	tb.Helper()
	var v any
	if err := yaml.Unmarshal(data, &v); err != nil {
		tb.Fatal(err)
	}
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	var out any
	if err := json.Unmarshal(b, &out); err != nil {
		tb.Fatal(err)
	}
	return out
}
