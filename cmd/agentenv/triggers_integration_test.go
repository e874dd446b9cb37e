//go:build integration

package main_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRunTriggersTask runs examples/triggers-task on the real engine: the kv env behind its
// gateway, the virtual clock armed, a trigger on the scripted agent's write that holds the call,
// mirrors an email, disables delete for the agent's role and appends the email to the result;
// kv's config extension reached through /svc/kv/; graded on the gateway trajectory.
func TestRunTriggersTask(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.buildRuntimeImage()
	r := c.run(t.Context(), nil, "run", "../../examples/triggers-task")
	if r.code != 0 || !strings.Contains(r.stdout, "passed: 1 passed") || !strings.Contains(r.stdout, "mean score 1") {
		t.Fatalf("run triggers-task: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	noFalseWarnings(t, r.stdout)
	if left := c.deployLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
	// The gateway trajectory kept with the run holds what the verifier graded.
	files, _ := filepath.Glob(filepath.Join(c.state, "agentenv", "runs", "*", "env.gateway.ndjson"))
	if len(files) != 1 {
		t.Fatalf("want one kept gateway trajectory, found %v", files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"via":"trigger","role":"mailer"`, `"tool":"tools/disable"`, `New email from Dana`, `"tool":"svc/kv/agentenv/ext/set_config"`, `"virtual_time":"2026-01-05T09:00:00Z"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("gateway trajectory lacks %s:\n%s", want, b)
		}
	}
}

// TestSvcThroughGateway deploys the notes env and reaches through its gateway's /svc/ the DB
// web UI (adminer) and the notes server's own card, with the admin token only.
func TestSvcThroughGateway(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.buildRuntimeImage()
	r := c.run(t.Context(), nil, "env", "deploy", "../../examples/notes/env.yaml", "--json")
	if r.code != 0 {
		t.Fatalf("env deploy: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	var out struct {
		ID         string `json:"id"`
		GatewayURL string `json:"gateway_url"`
		Token      string `json:"token"`
	}
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil || out.Token == "" {
		t.Fatalf("env deploy --json = %s: %v", r.stdout, err)
	}
	defer func() {
		td := c.run(context.Background(), nil, "env", "teardown", out.ID)
		if td.code != 0 {
			t.Errorf("env teardown: exit %d\n%s%s", td.code, td.stdout, td.stderr)
		}
		if left := c.deployLeftovers(); len(left) != 0 {
			t.Errorf("left %v", left)
		}
	}()
	base := strings.TrimSuffix(out.GatewayURL, "/mcp")
	get := func(path, token string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, base+path, nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("GET %s: %v", path, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/svc/db-web/", out.Token); code != http.StatusOK || !strings.Contains(strings.ToLower(body), "adminer") {
		t.Errorf("/svc/db-web/: %d %.300s", code, body)
	}
	if code, body := get("/svc/notes/.well-known/agent-env.json", out.Token); code != http.StatusOK || !strings.Contains(body, `"name":"notes"`) {
		t.Errorf("/svc/notes/ card: %d %.300s", code, body)
	}
	if code, _ := get("/svc/db-web/", ""); code != http.StatusUnauthorized {
		t.Errorf("/svc/db-web/ without a token: %d, want 401", code)
	}
}
