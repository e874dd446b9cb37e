//go:build integration

package dockervm_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/spec"
)

// TestVMModeDeployOfAWebsite deploys, in VM mode, an env of one website with a backend and a
// frontend and no MCP server: both containers run in the VM, are readied through the gateway
// (the frontend at /website/site/, the backend at /svc/site-backend/), the site answers there
// with the admin token, and teardown leaves nothing.
func TestVMModeDeployOfAWebsite(t *testing.T) {
	cli := dockertest.Require(t)
	runtime, _ := dockertest.RuntimeImage(t)
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "ledger.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	mgr, err := lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"docker_vm": newProvider(t)}})
	if err != nil {
		t.Fatal(err)
	}
	d := deploy.New(mgr, nil)
	// The kv server stands in for a web app: an HTTP server whose card path answers 200.
	env, err := spec.Parse("site.yaml", []byte(fmt.Sprintf(`name: site
websites:
  - name: site
    backend:
      image: %[1]s
      command: [/agentenv, serve, kv, --listen, ":8000"]
      port: 8000
      ready_path: /.well-known/agent-env.json
      ready_timeout: 60s
    frontend:
      image: %[1]s
      command: [/agentenv, serve, kv, --listen, ":3000"]
      port: 3000
      ready_path: /.well-known/agent-env.json
gateway:
  image: %[1]s
`, runtime)))
	if err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("dep-tvw%x", time.Now().UnixNano()&0xffffff)
	dockertest.CheckNoLeftovers(t, cli, map[string]string{agentenv.LabelDeployment: id})
	var ready []string
	res, err := d.Deploy(t.Context(), env, deploy.Options{Provider: "docker_vm", Name: id, Budget: 3 * time.Minute,
		Progress: func(e deploy.Event) {
			if e.Role == agentenv.RoleWebsite && e.Phase == "ready" {
				ready = append(ready, e.Component+": "+e.Detail)
			}
		}})
	if err != nil {
		t.Fatalf("Deploy: %v", err)
	}
	defer func() {
		rc, err := d.Teardown(context.Background(), id)
		if err != nil || !rc.Clean() {
			t.Errorf("Teardown = %+v, %v", rc, err)
		}
	}()
	if res.Doc.Mode != deploy.ModeVM || len(ready) != 2 {
		t.Errorf("mode %s, websites ready %q; want vm and both containers", res.Doc.Mode, ready)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, res.Doc.URLs["site"]+".well-known/agent-env.json", nil)
	req.Header.Set("Authorization", "Bearer "+res.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), `"name"`) {
		t.Errorf("GET %s: %d %s", req.URL, resp.StatusCode, body)
	}
}
