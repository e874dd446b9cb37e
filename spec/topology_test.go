package spec_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/spec"
)

func TestComponents(t *testing.T) {
	env, err := spec.Load("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	comps, err := env.Components(spec.TopologyOptions{
		Host: func(name string) string { return "dep-" + name },
		DB: &spec.DBPasswords{Superuser: "p@ss/word", Roles: map[string]string{
			"notes": "n0tes/pw", spec.DBRoleDBMCP: "mcp-pw", spec.DBRoleVerifier: "ver-pw",
		}},
		LookupEnv: func(name string) (string, bool) {
			if name == "NOTES_API_KEY" {
				return "k-123", true
			}
			return "", false
		},
		TokenFile: "/run/agentenv/token",
	})
	if err != nil {
		t.Fatal(err)
	}
	type summary struct {
		Role  agentenv.Role
		Name  string
		After []string
	}
	var got []summary
	byName := map[string]spec.Component{}
	for _, c := range comps {
		got = append(got, summary{c.Role, c.Name, c.After})
		byName[c.Name] = c
	}
	db := []string{"servicedb"}
	want := []summary{
		{agentenv.RoleServiceDB, "servicedb", nil},
		{agentenv.RoleMCPServer, "notes", db},
		{agentenv.RoleMCPServer, "files", nil}, // no database: true, so it starts beside the DB
		{agentenv.RoleDBWeb, "db-web", db},
		{agentenv.RoleDBMCP, "db-mcp", db},
		{agentenv.RoleGateway, "gateway", []string{"notes", "files", "db-mcp"}},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("Components() order (-want +got):\n%s", diff)
	}

	notes := byName["notes"]
	wantEnv := map[string]string{
		"API_KEY":         "k-123",
		"LOG_LEVEL":       "debug",
		"PRICE":           "$5",
		"DATABASE_URL":    "postgres://notes:n0tes%2Fpw@dep-servicedb:5432/appdb?sslmode=disable&options=-csearch_path%3Dnotes",
		"DATABASE_SCHEMA": "notes",
	}
	if diff := cmp.Diff(wantEnv, notes.Env); diff != "" {
		t.Errorf("notes Env (-want +got):\n%s", diff)
	}
	files := byName["files"]
	wantCmd := []string{"/agentenv", "stdio-bridge", "--listen", ":9001", "--", "node", "/srv/server.js", "--root", "/data"}
	if diff := cmp.Diff(wantCmd, files.Command); diff != "" || !files.Bridge {
		t.Errorf("files Command (-want +got):\n%s; Bridge = %v, want true", diff, files.Bridge)
	}
	if got := byName["servicedb"].Env["POSTGRES_PASSWORD"]; got != "p@ss/word" {
		t.Errorf("servicedb POSTGRES_PASSWORD = %q, want the superuser password given", got)
	}
	if got, want := byName["db-mcp"].Env["DATABASE_URL"], "postgres://db_mcp:mcp-pw@dep-servicedb:5432/appdb?sslmode=disable"; got != want {
		t.Errorf("db-mcp DATABASE_URL = %q, want %q", got, want)
	}
	// The superuser password is the service DB's alone.
	for _, c := range comps {
		for k, v := range c.Env {
			if c.Name != "servicedb" && strings.Contains(v, "p@ss") {
				t.Errorf("%s's %s carries the superuser password: %s", c.Name, k, v)
			}
		}
	}
	wantFiles := []string{
		"/docker-entrypoint-initdb.d/00-agentenv-schemas.sql",
		"/docker-entrypoint-initdb.d/10-init-00-schema.sql",
		"/docker-entrypoint-initdb.d/20-seed-00-seed.sql",
		"/docker-entrypoint-initdb.d/90-agentenv-roles.sql",
	}
	var gotFiles []string
	for _, f := range byName["servicedb"].Files {
		gotFiles = append(gotFiles, f.Target)
	}
	if diff := cmp.Diff(wantFiles, gotFiles); diff != "" {
		t.Errorf("servicedb Files (-want +got):\n%s", diff)
	}
	if got, want := string(byName["servicedb"].Files[0].Content), "CREATE SCHEMA IF NOT EXISTS notes;\n"; got != want {
		t.Errorf("schema SQL = %q, want %q", got, want)
	}
	wantGateway := []string{
		"/agentenv", "gateway", "--listen", ":8443", "--name", "full", "--token-file", "/run/agentenv/token",
		"--tool-names", "prefix", "--mode", "performance", "--call-timeout", "1m30s",
		"--server", "notes=http://dep-notes:9000/mcp", "--server", "files=http://dep-files:9001/mcp", "--server", "db-mcp=http://dep-db-mcp:8082/mcp",
		"--disable", "guest=*", "--disable", "reader=*delete*", "--disable", "reader=notes__create_note",
		"--service", "db-web=http://dep-db-web:8081",
	}
	if diff := cmp.Diff(wantGateway, byName["gateway"].Command); diff != "" {
		t.Errorf("gateway Command (-want +got):\n%s", diff)
	}
}

