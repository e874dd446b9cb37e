//go:build integration

package main_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/envproto"
	"github.com/agentenv/agentenv/envsdk"
	"github.com/agentenv/agentenv/mcpclient"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
)

// nodeEnvDir holds an env server written to the anchor's protocol (types.py) in Node.
var nodeEnvDir, _ = filepath.Abs("../../envcheck/testdata/nodeenv")

// nodeEnvModules installs the Node env's locked dependencies from the npm registry, once.
func nodeEnvModules(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(nodeEnvDir, "node_modules", "@modelcontextprotocol", "sdk")); err == nil {
		return
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "npm", "ci", "--no-audit", "--no-fund")
	cmd.Dir = nodeEnvDir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("npm ci in %s: %v\n%s", nodeEnvDir, err, out)
	}
}

// nodeEnvImage builds the Node env into an image on agentenv-node:local, labelled with the
// test's tag, and removes it when the test ends.
func nodeEnvImage(t *testing.T, c *cli) string {
	t.Helper()
	nodeEnvModules(t)
	tag := "agentenv-test-nodeenv:" + c.tag
	df := "FROM agentenv-node:local\nCOPY package.json server.mjs /app/\nCOPY node_modules /app/node_modules\nWORKDIR /app\nUSER 65534\nCMD [\"node\", \"/app/server.mjs\"]\n"
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "docker", "build", "-q", "-t", tag, "--label", "agentenv-test="+c.tag, "-f", "-", nodeEnvDir)
	cmd.Stdin = strings.NewReader(df)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("docker build %s: %v\n%s", tag, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("docker", "rmi", "-f", tag).CombinedOutput(); err != nil {
			t.Errorf("docker rmi %s: %v\n%s", tag, err, out)
		}
	})
	return tag
}

