//go:build integration

package main_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
)

// tsSDKVersion is the @modelcontextprotocol/sdk the TypeScript client check installs (pinned:
// testdata/tsclient/package.json names the same).
const tsSDKVersion = "1.32.2"

// shopBrowserEnvFile copies examples/shop (browser.yaml and the SQL it names) into a folder of
// the test's, with this checkout's runtime image for agentenv:dev, and returns browser.yaml's
// path there.
func (c *cli) shopBrowserEnvFile() string {
	c.t.Helper()
	runtime, _ := dockertest.RuntimeImage(c.t)
	dir := c.t.TempDir()
	for _, name := range []string{"browser.yaml", "schema.sql", "seed.sql"} {
		b, err := os.ReadFile(filepath.Join("..", "..", "examples", "shop", name))
		if err != nil {
			c.t.Fatal(err)
		}
		if name == "browser.yaml" {
			b = []byte(strings.ReplaceAll(string(b), "agentenv:dev", runtime))
		}
		if err := os.WriteFile(filepath.Join(dir, name), b, 0o600); err != nil {
			c.t.Fatal(err)
		}
	}
	return filepath.Join(dir, "browser.yaml")
}

// browserOf lists the browser sidecars (containers whose record is browser-*) that process pid
// owns, by their owner label.
func (c *cli) browserOf(ctx context.Context, pid int) ([]string, error) {
	list, err := c.dc.ContainerList(ctx, client.ContainerListOptions{All: true,
		Filters: make(client.Filters).Add("label", agentenv.LabelRole+"="+string(agentenv.RoleMCPServer))})
	if err != nil {
		return nil, err
	}
	var names []string
	for _, ct := range list.Items {
		owner, rec := ct.Labels[agentenv.LabelOwner], ct.Labels[agentenv.LabelRecord]
		if strings.Contains(owner, fmt.Sprintf("/%d/", pid)) && strings.HasPrefix(rec, "browser-") {
			names = append(names, rec)
		}
	}
	return names, nil
}

