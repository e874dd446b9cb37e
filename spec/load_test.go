package spec_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/spec"
)

// envFile is the name every table case is parsed as; init_sql paths resolve against testdata.
const envFile = "testdata/env.yaml"

// minimal is the smallest valid env; cases append to it or replace it.
const minimal = `name: ok
servers:
  - name: kv
    image: agentenv:dev
    port: 8080
`

func TestParse_errors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // every line of the joined error, in order
	}{
		{
			name: "typo with suggestion",
			in: `name: ok
servers:
  - name: kv
    imgae: agentenv:dev
    port: 8080
`,
			want: []string{
				`testdata/env.yaml:4: servers[0].imgae: unknown field (did you mean "image"?)`,
				`testdata/env.yaml:3: servers[0].image: required`,
			},
		},
		{
			name: "a live endpoint takes none of a started server's fields",
			in: `name: ok
servers:
  - name: remote
    url: http://mcp.example:9000/mcp
    image: agentenv:dev
    port: 8080
`,
			want: []string{
				`testdata/env.yaml:5: servers[0].image: a server with url is already running: image is for servers agentenv starts`,
				`testdata/env.yaml:6: servers[0].port: a server with url is already running: port is for servers agentenv starts`,
			},
		},
		{
			name: "a live endpoint's url is an http(s) URL",
			in: `name: ok
servers:
  - name: remote
    url: mcp.example:9000
`,
			want: []string{`testdata/env.yaml:4: servers[0].url: invalid url "mcp.example:9000": want the server's MCP URL, http(s)://HOST[:PORT]/PATH`},
		},
		{
			name: "unknown top-level field without a close match",
			in:   minimal + "flavour: vanilla\n",
			want: []string{`testdata/env.yaml:6: flavour: unknown field`},
		},
		{
			name: "duplicate server name names both lines",
			in: minimal + `  - name: kv
    image: other
    port: 8081
`,
			want: []string{`testdata/env.yaml:6: servers[1].name: duplicate server name "kv" (also at line 3)`},
		},
		{
			name: "invalid tool name pattern",
			in: minimal + `gateway:
  roles:
    reader: [ok_tool, "bad tool", "*"]
`,
			want: []string{`testdata/env.yaml:8: gateway.roles.reader[1]: invalid tool pattern "bad tool": want 1-128 of [A-Za-z0-9_.*-]`},
		},
		{
			name: "invalid role name",
			in: minimal + `gateway:
  roles:
    "a role": ["*"]
`,
			want: []string{`testdata/env.yaml:8: gateway.roles.a role: invalid role "a role": want 1-64 of [A-Za-z0-9_.-]`},
		},
		{
			name: "missing image",
			in: `name: ok
servers:
  - name: kv
    port: 8080
`,
			want: []string{`testdata/env.yaml:3: servers[0].image: required`},
		},
		{
			name: "missing name and servers",
			in:   "description: nothing\n",
			want: []string{
				`testdata/env.yaml: name: required`,
				`testdata/env.yaml: servers: at least one server, website or the browser is required`,
			},
		},
		{
			name: "bad enums",
			in: `name: ok
servers:
  - name: kv
    image: agentenv:dev
    port: 8080
    transport: stdoi
gateway:
  tool_names: always
  mode: fast
  serialize: tool
`,
			want: []string{
				`testdata/env.yaml:6: servers[0].transport: unknown value "stdoi": want http or stdio (did you mean "stdio"?)`,
				`testdata/env.yaml:8: gateway.tool_names: unknown value "always": want auto, prefix or never`,
				`testdata/env.yaml:9: gateway.mode: unknown value "fast": want consistent or performance`,
				`testdata/env.yaml:10: gateway.serialize: unknown value "tool": want server or env`,
			},
		},
		{
			name: "missing init_sql file",
			in: minimal + `service_db:
  init_sql: [schema.sql, missing.sql]
`,
			want: []string{`testdata/env.yaml:7: service_db.init_sql[1]: file "missing.sql" does not exist (relative to testdata)`},
		},
		{
			name: "init_sql and seed outside the env's folder",
			in: minimal + `service_db:
  init_sql: [../../../etc/passwd, /etc/hostname]
  seed: [../load.go]
`,
			want: []string{
				`testdata/env.yaml:7: service_db.init_sql[0]: file "../../../etc/passwd" is outside the env file's folder testdata (symbolic links followed): copy it in`,
				`testdata/env.yaml:7: service_db.init_sql[1]: file "/etc/hostname" is outside the env file's folder testdata (symbolic links followed): copy it in`,
				`testdata/env.yaml:8: service_db.seed[0]: file "../load.go" is outside the env file's folder testdata (symbolic links followed): copy it in`,
			},
		},
		{
			name: "missing seed file",
			in: minimal + `service_db:
  seed:
    - nope.sql
`,
			want: []string{`testdata/env.yaml:8: service_db.seed[0]: file "nope.sql" does not exist (relative to testdata)`},
		},
		{
			name: "port out of range",
			in: `name: ok
servers:
  - name: kv
    image: agentenv:dev
    port: 70000
gateway:
  port: 0
`,
			want: []string{`testdata/env.yaml:5: servers[0].port: port 70000 out of range 1-65535`},
		},
		{
			name: "gateway caps out of range",
			in:   minimal + "gateway:\n  max_conns: -1\n  max_sessions: 2000000\n",
			want: []string{
				`testdata/env.yaml:7: gateway.max_conns: -1 out of range 1-1048576 (leave it out for the gateway's default)`,
				`testdata/env.yaml:8: gateway.max_sessions: 2000000 out of range 1-1048576 (leave it out for the gateway's default)`,
			},
		},
		{
			name: "gateway cap not a number",
			in:   minimal + "gateway:\n  max_conns: lots\n",
			want: []string{`testdata/env.yaml:7: gateway.max_conns: want an integer, got "lots"`},
		},
		{
			name: "egress that cannot be enforced",
			in:   minimal + "egress:\n  - 10.0.0.0/8\n  - example.com:443\n  - 10.0.0.1\n  - 10.0.0.1/8\n  - 192.0.2.0/24:70000\n",
			want: []string{
				`testdata/env.yaml:8: egress[1]: invalid egress "example.com:443": want an IP prefix (CIDR) with an optional :PORT; a host name cannot be enforced by an address policy, give its addresses`,
				`testdata/env.yaml:9: egress[2]: invalid egress "10.0.0.1": want a prefix such as 10.0.0.1/32`,
				`testdata/env.yaml:10: egress[3]: invalid egress "10.0.0.1/8": the prefix has host bits set; want 10.0.0.0/8`,
				`testdata/env.yaml:11: egress[4]: invalid egress "192.0.2.0/24:70000": port "70000" out of range 1-65535`,
			},
		},
		{
			name: "negative gateway port",
			in:   minimal + "gateway:\n  port: -1\n",
			want: []string{`testdata/env.yaml:7: gateway.port: port -1 out of range 1-65535`},
		},
		{
			name: "http server without a port",
			in: `name: ok
servers:
  - name: kv
    image: agentenv:dev
`,
			want: []string{`testdata/env.yaml:3: servers[0].port: required for transport http: a port of 1-65535`},
		},
		{
			name: "database without service_db",
			in:   minimal + "    database: true\n",
			want: []string{`testdata/env.yaml:6: servers[0].database: database: true needs a service_db`},
		},
		{
			name: "invalid names",
			in: `name: My_Env
servers:
  - name: -kv
    image: x
    port: 1
  - name: gateway
    image: x
    port: 2
`,
			want: []string{
				`testdata/env.yaml:1: name: invalid name "My_Env": want a DNS label (a-z, 0-9 and '-', at most 63, starting and ending alphanumeric)`,
				`testdata/env.yaml:3: servers[0].name: invalid name "-kv": want a DNS label (a-z, 0-9 and '-', at most 63, starting and ending alphanumeric)`,
				`testdata/env.yaml:6: servers[1].name: name "gateway" is reserved for a built-in component`,
			},
		},
		{
			name: "wrong types",
			in: `name: [a]
servers:
  - name: kv
    image: agentenv:dev
    port: "8080"
    database: yes please
    command: /agentenv
    ready_timeout: 30
gateway: on
`,
			want: []string{
				`testdata/env.yaml:1: name: want a string, got a list`,
				`testdata/env.yaml:5: servers[0].port: want an integer, got "8080"`,
				`testdata/env.yaml:6: servers[0].database: want true or false, got "yes please"`,
				`testdata/env.yaml:7: servers[0].command: want a list, got "/agentenv"`,
				`testdata/env.yaml:8: servers[0].ready_timeout: want a duration such as "30s" or "2m", got an integer`,
				`testdata/env.yaml:9: gateway: want a mapping, got "on"`,
			},
		},
		{
			name: "bad durations",
			in:   minimal + "    ready_timeout: soon\ngateway:\n  call_timeout: -5s\n",
			want: []string{
				`testdata/env.yaml:6: servers[0].ready_timeout: want a positive duration such as "30s" or "2m", got "soon"`,
				`testdata/env.yaml:8: gateway.call_timeout: want a positive duration such as "30s" or "2m", got "-5s"`,
			},
		},
		{
			name: "env variables",
			in: `name: ok
servers:
  - name: kv
    image: agentenv:dev
    port: 8080
    database: true
    env:
      GOOD: env:HOME
      1BAD: x
      REF: env:not a name
      DATABASE_URL: postgres://elsewhere
service_db: {}
`,
			want: []string{
				`testdata/env.yaml:9: servers[0].env.1BAD: invalid variable name "1BAD": want [A-Za-z_][A-Za-z0-9_]*`,
				`testdata/env.yaml:11: servers[0].env.DATABASE_URL: DATABASE_URL is set by database: true`,
				`testdata/env.yaml:10: servers[0].env.REF: invalid reference "env:not a name": want env:NAME with NAME a variable name`,
			},
		},
		{
			name: "duplicate field",
			in:   minimal + "name: again\n",
			want: []string{`testdata/env.yaml:6: name: duplicate field (first at line 1)`},
		},
		{
			name: "website without image or port",
			in:   minimal + "websites:\n  - name: shop\n    backend: {ready_path: /}\n",
			want: []string{
				`testdata/env.yaml:8: websites[0].backend.image: required`,
				`testdata/env.yaml:8: websites[0].backend.port: required: the port the app serves HTTP on, 1-65535`,
			},
		},
		{
			name: "website bad fields",
			in: minimal + `websites:
  - name: Shop
    backend: {image: x, port: 70000, ready_path: healthz, env: {DATABASE_URL: x}}
    database: true
    frontend:
      image: y
      port: 3000
      env: {BACKEND_URL: z}
`,
			want: []string{
				`testdata/env.yaml:7: websites[0].name: invalid name "Shop": want a DNS label (a-z, 0-9 and '-', at most 63, starting and ending alphanumeric)`,
				`testdata/env.yaml:8: websites[0].backend.port: port 70000 out of range 1-65535`,
				`testdata/env.yaml:8: websites[0].backend.ready_path: invalid path "healthz": want an absolute URL path such as /healthz`,
				`testdata/env.yaml:8: websites[0].backend.env.DATABASE_URL: DATABASE_URL is set by database: true`,
				`testdata/env.yaml:13: websites[0].frontend.env.BACKEND_URL: BACKEND_URL is set by the deployer to the website's backend`,
				`testdata/env.yaml:9: websites[0].database: database: true needs a service_db`,
			},
		},
		{
			name: "website readiness paths a probe cannot send as written",
			in: minimal + `websites:
  - name: shop
    backend: {image: x, port: 80, ready_path: "/health check"}
    frontend: {image: y, port: 3000, ready_path: "/#ready"}
  - name: blog
    backend: {image: x, port: 80, ready_path: "//blog/healthz"}
`,
			want: []string{
				`testdata/env.yaml:8: websites[0].backend.ready_path: invalid path "/health check": a space or control character: escape it (%20) or choose a plain path such as /healthz`,
				`testdata/env.yaml:9: websites[0].frontend.ready_path: invalid path "/#ready": a fragment (#...) is never sent: remove it`,
				`testdata/env.yaml:11: websites[1].backend.ready_path: invalid path "//blog/healthz": want an absolute URL path such as /healthz`,
			},
		},
		{
			name: "website names clash",
			in: minimal + `websites:
  - name: kv
    backend: {image: x, port: 80}
  - name: shop
    backend: {image: x, port: 80}
  - name: shop
    backend: {image: x, port: 80}
    frontend: {image: y, port: 80}
`,
			want: []string{
				`testdata/env.yaml:7: websites[0].name: duplicate name "kv": the server at line 3 has it (servers and websites share the env's host names)`,
				`testdata/env.yaml:11: websites[2].name: duplicate name "shop": the website at line 9 has it (servers and websites share the env's host names)`,
			},
		},
		{
			name: "stdio path",
			in: `name: ok
servers:
  - name: kv
    image: agentenv:dev
    transport: stdio
    command: [kv]
    path: /other
`,
			want: []string{`testdata/env.yaml:7: servers[0].path: the stdio bridge serves /mcp only`},
		},
		{
			name: "merge keys",
			in: `name: ok
servers:
  - &kv {name: kv, image: agentenv:dev, port: 8080}
  - <<: *kv
    name: kv2
`,
			want: []string{`testdata/env.yaml:4: servers[1]: merge keys (<<) are not supported; write the fields out`},
		},
		{
			name: "syntax error",
			in:   "name: ok\nservers:\n  - x\n y: 2\n",
			want: []string{`testdata/env.yaml:3: did not find expected key`},
		},
		{
			name: "two documents",
			in:   minimal + "---\nname: other\n",
			want: []string{`testdata/env.yaml:6: want one YAML document, found another`},
		},
		{
			name: "empty file",
			in:   "# nothing\n",
			want: []string{`testdata/env.yaml: empty env file`},
		},
		{
			name: "not a mapping",
			in:   "- a\n- b\n",
			want: []string{`testdata/env.yaml:1: want a mapping of env fields, got a list`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := spec.Parse(envFile, []byte(tt.in))
			if err == nil {
				t.Fatalf("Parse() = %+v, want an error", env)
			}
			if !errors.Is(err, agentenv.ErrInvalid) {
				t.Errorf("Parse() error %v does not wrap agentenv.ErrInvalid", err)
			}
			got := strings.Split(err.Error(), "\n")
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("Parse() error lines (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParse_errorIsStructured(t *testing.T) {
	_, err := spec.Parse(envFile, []byte(minimal+"    imgae: x\n"))
	var e *spec.Error
	if !errors.As(err, &e) {
		t.Fatalf("Parse() error %v is not a *spec.Error", err)
	}
	want := &spec.Error{File: envFile, Line: 6, Path: "servers[0].imgae", Msg: `unknown field (did you mean "image"?)`}
	if diff := cmp.Diff(want, e); diff != "" {
		t.Errorf("Parse() error (-want +got):\n%s", diff)
	}
}

func TestLoad_missingFile(t *testing.T) {
	_, err := spec.Load(filepath.Join(t.TempDir(), "env.yaml"))
	if !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Load(missing) = %v, want os.ErrNotExist", err)
	}
}

func TestLoad_examples(t *testing.T) {
	for _, name := range []string{"notes", "kv", "multi"} {
		t.Run(name, func(t *testing.T) {
			env, err := spec.Load(filepath.Join("..", "examples", name, "env.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			if env.Name != name {
				t.Errorf("Name = %q, want %q", env.Name, name)
			}
		})
	}
}

func TestLoad_defaults(t *testing.T) {
	env, err := spec.Parse(envFile, []byte(minimal+`  - name: bridge
    image: agentenv:dev
    transport: stdio
    command: [/agentenv, serve, kv, --stdio]
    database: true
service_db:
  web_ui: {enabled: true}
  db_mcp: {}
`))
	if err != nil {
		t.Fatal(err)
	}
	defRes := spec.Resources{Memory: 1 << 30, CPUs: 1}
	want := &spec.Env{
		Name: "ok",
		Servers: []spec.Server{
			{Name: "kv", Image: "agentenv:dev", Port: 8080, Transport: spec.TransportHTTP, Path: "/mcp", ReadyTimeout: time.Minute, Resources: defRes},
			{
				Name: "bridge", Image: "agentenv:dev", Command: []string{"/agentenv", "serve", "kv", "--stdio"},
				Port: 8080, Transport: spec.TransportStdio, Path: "/mcp", Database: true, ReadyTimeout: time.Minute, Resources: defRes,
			},
		},
		ServiceDB: &spec.ServiceDB{
			Image: "agentenv-postgres:local", User: "agentenv", Password: "agentenv", Database: "agentenv",
			WebUI:        spec.Sidecar{Enabled: true, Image: "agentenv-adminer:local", Port: 8080, Resources: defRes},
			DBMCP:        spec.Sidecar{Image: "agentenv:dev", Port: 8080, Resources: defRes},
			ReadyTimeout: time.Minute,
			Resources:    defRes,
		},
		Gateway: spec.Gateway{
			Image: "agentenv:dev", Port: 8080, ToolNames: spec.ToolNamesAuto, Mode: spec.ModeConsistent, Serialize: spec.SerializeServer,
			CallTimeout: time.Minute, Resources: defRes,
		},
		File: envFile,
		Dir:  "testdata",
	}
	if diff := cmp.Diff(want, env, cmp.AllowUnexported(spec.Env{}), cmpIgnoreInternals); diff != "" {
		t.Errorf("Parse() (-want +got):\n%s", diff)
	}
	again := *env
	again.Defaults()
	if diff := cmp.Diff(env, &again, cmp.AllowUnexported(spec.Env{})); diff != "" {
		t.Errorf("Defaults() is not idempotent (-first +second):\n%s", diff)
	}
}

// cmpIgnoreInternals ignores Env's unexported digest and line table.
var cmpIgnoreInternals = cmp.FilterPath(func(p cmp.Path) bool {
	sf, ok := p.Last().(cmp.StructField)
	return ok && (sf.Name() == "digest" || sf.Name() == "lines")
}, cmp.Ignore())

func TestLoad_full(t *testing.T) {
	env, err := spec.Load("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := env.Servers[0].Env["API_KEY"], "env:NOTES_API_KEY"; got != want {
		t.Errorf("Servers[0].Env[API_KEY] = %q, want %q", got, want)
	}
	if got, want := env.Gateway.Roles["reader"], []string{"*delete*", "notes__create_note"}; !slices.Equal(got, want) {
		t.Errorf("Gateway.Roles[reader] = %q, want %q", got, want)
	}
	if got, want := env.ServiceDB.ReadyTimeout, 2*time.Minute; got != want {
		t.Errorf("ServiceDB.ReadyTimeout = %v, want %v", got, want)
	}
	if got, want := env.Servers[0].Resources, (spec.Resources{Memory: 512 << 20, CPUs: 0.5, Pids: 256}); got != want {
		t.Errorf("Servers[0].Resources = %+v, want %+v", got, want)
	}
	if got, want := env.ServiceDB.Resources.Memory, int64(2<<30); got != want {
		t.Errorf("ServiceDB.Resources.Memory = %d, want %d", got, want)
	}
	if got, want := env.Path("schema.sql"), filepath.Join("testdata", "schema.sql"); got != want {
		t.Errorf("Path(schema.sql) = %q, want %q", got, want)
	}
}

func TestDigest(t *testing.T) {
	data := []byte(minimal)
	a, err := spec.Parse(envFile, data)
	if err != nil {
		t.Fatal(err)
	}
	b, err := spec.Parse("elsewhere/env.yaml", data)
	if err != nil {
		t.Fatal(err)
	}
	// sha256 of minimal; a change here means stored deployments would look changed.
	const want = "sha256:3b63e2bb0c0b73216c4b74bdbd2020a2063c119a64a0c069e68a92d7af88b507"
	if a.Digest() != want || b.Digest() != want {
		t.Errorf("Digest() = %q, %q; want %q for both", a.Digest(), b.Digest(), want)
	}
	c, err := spec.Parse(envFile, []byte(minimal+"description: changed\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Digest() == want {
		t.Errorf("Digest() of a changed file = %q, want a different digest", c.Digest())
	}
}

func TestCheckSharedPorts(t *testing.T) {
	env, err := spec.Parse(envFile, []byte(`name: ok
servers:
  - name: a
    image: x
    port: 8080
  - name: b
    image: x
    port: 9000
  - name: c
    image: x
    port: 9000
service_db:
  web_ui: {enabled: true, port: 5432}
gateway:
  port: 7000
`))
	if err != nil {
		t.Fatal(err)
	}
	err = env.CheckSharedPorts()
	want := []string{
		`testdata/env.yaml:11: servers[2].port: port 9000 clashes with servers[1].port (line 8) in a shared network namespace`,
		`testdata/env.yaml:13: service_db.web_ui.port: port 5432 clashes with service_db (line 12) in a shared network namespace`,
	}
	if err == nil {
		t.Fatalf("CheckSharedPorts() = nil, want %q", want)
	}
	if !errors.Is(err, agentenv.ErrInvalid) {
		t.Errorf("CheckSharedPorts() error %v does not wrap agentenv.ErrInvalid", err)
	}
	if diff := cmp.Diff(want, strings.Split(err.Error(), "\n")); diff != "" {
		t.Errorf("CheckSharedPorts() (-want +got):\n%s", diff)
	}

	full, err := spec.Load("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := full.CheckSharedPorts(); err != nil {
		t.Errorf("CheckSharedPorts(full) = %v, want nil", err)
	}
}
