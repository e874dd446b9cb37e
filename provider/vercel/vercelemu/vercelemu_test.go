package vercelemu_test

import (
	"archive/tar"
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv/provider/vercel/vercelemu"
)

const (
	token   = "tok"
	team    = "team_a"
	project = "prj_a"
)

// client sends requests to the emulator as the SDK does: bearer token, teamId in the query.
type client struct {
	t   *testing.T
	emu *vercelemu.Server
}

func (c client) do(method, path, query string, body io.Reader, header map[string]string) (*http.Response, []byte) {
	c.t.Helper()
	if query != "" {
		query = "&" + query
	}
	req, err := http.NewRequestWithContext(c.t.Context(), method, c.emu.URL()+path+"?teamId="+team+query, body)
	if err != nil {
		c.t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, b
}

func (c client) json(method, path, query, body string) (int, map[string]any) {
	c.t.Helper()
	resp, b := c.do(method, path, query, strings.NewReader(body), nil)
	var m map[string]any
	json.Unmarshal(b, &m)
	return resp.StatusCode, m
}

// errorCode is the code of an answer {"error": {"code", "message"}}, "" if it is not one.
func errorCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	code, _ := e["code"].(string)
	if msg, _ := e["message"].(string); msg == "" {
		return ""
	}
	return code
}

func start(t *testing.T) client {
	emu := vercelemu.Start(token, team, project)
	emu.StartDelay = 0
	t.Cleanup(emu.Close)
	return client{t, emu}
}

func TestRefusalsAreTheAPIsErrorShape(t *testing.T) {
	c := start(t)
	for _, tt := range []struct {
		name, body string
		status     int
	}{
		{"six tags", `{"projectId":"prj_a","name":"a","tags":{"a":"1","b":"2","c":"3","d":"4","e":"5","f":"6"}}`, 400},
		{"an empty tag key", `{"projectId":"prj_a","name":"a","tags":{"":"1"}}`, 400},
		{"16 ports", `{"projectId":"prj_a","name":"a","ports":[3000,3001,3002,3003,3004,3005,3006,3007,3008,3009,3010,3011,3012,3013,3014,3015]}`, 400},
		{"a privileged port", `{"projectId":"prj_a","name":"a","ports":[80]}`, 400},
		{"a timeout past the plan's", `{"projectId":"prj_a","name":"a","timeout":18000001}`, 400},
		{"a runtime on v3", `{"projectId":"prj_a","name":"a","runtime":"node24"}`, 400},
		{"an unknown image", `{"projectId":"prj_a","name":"a","image":"nope"}`, 400},
		{"no project", `{"name":"a"}`, 400},
		{"another project", `{"projectId":"prj_b","name":"a"}`, 404},
	} {
		status, m := c.json(http.MethodPost, "/v3/sandboxes", "", tt.body)
		if status != tt.status || errorCode(m) == "" {
			t.Errorf("create with %s = %d %v, want %d with {error: {code, message}}", tt.name, status, m, tt.status)
		}
	}
	if n := len(c.emu.Made()); n != 0 {
		t.Errorf("%d sandboxes made by refused creates", n)
	}
	req, _ := http.NewRequest(http.MethodGet, c.emu.URL()+"/v2/sandboxes?teamId="+team+"&project="+project, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("list without a token = %v, %v; want 401", resp, err)
	} else {
		resp.Body.Close()
	}
	if status, m := c.json(http.MethodGet, "/v2/sandboxes", "project=prj_a&tags=a:1&tags=b:2", ""); status != 400 || errorCode(m) == "" {
		t.Errorf("list filtered by two tags = %d %v, want 400 (the SDK refuses it)", status, m)
	}
}