func TestComponents_unsetReference(t *testing.T) {
	env, err := spec.Load("testdata/full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = env.Components(spec.TopologyOptions{
		LookupEnv: func(string) (string, bool) { return "", false },
	})
	var e *spec.Error
	if !errors.As(err, &e) || !errors.Is(err, agentenv.ErrInvalid) {
		t.Fatalf("Components() = %v, want a *spec.Error wrapping ErrInvalid", err)
	}
	want := &spec.Error{File: "testdata/full.yaml", Line: 10, Path: "servers[0].env.API_KEY", Msg: "NOTES_API_KEY is not set in the deployer's environment"}
	if diff := cmp.Diff(want, e); diff != "" {
		t.Errorf("Components() error (-want +got):\n%s", diff)
	}
}

func TestComponents_noDB(t *testing.T) {
	env, err := spec.Load("../examples/kv/env.yaml")
	if err != nil {
		t.Fatal(err)
	}
	comps, err := env.Components(spec.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(comps) != 2 || comps[0].Name != "kv" || comps[0].After != nil || comps[1].Role != agentenv.RoleGateway {
		t.Errorf("Components(kv) = %+v, want kv then gateway, kv with nothing before it", comps)
	}
}

// A live endpoint is no component: the gateway gets its URL.
func TestComponents_liveEndpoint(t *testing.T) {
	env, err := spec.Parse("env.yaml", []byte("name: mix\nservers:\n  - name: kv\n    image: agentenv:dev\n    port: 8080\n  - name: remote\n    url: https://mcp.example/v1/mcp\n"))
	if err != nil {
		t.Fatal(err)
	}
	if s := env.Server("remote"); s == nil || s.ReadyTimeout != spec.DefaultReadyTimeout || s.Path != "" || s.Transport != "" {
		t.Errorf("remote after defaults = %+v, want only a ready_timeout", s)
	}
	comps, err := env.Components(spec.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(comps) != 2 || comps[0].Name != "kv" || comps[1].Role != agentenv.RoleGateway {
		t.Fatalf("Components = %+v, want kv then gateway", comps)
	}
	if !slices.Equal(comps[1].After, []string{"kv"}) {
		t.Errorf("gateway after %v, want [kv]: a live endpoint is no component", comps[1].After)
	}
	cmd := strings.Join(comps[1].Command, " ")
	if !strings.Contains(cmd, "--server kv=http://kv:8080/mcp") || !strings.Contains(cmd, "--server remote=https://mcp.example/v1/mcp") {
		t.Errorf("gateway command = %s", cmd)
	}
}

// Without a gateway, the servers are the deployment's doors: no gateway component, and every
// server publishes its port.
func TestComponents_noGateway(t *testing.T) {
	env, err := spec.Parse("env.yaml", []byte("name: direct\nservers:\n  - name: kv\n    image: agentenv:dev\n    port: 8080\ngateway:\n  enabled: false\n"))
	if err != nil {
		t.Fatal(err)
	}
	comps, err := env.Components(spec.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(comps) != 1 || comps[0].Name != "kv" || comps[0].Private {
		t.Errorf("Components = %+v, want kv alone, published", comps)
	}
	_, err = spec.Parse("env.yaml", []byte("name: direct\nservers:\n  - name: r\n    url: http://x:1/mcp\ngateway:\n  enabled: false\n"))
	if err == nil || !strings.Contains(err.Error(), "gateway.enabled: without a gateway, an env of live endpoints (url) only deploys nothing") {
		t.Errorf("live endpoints only without a gateway: %v", err)
	}
}

// The gateway gets --serialize only for a scope that is not its default, in consistent mode.
func TestComponents_serialize(t *testing.T) {
	for _, tt := range []struct {
		gateway string
		want    []string // the flags after --call-timeout D
	}{
		{"", nil},
		{"gateway: {serialize: server}\n", nil},
		{"gateway: {serialize: env}\n", []string{"--serialize", "env"}},
		{"gateway: {mode: performance, serialize: env}\n", nil},
	} {
		env, err := spec.Parse("env.yaml", []byte("name: ok\nservers: [{name: kv, image: x, port: 8080}]\n"+tt.gateway))
		if err != nil {
			t.Fatal(err)
		}
		comps, err := env.Components(spec.TopologyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		cmd := comps[len(comps)-1].Command
		i := slices.Index(cmd, "--call-timeout")
		j := slices.Index(cmd, "--server")
		if i < 0 || j < i+2 {
			t.Fatalf("%q: gateway command %q", tt.gateway, cmd)
		}
		if got := cmd[i+2 : j]; !slices.Equal(got, tt.want) {
			t.Errorf("%q: flags %q, want %q", tt.gateway, got, tt.want)
		}
	}
}

// The env file's gateway caps reach the gateway's command line; unset, the gateway's defaults
// hold and no flag is passed.
func TestComponents_gatewayCaps(t *testing.T) {
	for _, tt := range []struct {
		yaml string
		want []string
	}{
		{"", nil},
		{"gateway:\n  max_conns: 100\n  max_sessions: 7\n", []string{"--max-conns", "100", "--max-sessions", "7"}},
	} {
		env, err := spec.Parse("env.yaml", []byte("name: caps\nservers:\n  - name: kv\n    image: agentenv:dev\n    port: 8080\n"+tt.yaml))
		if err != nil {
			t.Fatal(err)
		}
		comps, err := env.Components(spec.TopologyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for _, c := range comps {
			if c.Name != "gateway" {
				continue
			}
			for i, a := range c.Command {
				if a == "--max-conns" || a == "--max-sessions" {
					got = append(got, a, c.Command[i+1])
				}
			}
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%q: gateway cap flags = %v, want %v", tt.yaml, got, tt.want)
		}
	}
}

// A server is private (no host port; the gateway is its door) unless the env exposes it.
func TestComponents_serversArePrivateUnlessExposed(t *testing.T) {
	env, err := spec.Parse("env.yaml", []byte(`name: doors
servers:
  - name: kv
    image: agentenv:dev
    port: 8080
  - name: debug
    image: agentenv:dev
    port: 8080
    expose: true
`))
	if err != nil {
		t.Fatal(err)
	}
	comps, err := env.Components(spec.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"kv": true, "debug": false, "gateway": false}
	for _, c := range comps {
		if w, ok := want[c.Name]; ok && c.Private != w {
			t.Errorf("%s: Private = %v, want %v", c.Name, c.Private, w)
		}
	}
}

// TestComponents_websites checks a website's containers: a backend that owns its schema with a
// role of its own as a server does, a frontend after it that finds it in BACKEND_URL, both
// private behind the gateway, which serves the frontend and has the backend as a service.
func TestComponents_websites(t *testing.T) {
	env, err := spec.Parse("testdata/env.yaml", []byte(`name: web
servers: [{name: kv, image: agentenv:dev, port: 8080}]
service_db: {}
websites:
  - name: shop
    database: true
    backend: {image: shop:1, port: 8000, ready_path: /healthz, ready_timeout: 5s}
    frontend: {image: shopfront:1, port: 3000}
  - name: blog
    backend: {image: blog:1, port: 80}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := env.DBRoles(), []spec.DBRole{{Name: "shop", Owns: "shop"}, {Name: spec.DBRoleVerifier}}; !slices.Equal(got, want) {
		t.Errorf("DBRoles() = %v, want %v", got, want)
	}
	comps, err := env.Components(spec.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]spec.Component{}
	for _, c := range comps {
		byName[c.Name] = c
	}
	back, front, blog, gw := byName["shop-backend"], byName["shop"], byName["blog"], byName["gateway"]
	for _, c := range []spec.Component{back, front, blog} {
		if c.Role != agentenv.RoleWebsite || !c.Private {
			t.Errorf("%s: role %s private %v, want website and private", c.Name, c.Role, c.Private)
		}
	}
	if back.ReadyPath != "/healthz" || back.ReadyTimeout.String() != "5s" || front.ReadyPath != "/" {
		t.Errorf("ready paths %q %q, timeout %s", back.ReadyPath, front.ReadyPath, back.ReadyTimeout)
	}
	if !strings.Contains(back.Env["DATABASE_URL"], "shop:") || back.Env["DATABASE_SCHEMA"] != "shop" || !slices.Equal(back.After, []string{"servicedb"}) {
		t.Errorf("backend env %v after %v, want the shop role's DSN after servicedb", back.Env, back.After)
	}
	if front.Env["BACKEND_URL"] != "http://shop-backend:8000" || front.Env["DATABASE_URL"] != "" || !slices.Equal(front.After, []string{"shop-backend"}) {
		t.Errorf("frontend env %v after %v", front.Env, front.After)
	}
	cmd := strings.Join(gw.Command, " ")
	for _, want := range []string{"--website shop=http://shop:3000", "--service shop-backend=http://shop-backend:8000", "--website blog=http://blog:80", "--public-url http://gateway:8080"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("gateway command %q lacks %q", cmd, want)
		}
	}
	if slices.Contains(gw.After, "shop") || slices.Contains(gw.After, "blog") {
		t.Errorf("gateway after %v: websites are readied through it, not before it", gw.After)
	}
}

// Without a gateway a website's containers publish their own ports, readied there.
func TestComponents_websitesWithoutGateway(t *testing.T) {
	env, err := spec.Parse("testdata/env.yaml", []byte("name: web\nwebsites: [{name: blog, backend: {image: blog:1, port: 80}}]\ngateway: {enabled: false}\n"))
	if err != nil {
		t.Fatal(err)
	}
	comps, err := env.Components(spec.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(comps) != 1 || comps[0].Name != "blog" || comps[0].Private || comps[0].ReadyPath != "/" {
		t.Errorf("components %+v, want blog alone, public, readied at /", comps)
	}
}