// TestAnchorEnvBehindGateway deploys an env server written to the anchor's protocol in
// another language behind the gateway: its tools listed and called with a real MCP client, a
// data plane round trip with a file part through the gateway, and env validate --url passing
// on it.
func TestAnchorEnvBehindGateway(t *testing.T) {
	c := newCLI(t)
	image := nodeEnvImage(t, c)
	runtime, _ := dockertest.RuntimeImage(t)
	envFile := filepath.Join(t.TempDir(), "env.yaml")
	y := fmt.Sprintf("name: harbor\nservers:\n  - name: harbor\n    image: %s\n    command: [node, /app/server.mjs]\n    port: 18765\n    ready_timeout: 60s\ngateway:\n  image: %s\n", image, runtime)
	if err := os.WriteFile(envFile, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	r := c.run(t.Context(), nil, "env", "deploy", envFile, "--json")
	if r.code != 0 {
		t.Fatalf("env deploy: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var dep struct {
		ID         string `json:"id"`
		GatewayURL string `json:"gateway_url"`
		Token      string `json:"token"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &dep); err != nil || dep.GatewayURL == "" || dep.Token == "" {
		t.Fatalf("env deploy --json: %v\n%s", err, r.stdout)
	}
	t.Cleanup(func() {
		td := c.run(context.Background(), nil, "env", "teardown", dep.ID)
		if td.code != 0 {
			t.Errorf("env teardown: exit %d\n%s%s", td.code, td.stdout, td.stderr)
		}
		if left := c.deployLeftovers(); len(left) != 0 {
			t.Errorf("left %v", left)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()

	// Tools, listed and called over MCP through the gateway.
	cs, err := mcpclient.Client{}.Connect(ctx, dep.GatewayURL, dep.Token)
	if err != nil {
		t.Fatalf("connect to the gateway: %v", err)
	}
	defer cs.Close()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range lt.Tools {
		names = append(names, tl.Name)
	}
	if !strings.Contains(strings.Join(names, ","), "count_parts") || !strings.Contains(strings.Join(names, ","), "read_file") {
		t.Fatalf("tools through the gateway = %v, want count_parts and read_file", names)
	}

	// The data plane through the gateway, at /agentenv: reset, add with a file part, get.
	base := strings.TrimSuffix(dep.GatewayURL, envproto.MCPPath)
	data := func(method string, params any) envproto.Response {
		t.Helper()
		p, _ := json.Marshal(params)
		body, _ := json.Marshal(envproto.Request{JSONRPC: "2.0", ID: json.RawMessage("1"), Method: method, Params: p})
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+envproto.DataPath, bytes.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		resp, err := mcpclient.HTTPClient(nil, dep.Token).Do(req)
		if err != nil {
			t.Fatalf("%s: %v", method, err)
		}
		defer resp.Body.Close()
		var out envproto.Response
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil || resp.StatusCode != 200 {
			t.Fatalf("%s: %s %v", method, resp.Status, err)
		}
		return out
	}
	if res := data(envproto.MethodReset, struct{}{}); res.Error != nil {
		t.Fatalf("data/reset: %v", res.Error)
	}
	file := envproto.Part{Kind: "file", File: &envproto.FilePart{Name: "manifest.txt", MimeType: "text/plain", Bytes: []byte("ship s1 at berth 3\n")}}
	dpart := envproto.Part{Kind: "data", Data: json.RawMessage(`{"ships":[{"id":"s1","berth":3}]}`)}
	if res := data(envproto.MethodAdd, envproto.AddParams{Parts: []envproto.Part{file, dpart}}); res.Error != nil {
		t.Fatalf("data/add: %v", res.Error)
	}
	res := data(envproto.MethodGet, struct{}{})
	var got envproto.GetResult
	if res.Error != nil || json.Unmarshal(res.Result, &got) != nil || len(got.Parts) != 2 {
		t.Fatalf("data/get: %v %s", res.Error, res.Result)
	}
	if f := got.Parts[0].File; f == nil || f.Name != "manifest.txt" || f.MimeType != "text/plain" || string(f.Bytes) != "ship s1 at berth 3\n" {
		t.Errorf("data/get file part = %+v", got.Parts[0])
	}
	if !strings.Contains(string(got.Parts[1].Data), `"berth":3`) {
		t.Errorf("data/get data part = %s", got.Parts[1].Data)
	}
	// A tool sees what the data plane loaded.
	call, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "read_file", Arguments: map[string]any{"name": "manifest.txt"}})
	if err != nil || call.IsError {
		t.Fatalf("read_file: %v %+v", err, call)
	}
	if text, _ := mcpclient.Text(call); !strings.Contains(text, "berth 3") {
		t.Errorf("read_file = %s", text)
	}

	// The validator passes on it, through the gateway, and leaves its data as it found it.
	v := c.run(ctx, nil, "env", "validate", "--url", dep.GatewayURL, "--token", dep.Token)
	if v.code != 0 || !strings.Contains(v.stdout, "conforms") {
		t.Errorf("env validate --url the gateway: exit %d\n%s%s", v.code, v.stdout, v.stderr)
	}
	t.Logf("env validate:\n%s", v.stdout)
	res = data(envproto.MethodGet, struct{}{})
	if json.Unmarshal(res.Result, &got) != nil || len(got.Parts) != 2 {
		t.Errorf("data after validate: %s, want the 2 parts loaded back", res.Result)
	}
}

// freePort returns a loopback port nothing listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startServer starts cmd, waits until url answers, and stops it when the test ends.
func startServer(t *testing.T, cmd *exec.Cmd, url string) {
	t.Helper()
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s never answered: %v\n%s", url, err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestEnvValidateURL: env validate --url passes on notes (agentenv's env server) and on the
// Node anchor env, and names the failing check on a server whose card is broken.
func TestEnvValidateURL(t *testing.T) {
	c := newCLI(t)
	nodeEnvModules(t)
	dsn := os.Getenv("AGENTENV_TEST_POSTGRES_DSN")
	if dsn == "" {
		t.Fatal("integration tests need PostgreSQL: set AGENTENV_TEST_POSTGRES_DSN (eval \"$(.ci/postgres.sh)\")")
	}
	schema := fmt.Sprintf("notes_validate_%d", time.Now().UnixNano())
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		pool, err := envsdk.OpenDB(ctx, dsn, nil)
		if err != nil {
			t.Errorf("connect: %v", err)
			return
		}
		defer pool.Close()
		if _, err := pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{schema}.Sanitize()+" CASCADE"); err != nil {
			t.Errorf("drop schema %s: %v", schema, err)
		}
	})
	notesPort := freePort(t)
	notesURL := fmt.Sprintf("http://127.0.0.1:%d", notesPort)
	startServer(t, c.cmd(t.Context(), nil, "serve", "notes", "--listen", fmt.Sprintf("127.0.0.1:%d", notesPort), "--database-url", dsn, "--schema", schema), notesURL+"/healthz")

	nodePort, brokenPort := freePort(t), freePort(t)
	nodeURL := fmt.Sprintf("http://127.0.0.1:%d", nodePort)
	brokenURL := fmt.Sprintf("http://127.0.0.1:%d", brokenPort)
	node := func(port int, extra ...string) *exec.Cmd {
		cmd := exec.CommandContext(t.Context(), "node", filepath.Join(nodeEnvDir, "server.mjs"))
		cmd.Env = append(os.Environ(), "MCP_HOST=127.0.0.1", fmt.Sprintf("MCP_PORT=%d", port))
		cmd.Env = append(cmd.Env, extra...)
		return cmd
	}
	startServer(t, node(nodePort), nodeURL+envproto.CardPath)
	startServer(t, node(brokenPort, "BREAK_CARD=1"), brokenURL+envproto.CardPath)

	for _, url := range []string{notesURL, nodeURL} {
		v := c.run(t.Context(), nil, "env", "validate", "--url", url)
		if v.code != 0 || !strings.Contains(v.stdout, url+" conforms") || strings.Contains(v.stdout, "FAIL") {
			t.Errorf("env validate --url %s: exit %d\n%s%s", url, v.code, v.stdout, v.stderr)
		}
		t.Logf("env validate --url %s:\n%s", url, v.stdout)
	}

	v := c.run(t.Context(), nil, "env", "validate", "--url", brokenURL)
	if v.code != 1 || !strings.Contains(v.stdout, "FAIL  card ") || !strings.Contains(v.stdout, "name is missing") ||
		!strings.Contains(v.stdout, "does not conform: card failed") {
		t.Errorf("env validate --url a broken card: exit %d\n%s%s", v.code, v.stdout, v.stderr)
	}
	j := c.run(t.Context(), nil, "env", "validate", "--url", brokenURL, "--json")
	var rep struct {
		OK     bool `json:"ok"`
		Checks []struct{ Name, Status string }
	}
	if err := json.Unmarshal([]byte(j.stdout), &rep); err != nil || rep.OK || j.code != 1 || rep.Checks[0].Name != "card" || rep.Checks[0].Status != "fail" {
		t.Errorf("env validate --json: exit %d %v\n%s", j.code, err, j.stdout)
	}
}

// hostAddress returns an address of this host that containers reach it at: docker0's, else
// the one it routes outwards from.
func hostAddress(t *testing.T) string {
	t.Helper()
	if ifc, err := net.InterfaceByName("docker0"); err == nil {
		addrs, _ := ifc.Addrs()
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
				return ipn.IP.String()
			}
		}
	}
	conn, err := net.Dial("udp", "192.0.2.1:9")
	if err != nil {
		t.Fatalf("no address of this host for containers: %v", err)
	}
	defer conn.Close()
	return conn.LocalAddr().(*net.UDPAddr).IP.String()
}

// TestLiveEndpointJoinsTheGateway: a server given by url (an MCP server already running, here
// kv on the host, reached by the gateway at the host's address on the Docker bridge) joins the
// gateway beside a started one; nothing is created for it and teardown leaves it running.
func TestLiveEndpointJoinsTheGateway(t *testing.T) {
	c := newCLI(t)
	hostIP := hostAddress(t)
	port := freePort(t)
	live := fmt.Sprintf("http://%s:%d", hostIP, port)
	startServer(t, c.cmd(t.Context(), nil, "serve", "kv", "--listen", fmt.Sprintf("0.0.0.0:%d", port)), live+"/healthz")

	runtime, _ := dockertest.RuntimeImage(t)
	envFile := filepath.Join(t.TempDir(), "env.yaml")
	y := fmt.Sprintf("name: mix\nservers:\n  - name: notes\n    image: %[1]s\n    command: [/agentenv, serve, kv, --listen, \":8080\"]\n    port: 8080\n  - name: remote\n    url: %[2]s/mcp\n    ready_timeout: 20s\ngateway:\n  image: %[1]s\n  tool_names: prefix\n", runtime, live)
	if err := os.WriteFile(envFile, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	r := c.run(t.Context(), nil, "env", "deploy", envFile, "--json")
	if r.code != 0 {
		t.Fatalf("env deploy: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var dep struct {
		ID         string `json:"id"`
		GatewayURL string `json:"gateway_url"`
		Token      string `json:"token"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &dep); err != nil || dep.GatewayURL == "" {
		t.Fatalf("env deploy --json: %v\n%s", err, r.stdout)
	}
	get := c.run(t.Context(), nil, "env", "get", dep.ID)
	if strings.Count(get.stdout, "running") != 3 {
		t.Errorf("env get: want network, the started server and gateway running, nothing for the live endpoint:\n%s", get.stdout)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cs, err := mcpclient.Client{}.Connect(ctx, dep.GatewayURL, dep.Token)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	set, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "remote__set", Arguments: map[string]any{"key": "k", "value": "through the gateway"}})
	if err != nil || set.IsError {
		t.Fatalf("remote__set through the gateway: %v %+v", err, set)
	}
	cs.Close()

	td := c.run(context.Background(), nil, "env", "teardown", dep.ID)
	if td.code != 0 || !strings.Contains(td.stdout, "3 terminated") {
		t.Errorf("env teardown: exit %d\n%s%s", td.code, td.stdout, td.stderr)
	}
	if left := c.deployLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
	// The live endpoint is still up, with what the episode wrote.
	v := c.run(t.Context(), nil, "env", "validate", "--url", live, "--read-only")
	if v.code != 0 || !strings.Contains(v.stdout, "1 well-formed part(s)") {
		t.Errorf("the live endpoint after teardown: exit %d\n%s%s", v.code, v.stdout, v.stderr)
	}

	// One that does not answer fails the deploy before anything is created.
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	y = fmt.Sprintf("name: gone\nservers:\n  - name: remote\n    url: http://127.0.0.1:%d/mcp\n    ready_timeout: 2s\ngateway:\n  image: %s\n", freePort(t), runtime)
	if err := os.WriteFile(bad, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	r = c.run(t.Context(), nil, "env", "deploy", bad)
	if r.code == 0 || !strings.Contains(r.stderr, "server remote at http://127.0.0.1:") {
		t.Errorf("env deploy of a dead live endpoint: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if left := c.deployLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}

// TestNoGatewayPrintsDirectEndpoints: gateway.enabled false deploys the servers alone, each
// with its port published, and env deploy prints their endpoints; a real MCP client calls a
// tool there, and teardown leaves nothing.
func TestNoGatewayPrintsDirectEndpoints(t *testing.T) {
	c := newCLI(t)
	runtime, _ := dockertest.RuntimeImage(t)
	envFile := filepath.Join(t.TempDir(), "env.yaml")
	y := fmt.Sprintf("name: direct\nservers:\n  - name: kv\n    image: %s\n    command: [/agentenv, serve, kv, --listen, \":8080\"]\n    port: 8080\ngateway:\n  enabled: false\n", runtime)
	if err := os.WriteFile(envFile, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	r := c.run(t.Context(), nil, "env", "deploy", envFile)
	if r.code != 0 {
		t.Fatalf("env deploy: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	m := regexp.MustCompile(`(?m)^server\s+kv (http://127\.0\.0\.1:\d+/mcp)$`).FindStringSubmatch(r.stdout)
	id := deploymentLine.FindStringSubmatch(r.stdout)
	if m == nil || id == nil || !strings.Contains(r.stdout, "gateway     none") {
		t.Fatalf("env deploy without a gateway printed:\n%s", r.stdout)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cs, err := mcpclient.Client{}.Connect(ctx, m[1], "")
	if err != nil {
		t.Fatalf("connect to %s: %v", m[1], err)
	}
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "set", Arguments: map[string]any{"key": "k", "value": "v"}})
	if err != nil || res.IsError {
		t.Errorf("set at %s: %v %+v", m[1], err, res)
	}
	cs.Close()
	get := c.run(t.Context(), nil, "env", "get", id[1])
	if strings.Count(get.stdout, "running") != 2 || strings.Contains(get.stdout, "gateway") {
		t.Errorf("env get: want the network and kv running, no gateway:\n%s", get.stdout)
	}
	td := c.run(context.Background(), nil, "env", "teardown", id[1])
	if td.code != 0 || !strings.Contains(td.stdout, "2 terminated") {
		t.Errorf("env teardown: exit %d\n%s%s", td.code, td.stdout, td.stderr)
	}
	if left := c.deployLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
}
