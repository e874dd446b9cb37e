package spec_test

import (
	"errors"
	"os"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/spec"
)

// FuzzParse checks that no input makes Parse panic, that every rejection is an ErrInvalid, and
// that every accepted env lays out and renders. The committed corpus is in
// testdata/fuzz/FuzzParse; run it longer with go test -run '^$' -fuzz FuzzParse ./spec.
func FuzzParse(f *testing.F) {
	for _, p := range []string{"../examples/notes/env.yaml", "../examples/kv/env.yaml", "../examples/multi/env.yaml", "testdata/full.yaml"} {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		env, err := spec.Parse("testdata/fuzz.yaml", data)
		if err != nil {
			if !errors.Is(err, agentenv.ErrInvalid) {
				t.Fatalf("Parse() error %v does not wrap agentenv.ErrInvalid", err)
			}
			return
		}
		if env.Name == "" || len(env.Servers) == 0 || env.Digest() == "" {
			t.Fatalf("Parse() accepted an env without name, servers or digest: %+v", env)
		}
		lookup := func(string) (string, bool) { return "x", true }
		if _, err := env.Components(spec.TopologyOptions{LookupEnv: lookup}); err != nil {
			t.Fatalf("Components() of an accepted env: %v", err)
		}
		_ = env.CheckSharedPorts()
		out, err := spec.RenderCompose(env, spec.ComposeOptions{AgentenvBinary: "/agentenv"})
		if err != nil {
			t.Fatalf("RenderCompose() of an accepted env: %v", err)
		}
		var v any
		if err := yaml.Unmarshal(out, &v); err != nil {
			t.Fatalf("RenderCompose() wrote invalid YAML: %v\n%s", err, out)
		}
	})
}
