package task

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/agentenv/agentenv/internal/schematest"
)

var update = flag.Bool("update", false, "rewrite task.schema.json from the step types")

// genSchema builds the JSON Schema of task files from the step types' Go structs, so the
// published schema cannot drift from what Parse accepts.
func genSchema() map[string]any {
	kinds := builtinKinds()
	names := make([]string, 0, len(kinds))
	for n := range kinds {
		names = append(names, n)
	}
	sort.Strings(names)
	defs := map[string]any{}
	var branches []any
	for _, n := range names {
		k := kinds[n]
		s := typeSchema(reflect.TypeOf(k.new()).Elem())
		props := s["properties"].(map[string]any)
		props["id"] = map[string]any{"type": "string", "pattern": validID.String(), "description": "unique step id"}
		props["type"] = map[string]any{"const": n}
		props["depends_on"] = map[string]any{"type": "array", "items": map[string]any{"type": "string"},
			"description": "steps this one waits for; absent means all earlier steps, [] none"}
		props["fail_task_on_error"] = map[string]any{"type": "boolean", "default": true,
			"description": "a failure stops the task (true) or is recorded and the task goes on (false)"}
		props["timeout"] = map[string]any{"type": "string", "description": "Go duration, such as 30s or 5m"}
		props["retry"] = map[string]any{"type": "object", "additionalProperties": false,
			"description": "on an infrastructure error of this step, tear down and re-run the span from..this step",
			"properties": map[string]any{
				"max":  map[string]any{"type": "integer", "minimum": 1, "default": 1},
				"from": map[string]any{"type": "string", "description": "first step of the span: this step or a dependency; this step if absent"},
			}}
		if k.verifier {
			props["weight"] = map[string]any{"type": "number", "minimum": 0, "default": 1,
				"description": "weight in a weighted_average task score; 0 runs and records the verifier but leaves it out of the task's score"}
			props["min_score"] = map[string]any{"type": "number", "minimum": 0, "maximum": 1,
				"description": "gate: below this score the verifier passes with its score and the steps that depend on it are skipped (they score 0)"}
		}
		req, _ := s["required"].([]string)
		s["required"] = append([]string{"id", "type"}, req...)
		defs[n] = s
		branches = append(branches, map[string]any{
			"if":   map[string]any{"properties": map[string]any{"type": map[string]any{"const": n}}, "required": []string{"type"}},
			"then": map[string]any{"$ref": "#/$defs/" + n},
		})
	}
	defs["step"] = map[string]any{
		"type": "object", "required": []string{"id", "type"},
		"properties": map[string]any{"type": map[string]any{"enum": names}},
		"allOf":      branches,
	}
	return map[string]any{
		"$schema":              "https://json-schema.org/draft/2020-12/schema",
		"$id":                  "https://github.com/agentenv/agentenv/task/task.schema.json",
		"title":                "agentenv task",
		"description":          "A task: a DAG of typed steps run as graded episodes. Generated from package task by go test -update.",
		"type":                 "object",
		"additionalProperties": false,
		"required":             []string{"steps"},
		"properties": map[string]any{
			"name":        map[string]any{"type": "string"},
			"description": map[string]any{"type": "string"},
			"score":       map[string]any{"enum": []string{string(AllPass), string(AnyPass), string(WeightedAverage), string(Min)}, "default": string(Min)},
			"steps":       map[string]any{"type": "array", "minItems": 1, "items": map[string]any{"$ref": "#/$defs/step"}},
			"retries": map[string]any{"type": "object", "additionalProperties": false,
				"description": "an episode that ends on an infrastructure error runs again from scratch, up to infra times",
				"properties":  map[string]any{"infra": map[string]any{"type": "integer", "minimum": 0}}},
		},
		"$defs": defs,
	}
}

// typeSchema maps a Go type of a step's fields to a schema.
func typeSchema(t reflect.Type) map[string]any {
	if t == reflect.TypeOf(ScoreMode("")) {
		return map[string]any{"enum": []string{string(AllPass), string(AnyPass), string(WeightedAverage), string(Min)}}
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeSchema(t.Elem())
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int:
		return map[string]any{"type": "integer"}
	case reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.Slice:
		return map[string]any{"type": "array", "items": typeSchema(t.Elem())}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": typeSchema(t.Elem())}
	case reflect.Struct:
		props := map[string]any{}
		var req []string
		for _, f := range structFields(t) {
			props[f.name] = typeSchema(t.Field(f.index).Type)
			if f.required {
				req = append(req, f.name)
			}
		}
		s := map[string]any{"type": "object", "additionalProperties": false, "properties": props}
		if len(req) > 0 {
			s["required"] = req
		}
		if t.Implements(scalarFormType) {
			return map[string]any{"oneOf": []any{map[string]any{"type": "string"}, s}}
		}
		return s
	}
	return map[string]any{} // any value
}

func TestSchemaUpToDate(t *testing.T) {
	b, err := json.MarshalIndent(genSchema(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	b = append(b, '\n')
	if *update {
		if err := os.WriteFile("task.schema.json", b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(b, Schema) {
		t.Errorf("task.schema.json is out of date with the step types: run go test ./task -run TestSchemaUpToDate -update")
	}
}

func TestSchemaValidatesExamples(t *testing.T) {
	rs := schematest.Resolve(t, "task.schema.json", Schema)
	for _, path := range []string{"hello.yaml", "../examples/notes-task/task.yaml", "../examples/notes-task/agent-task.yaml", "../examples/graded-task/task.yaml", "../examples/shop-task/task.yaml", "../examples/shop-task/model-task.yaml"} {
		src, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if err := rs.Validate(schematest.YAMLValue(t, src)); err != nil {
			t.Errorf("%s does not validate against task.schema.json: %v", path, err)
		}
	}
	for _, bad := range []string{
		"steps: [{id: a, type: deploy_sandbox, imag: x}]",
		"steps: [{id: a, type: nope}]",
		"steps: [{id: a, type: exec, sandbox: b}]", // command missing
		"stesp: []",
	} {
		if err := rs.Validate(schematest.YAMLValue(t, []byte(bad))); err == nil {
			t.Errorf("schema accepts %q", bad)
		}
	}
	if !slices.Contains(genSchema()["required"].([]string), "steps") {
		t.Error("steps not required")
	}
}