func TestSandboxSessionCommandsAndFiles(t *testing.T) {
	c := start(t)
	status, m := c.json(http.MethodPost, "/v3/sandboxes", "", `{"projectId":"prj_a","name":"box","ports":[3000],"timeout":60000,"persistent":false,"tags":{"k":"v"}}`)
	if status != 200 {
		t.Fatalf("create = %d %v", status, m)
	}
	sb, _ := m["sandbox"].(map[string]any)
	ss, _ := m["session"].(map[string]any)
	routes, _ := m["routes"].([]any)
	sid, _ := ss["id"].(string)
	if sb["name"] != "box" || sb["persistent"] != false || sb["currentSessionId"] != sid || len(routes) != 1 {
		t.Fatalf("create answered %v, want the sandbox, its session and one route", m)
	}
	if status, m := c.json(http.MethodPost, "/v3/sandboxes", "", `{"projectId":"prj_a","name":"box"}`); status != 409 || errorCode(m) == "" {
		t.Errorf("a second create of the name = %d %v, want 409", status, m)
	}
	if status, m := c.json(http.MethodGet, "/v2/sandboxes", "project=prj_a&tags=k:v", ""); status != 200 || len(m["sandboxes"].([]any)) != 1 {
		t.Errorf("list by tag = %d %v, want the sandbox", status, m)
	}

	// A waited command answers an ndjson stream: the command, its logs, the finished command.
	resp, b := c.do(http.MethodPost, "/v2/sandboxes/sessions/"+sid+"/cmd", "", strings.NewReader(`{"command":"/bin/sh","args":["-c","exit 4"],"env":{},"sudo":false,"wait":true}`), nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/x-ndjson" {
		t.Fatalf("command = %s %q, want an ndjson stream", resp.Status, resp.Header.Get("Content-Type"))
	}
	var lines []map[string]any
	for sc := bufio.NewScanner(bytes.NewReader(b)); sc.Scan(); {
		var l map[string]any
		json.Unmarshal(sc.Bytes(), &l)
		lines = append(lines, l)
	}
	if len(lines) != 2 || lines[0]["command"].(map[string]any)["exitCode"] != nil || lines[1]["command"].(map[string]any)["exitCode"] != 4.0 {
		t.Errorf("stream %v, want the running command then the finished one with exit 4", lines)
	}

	// Files: a gzipped tar under x-cwd, read back as octet-stream; a missing one is 404.
	resp, _ = c.do(http.MethodPost, "/v2/sandboxes/sessions/"+sid+"/fs/write", "", bytes.NewReader(tarball(map[string]string{"data/a.txt": "hello"})),
		map[string]string{"Content-Type": "application/gzip", "x-cwd": "/srv"})
	if resp.StatusCode != 200 {
		t.Errorf("fs/write = %s", resp.Status)
	}
	resp, b = c.do(http.MethodPost, "/v2/sandboxes/sessions/"+sid+"/fs/read", "", strings.NewReader(`{"path":"/srv/data/a.txt"}`), nil)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/octet-stream" || string(b) != "hello" {
		t.Errorf("fs/read = %s %q %q, want hello as octet-stream", resp.Status, resp.Header.Get("Content-Type"), b)
	}
	if resp, _ := c.do(http.MethodPost, "/v2/sandboxes/sessions/"+sid+"/fs/read", "", strings.NewReader(`{"path":"/nope"}`), nil); resp.StatusCode != 404 {
		t.Errorf("fs/read of a missing file = %s, want 404", resp.Status)
	}

	// Stopped: commands are 410 sandbox_stopped, the route 502, the delete then removes it.
	if status, _ := c.json(http.MethodPost, "/v2/sandboxes/sessions/"+sid+"/stop", "", ""); status != 200 {
		t.Fatalf("stop = %d", status)
	}
	time.Sleep(50 * time.Millisecond)
	if status, m := c.json(http.MethodPost, "/v2/sandboxes/sessions/"+sid+"/cmd", "", `{"command":"true"}`); status != 410 || errorCode(m) != "sandbox_stopped" {
		t.Errorf("command in a stopped session = %d %v, want 410 sandbox_stopped", status, m)
	}
	url, _ := routes[0].(map[string]any)["url"].(string)
	if resp, err := http.Get(url); err != nil || resp.StatusCode != http.StatusBadGateway {
		t.Errorf("GET a stopped sandbox's route = %v, %v; want 502", resp, err)
	} else {
		resp.Body.Close()
	}
	if status, _ := c.json(http.MethodDelete, "/v2/sandboxes/box", "projectId=prj_a", ""); status != 200 {
		t.Errorf("delete = %d", status)
	}
	if status, m := c.json(http.MethodGet, "/v2/sandboxes/box", "projectId=prj_a", ""); status != 404 || errorCode(m) != "not_found" {
		t.Errorf("get after delete = %d %v, want 404 not_found", status, m)
	}
	if resp, err := http.Get(url); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("GET a deleted sandbox's route = %v, %v; want 404", resp, err)
	} else {
		resp.Body.Close()
	}
}

// tarball is a gzipped tar of files, as the SDK's writeFiles sends them.
func tarball(files map[string]string) []byte {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	for name, data := range files {
		tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(data)), Typeflag: tar.TypeReg})
		io.WriteString(tw, data)
	}
	tw.Close()
	zw.Close()
	return buf.Bytes()
}
