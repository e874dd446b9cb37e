package spec_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/spec"
)

func TestParse_resources(t *testing.T) {
	tests := []struct {
		name string
		res  string // the resources: mapping of the first server
		want spec.Resources
		err  string // the whole error, when the file is bad
	}{
		{name: "defaults", res: "{}", want: spec.Resources{Memory: spec.DefaultMemory, CPUs: spec.DefaultCPUs}},
		{name: "Mi and fraction of a CPU", res: "{memory: 512Mi, cpus: 0.5}", want: spec.Resources{Memory: 512 << 20, CPUs: 0.5}},
		{name: "docker suffix", res: "{memory: 1g, cpus: \"2\", pids: 64}", want: spec.Resources{Memory: 1 << 30, CPUs: 2, Pids: 64}},
		{name: "bytes", res: "{memory: 67108864}", want: spec.Resources{Memory: 64 << 20, CPUs: 1}},
		{name: "fractional Gi", res: "{memory: 1.5Gi}", want: spec.Resources{Memory: 3 << 29, CPUs: 1}},
		{name: "mb", res: "{memory: 100mb}", want: spec.Resources{Memory: 100 << 20, CPUs: 1}},
		{name: "unknown unit", res: "{memory: 512MB2}", err: `testdata/env.yaml:6: servers[0].resources.memory: invalid memory "512MB2": want a byte count of at least 6Mi, such as "512Mi" or "1g"`},
		{name: "decimal units are not guessed", res: "{memory: 1T}", err: `testdata/env.yaml:6: servers[0].resources.memory: invalid memory "1T": want a byte count of at least 6Mi, such as "512Mi" or "1g"`},
		{name: "too small", res: "{memory: 1Mi}", err: `testdata/env.yaml:6: servers[0].resources.memory: invalid memory "1Mi": want a byte count of at least 6Mi, such as "512Mi" or "1g"`},
		{name: "negative memory", res: "{memory: -1g}", err: `testdata/env.yaml:6: servers[0].resources.memory: invalid memory "-1g": want a byte count of at least 6Mi, such as "512Mi" or "1g"`},
		{name: "zero cpus", res: "{cpus: 0}", err: `testdata/env.yaml:6: servers[0].resources.cpus: invalid cpus "0": want a positive number of CPUs such as 0.5 or 2`},
		{name: "cpus text", res: "{cpus: many}", err: `testdata/env.yaml:6: servers[0].resources.cpus: invalid cpus "many": want a positive number of CPUs such as 0.5 or 2`},
		{name: "pids too low", res: "{pids: 1}", err: `testdata/env.yaml:6: servers[0].resources.pids: invalid pids "1": want an integer from 16 to 4194304`},
		{name: "mapping as value", res: "{memory: {a: 1}}", err: `testdata/env.yaml:6: servers[0].resources.memory: want a scalar, got a mapping`},
		{name: "typo", res: "{memroy: 1g}", err: `testdata/env.yaml:6: servers[0].resources.memroy: unknown field (did you mean "memory"?)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := spec.Parse(envFile, []byte(minimal+"    resources: "+tt.res+"\n"))
			if tt.err != "" {
				if err == nil {
					t.Fatalf("Parse() = nil error, want %q", tt.err)
				}
				if got := strings.TrimSpace(err.Error()); got != tt.err {
					t.Errorf("Parse() error\n got %q\nwant %q", got, tt.err)
				}
				if !errors.Is(err, agentenv.ErrInvalid) {
					t.Errorf("Parse() error %v does not wrap ErrInvalid", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := env.Servers[0].Resources; got != tt.want {
				t.Errorf("Resources = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestComponents_carryResources(t *testing.T) {
	env, err := spec.Parse(envFile, []byte(minimal+`    resources: {memory: 64Mi, cpus: 0.25, pids: 100}
service_db:
  resources: {memory: 2g}
  db_mcp: {enabled: true, resources: {cpus: 3}}
gateway:
  resources: {memory: 128Mi}
`))
	if err != nil {
		t.Fatal(err)
	}
	pw := spec.DBPasswords{Superuser: "x", Roles: map[string]string{}}
	for _, r := range env.DBRoles() {
		pw.Roles[r.Name] = "pw-" + r.Name
	}
	comps, err := env.Components(spec.TopologyOptions{DB: &pw})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]spec.Resources{
		"kv":        {Memory: 64 << 20, CPUs: 0.25, Pids: 100},
		"servicedb": {Memory: 2 << 30, CPUs: 1},
		"db-mcp":    {Memory: 1 << 30, CPUs: 3},
		"gateway":   {Memory: 128 << 20, CPUs: 1},
	}
	for _, c := range comps {
		if w, ok := want[c.Name]; !ok {
			t.Errorf("unexpected component %s", c.Name)
		} else if c.Resources != w {
			t.Errorf("%s: Resources = %+v, want %+v", c.Name, c.Resources, w)
		}
		if nonRoot := c.Name == "gateway" || c.Name == "db-mcp"; c.NonRoot != nonRoot {
			t.Errorf("%s: NonRoot = %v, want %v (only components running %s of their own image)", c.Name, c.NonRoot, nonRoot, spec.BinaryPath)
		}
		delete(want, c.Name)
	}
	if len(want) > 0 {
		t.Errorf("components missing: %v", want)
	}
}