// TestEnvDeployBrowserSIGKILLThenGC runs `agentenv env deploy examples/shop/browser.yaml`,
// kills it with SIGKILL as soon as the engine lists its browser sidecar, then runs gc as a user
// is told to: nothing labelled with the deployment is left, the sidecar, its network with no
// route out, the website, the service DB and the gateway included.
func TestEnvDeployBrowserSIGKILLThenGC(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	c.env = append(c.env, "AGENTENV_LIFECYCLE_CREATE_TIMEOUT=60s")
	env := c.shopBrowserEnvFile()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := c.cmd(ctx, nil, "env", "deploy", env)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	var browser []string
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for len(browser) == 0 {
		select {
		case <-done:
			t.Fatalf("env deploy ended before its browser sidecar was listed:\n%s", out.String())
		case <-ctx.Done():
			t.Fatalf("env deploy listed no browser sidecar within 5 minutes:\n%s", out.String())
		case <-tick.C:
		}
		var err error
		if browser, err = c.browserOf(ctx, cmd.Process.Pid); err != nil {
			t.Fatal(err)
		}
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	<-done
	t.Logf("killed once %v was listed; its output then:\n%s", browser, out.String())
	ids := c.deployments()
	if len(ids) != 1 {
		t.Fatalf("the ledger names deployments %v, want the one killed", ids)
	}
	if left := c.deployLeftovers(); !slices.ContainsFunc(left, func(s string) bool { return strings.Contains(s, browser[0]) }) {
		t.Logf("before gc the engine has %v (the browser sidecar not among them: removed by the engine already?)", left)
	}
	c.gcUntilSettled(t)
	if left := c.deployLeftovers(); len(left) != 0 {
		ledger := c.run(context.Background(), nil, "ledger", "ls", "--json")
		t.Errorf("after SIGKILL and gc the engine still has %v; the ledger's records short of gone:\n%s", left, ledger.stdout)
	}
	if rest, err := c.browserOf(t.Context(), cmd.Process.Pid); err != nil || len(rest) != 0 {
		t.Errorf("after gc the browser sidecars %v are listed (%v)", rest, err)
	}
}

// tsClientDir is the folder, cached under ~/.cache/agentenv/ across runs (CI keeps it), where
// the official TypeScript MCP SDK is installed by npm, with testdata/tsclient/client.mjs beside
// it. A missing npm or a failed install fails the test: the check is of the SDK, not optional.
func tsClientDir(t *testing.T) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("npm is needed to install @modelcontextprotocol/sdk for the TypeScript client check (Debian: apt-get install npm): %v", err)
	}
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatalf("node is needed to run the TypeScript client check: %v", err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(cache, "agentenv", "tsclient-sdk-"+tsSDKVersion)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@modelcontextprotocol", "sdk", "package.json")); err != nil {
		// Installed in a folder of its own, then renamed into place: a concurrent run that
		// loses the rename uses the winner's.
		if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
			t.Fatal(err)
		}
		tmp, err := os.MkdirTemp(filepath.Dir(dir), "tsclient-install-")
		if err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		pkg, err := os.ReadFile(filepath.Join("testdata", "tsclient", "package.json"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(pkg), `"@modelcontextprotocol/sdk": "`+tsSDKVersion+`"`) {
			t.Fatalf("testdata/tsclient/package.json does not pin @modelcontextprotocol/sdk %s:\n%s", tsSDKVersion, pkg)
		}
		if err := os.WriteFile(filepath.Join(tmp, "package.json"), pkg, 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
		defer cancel()
		install := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--omit=dev")
		install.Dir = tmp
		start := time.Now()
		if out, err := install.CombinedOutput(); err != nil {
			t.Fatalf("npm install @modelcontextprotocol/sdk@%s: %v\n%s", tsSDKVersion, err, out)
		}
		t.Logf("npm installed @modelcontextprotocol/sdk@%s in %s (cached in %s)", tsSDKVersion, time.Since(start).Round(time.Millisecond), dir)
		if err := os.Rename(tmp, dir); err != nil {
			if _, serr := os.Stat(dir); serr != nil {
				t.Fatalf("cache the SDK: %v", err)
			}
		}
	}
	script, err := os.ReadFile(filepath.Join("testdata", "tsclient", "client.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.CreateTemp(dir, "client-*.mjs")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(f.Name()) })
	if _, err := f.Write(script); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

// TestTypeScriptClientDrivesTheBrowser deploys examples/shop/browser.yaml with the CLI and runs
// the official TypeScript MCP client (@modelcontextprotocol/sdk from npm, in node on this host)
// against the gateway's URL with the deployment's token: it lists the tools (the browser's among
// them), reads the shop's env_url from list_website_urls, opens it with browser_navigate, and
// browser_snapshot shows the catalogue.
func TestTypeScriptClientDrivesTheBrowser(t *testing.T) {
	t.Parallel()
	script := tsClientDir(t)
	c := newCLI(t)
	start := time.Now()
	d := c.deployJSON(t, c.shopBrowserEnvFile())
	defer func() {
		c.teardown(t, d.ID)
		if left := c.deployLeftovers(); len(left) != 0 {
			t.Errorf("after teardown the engine has %v", left)
		}
	}()
	t.Logf("deployed in %s", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	node := exec.CommandContext(ctx, "node", script)
	node.Env = append(os.Environ(), "AGENTENV_URL="+d.GatewayURL, "AGENTENV_TOKEN="+d.Token)
	var stderr strings.Builder
	node.Stderr = &stderr
	start = time.Now()
	out, err := node.Output()
	if err != nil {
		t.Fatalf("node client.mjs: %v\n%s%s", err, out, stderr.String())
	}
	t.Logf("the TypeScript client's session took %s", time.Since(start).Round(time.Millisecond))
	var got struct {
		Tools    []string `json:"tools"`
		EnvURL   string   `json:"env_url"`
		Snapshot string   `json:"snapshot"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("client output: %v\n%s", err, out)
	}
	for _, want := range []string{"browser_navigate", "browser_snapshot", "browser_click", "list_website_urls", "query"} {
		if !slices.Contains(got.Tools, want) {
			t.Errorf("the TypeScript client's tools/list lacks %s: %v", want, got.Tools)
		}
	}
	if got.EnvURL != "http://shop:8080/" {
		t.Errorf("env_url %q, want http://shop:8080/", got.EnvURL)
	}
	for _, want := range []string{"Shop", "Blue mug", "Notebook"} {
		if !strings.Contains(got.Snapshot, want) {
			t.Errorf("the snapshot lacks %q:\n%.3000s", want, got.Snapshot)
		}
	}
}
