package spec_test

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/agentenv/agentenv/internal/schematest"
	"github.com/agentenv/agentenv/spec"
)

func TestEnvSchema_acceptsExamples(t *testing.T) {
	rs := schematest.Resolve(t, "env.schema.json", spec.EnvSchema)
	for _, f := range []string{
		"../examples/notes/env.yaml",
		"../examples/kv/env.yaml",
		"../examples/multi/env.yaml",
		"../examples/shop/env.yaml",
		"../examples/shop/browser.yaml",
		"testdata/full.yaml",
	} {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := rs.Validate(schematest.YAMLValue(t, data)); err != nil {
			t.Errorf("%s does not validate against env.schema.json: %v", f, err)
		}
	}
}

func TestEnvSchema_rejects(t *testing.T) {
	rs := schematest.Resolve(t, "env.schema.json", spec.EnvSchema)
	tests := []struct{ name, in string }{
		{"typo", minimal + "    imgae: x\n"},
		{"bad enum", minimal + "gateway: {mode: fast}\n"},
		{"bad serialize", minimal + "gateway: {serialize: tool}\n"},
		{"bad tool pattern", minimal + "gateway: {roles: {r: [\"a b\"]}}\n"},
		{"port out of range", minimal + "gateway: {port: 70000}\n"},
		{"bad memory unit", minimal + "    resources: {memory: 1T}\n"},
		{"zero cpus", minimal + "gateway: {resources: {cpus: 0}}\n"},
		{"resources typo", minimal + "    resources: {memroy: 1g}\n"},
		{"bad duration", minimal + "    ready_timeout: soon\n"},
		{"http without port", "name: ok\nservers: [{name: kv, image: x}]\n"},
		{"stdio without command", "name: ok\nservers: [{name: kv, image: x, transport: stdio}]\n"},
		{"reserved server name", "name: ok\nservers: [{name: gateway, image: x, port: 1}]\n"},
		{"website without backend", minimal + "websites: [{name: shop}]\n"},
		{"website without image", minimal + "websites: [{name: shop, backend: {port: 80}}]\n"},
		{"website reserved name", minimal + "websites: [{name: gateway, backend: {image: x, port: 80}}]\n"},
		{"website bad ready_path", minimal + "websites: [{name: shop, backend: {image: x, port: 80, ready_path: healthz}}]\n"},
		{"no servers", "name: ok\n"},
		{"browser typo", minimal + "browser: {enabeld: true}\n"},
		{"browser enabled not a bool", minimal + "browser: {enabled: yes}\n"},
		{"browser vnc not a bool", minimal + "browser: {enabled: true, vnc: on}\n"},
		{"browser resources typo", minimal + "browser: {enabled: true, resources: {mem: 1g}}\n"},
		{"browser off alone", "name: ok\nbrowser: {enabled: false}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := rs.Validate(schematest.YAMLValue(t, []byte(tt.in))); err == nil {
				t.Errorf("schema accepts %q, want an error", tt.in)
			}
			if _, err := spec.Parse(envFile, []byte(tt.in)); err == nil {
				t.Errorf("Parse accepts %q, want an error", tt.in)
			}
		})
	}
}

// TestEnvSchema_fields checks that the schema and the Go types name the same fields.
func TestEnvSchema_fields(t *testing.T) {
	var root map[string]any
	if err := json.Unmarshal(spec.EnvSchema, &root); err != nil {
		t.Fatal(err)
	}
	defs := root["$defs"].(map[string]any)
	props := func(obj map[string]any) []string {
		var names []string
		for k := range obj["properties"].(map[string]any) {
			names = append(names, k)
		}
		slices.Sort(names)
		return names
	}
	tests := []struct {
		typ    reflect.Type
		schema map[string]any
		extra  []string // reserved fields the Go type does not carry
	}{
		{reflect.TypeFor[spec.Env](), root, nil},
		{reflect.TypeFor[spec.Website](), defs["website"].(map[string]any), nil},
		{reflect.TypeFor[spec.WebApp](), defs["webApp"].(map[string]any), nil},
		{reflect.TypeFor[spec.Server](), defs["server"].(map[string]any), nil},
		{reflect.TypeFor[spec.ServiceDB](), defs["serviceDB"].(map[string]any), nil},
		{reflect.TypeFor[spec.Sidecar](), defs["sidecar"].(map[string]any), nil},
		{reflect.TypeFor[spec.Browser](), defs["browser"].(map[string]any), nil},
		{reflect.TypeFor[spec.Gateway](), defs["gateway"].(map[string]any), nil},
	}
	for _, tt := range tests {
		want := slices.Clone(tt.extra)
		for f := range tt.typ.Fields() {
			if tag, _, _ := strings.Cut(f.Tag.Get("yaml"), ","); f.IsExported() && tag != "-" && tag != "" {
				want = append(want, tag)
			}
		}
		slices.Sort(want)
		if got := props(tt.schema); !slices.Equal(got, want) {
			t.Errorf("schema properties of %s = %q, want the yaml fields %q", tt.typ.Name(), got, want)
		}
	}
}
