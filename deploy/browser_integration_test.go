//go:build integration

package deploy_test

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/moby/moby/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/deploy"
	"github.com/agentenv/agentenv/envproto/envtest"
	"github.com/agentenv/agentenv/gateway"
	"github.com/agentenv/agentenv/spec"
)

// callText calls tool through cs within 60 s and returns its text and whether it is an error.
func callText(t *testing.T, cs *mcp.ClientSession, tool string, args map[string]any) (string, bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return err.Error(), true
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

// TestBrowserShop deploys examples/shop/browser.yaml on docker: the browser's tools are in the
// gateway's union; it opens the shop at its env_url (by name), the gateway adds a PNG
// screenshot to that call's result (screenshots: each_step), and its snapshot shows the
// catalogue; the call is in the gateway's trajectory; an address outside the env that a
// container on the env's own network reaches is no route for the browser, which sits alone on a
// network with no route out (with /dev/shm sized) and a proxy to nowhere; a role that disables
// browser_* neither lists nor calls them, nor does one the admin disables a tool for
// (set_tool_access's route); teardown leaves nothing.
func TestBrowserShop(t *testing.T) {
	r := newRig(t, nil)
	begin := time.Now()
	t.Cleanup(func() { t.Logf("whole test, teardown included: %s", time.Since(begin).Round(time.Millisecond)) })
	env, err := spec.Load("../examples/shop/browser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	env.Websites[0].Backend.Image = r.runtime
	env.ServiceDB.Image = postgresImage
	env.ServiceDB.DBMCP.Image = r.runtime
	env.Gateway.Image = r.runtime
	start := time.Now()
	res, cs := r.deployAndConnect(env)
	t.Logf("shop with a browser ready in %s", time.Since(start).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	lt, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tool := range lt.Tools {
		names = append(names, tool.Name)
	}
	for _, want := range []string{"browser_navigate", "browser_snapshot", "browser_click", gateway.ListWebsiteURLsTool} {
		if !slices.Contains(names, want) {
			t.Errorf("tools/list lacks %s: %v", want, names)
		}
	}
	if slices.Contains(names, "browser_mouse_click_xy") {
		t.Errorf("the coordinate tools are listed without vision: %v", names)
	}

	text, isErr := callText(t, cs, gateway.ListWebsiteURLsTool, nil)
	var sites struct {
		Websites []struct {
			Name   string `json:"name"`
			URL    string `json:"url"`
			EnvURL string `json:"env_url"`
		} `json:"websites"`
	}
	if err := json.Unmarshal([]byte(text), &sites); err != nil || isErr || len(sites.Websites) != 1 {
		t.Fatalf("list_website_urls: %s (%v)", text, err)
	}
	shopURL := sites.Websites[0].EnvURL
	if shopURL != "http://shop:8080/" {
		t.Errorf("the shop's env_url = %q, want http://shop:8080/", shopURL)
	}
	navStart := time.Now()
	nctx, ncancel := context.WithTimeout(t.Context(), 60*time.Second)
	nav, err := cs.CallTool(nctx, &mcp.CallToolParams{Name: "browser_navigate", Arguments: map[string]any{"url": shopURL}})
	ncancel()
	if err != nil || nav.IsError {
		t.Fatalf("browser_navigate %s: %v %+v", shopURL, err, nav)
	}
	t.Logf("first browser_navigate (Chromium's start included) took %s", time.Since(navStart).Round(time.Millisecond))
	// browser.screenshots: each_step: the gateway added the page's screenshot to the result.
	var shot *mcp.ImageContent
	for _, c := range nav.Content {
		if im, ok := c.(*mcp.ImageContent); ok {
			shot = im
		}
	}
	if shot == nil || shot.MIMEType != "image/png" || !strings.HasPrefix(string(shot.Data), "\x89PNG") {
		t.Errorf("browser_navigate's result has no PNG screenshot (screenshots: each_step): %+v", nav.Content)
	}
	snap, isErr := callText(t, cs, "browser_snapshot", nil)
	if isErr || !strings.Contains(snap, "Shop") || !strings.Contains(snap, "Blue mug") || !strings.Contains(snap, "Notebook") {
		t.Errorf("browser_snapshot of the shop lacks its catalogue:\n%s", snap)
	}
	if _, traj := get(t, res, "GET", gateway.TrajectoryPath, res.Token, nil); !strings.Contains(traj, "browser_navigate") || !strings.Contains(traj, shopURL) {
		t.Errorf("the gateway's trajectory lacks the browser_navigate call:\n%.2000s", traj)
	}

	// The browser's container: /dev/shm sized, and on one network alone, with no route out.
	in, err := r.dc.ContainerInspect(t.Context(), r.record(res, spec.BrowserName), client.ContainerInspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if in.Container.HostConfig.ShmSize != spec.BrowserShmSize {
		t.Errorf("browser shm size %d, want %d", in.Container.HostConfig.ShmSize, spec.BrowserShmSize)
	}
	bnet, envNet := r.record(res, "browser-net"), r.record(res, "net")
	if nets := in.Container.NetworkSettings.Networks; len(nets) != 1 || nets[bnet] == nil {
		t.Errorf("browser networks %v, want %s alone", slices.Collect(maps.Keys(nets)), bnet)
	}
	ni, err := r.dc.NetworkInspect(t.Context(), bnet, client.NetworkInspectOptions{})
	if err != nil || !ni.Network.Internal {
		t.Errorf("browser network %s: internal %v (%v), want an internal one", bnet, ni.Network.Internal, err)
	}

	// An address outside the env: this host, on the env network's gateway address, where a
	// container of the env's own network reaches it (the control) and the browser does not.
	outside, hits := listenOutside(t, r, envNet)
	if out, err := r.runOn(envNet, res, "get", outside); err != nil {
		t.Fatalf("control: a container on the env's network cannot reach %s either (%v: %s); the check below would prove nothing", outside, err, out)
	}
	before := hits.Load()
	text, isErr = callText(t, cs, "browser_navigate", map[string]any{"url": outside})
	t.Logf("checks done at %s", time.Since(begin).Round(time.Millisecond))
	if !isErr || !strings.Contains(text, "ERR_") {
		t.Errorf("browser_navigate %s outside the env: error %v, %s; want a network error", outside, isErr, text)
	}
	if i := strings.Index(text, "ERR_"); i >= 0 {
		t.Logf("outside the env: %.60s", text[i:])
	}
	if n := hits.Load() - before; n != 0 {
		t.Errorf("the browser reached %s outside the env (%d requests)", outside, n)
	}

	t.Logf("outside checked at %s", time.Since(begin).Round(time.Millisecond))
	// A role that disables browser_*: not listed, not callable.
	vs := envtest.Connect(t, res.GatewayURL, res.Tokens["visitor"])
	vctx, vcancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer vcancel()
	vlt, err := vs.ListTools(vctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range vlt.Tools {
		if strings.HasPrefix(tool.Name, "browser_") {
			t.Errorf("the visitor role lists %s", tool.Name)
		}
	}
	if text, isErr := callText(t, vs, "browser_navigate", map[string]any{"url": shopURL}); !isErr {
		t.Errorf("the visitor role called browser_navigate: %s", text)
	}

	// set_tool_access's route: the admin disables browser_snapshot for the default role, whose
	// token then cannot call it.
	body, _ := json.Marshal(gateway.Gate{Role: "default", Tools: []string{"browser_snapshot"}})
	req, _ := http.NewRequestWithContext(vctx, "POST", strings.TrimSuffix(res.GatewayURL, "/mcp")+gateway.DisablePath, strings.NewReader(string(body)))
	req.Header.Set("Authorization", "Bearer "+res.Token)
	req.Header.Set("Content-Type", "application/json")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("disable browser_snapshot for default: %v %v", resp, err)
	} else {
		resp.Body.Close()
	}
	ds := envtest.Connect(t, res.GatewayURL, res.Tokens["default"])
	if text, isErr := callText(t, ds, "browser_snapshot", nil); !isErr {
		t.Errorf("the default role called browser_snapshot once disabled: %.200s", text)
	}
}

// listenOutside serves HTTP on this host and returns its URL on the gateway address of docker
// network netID (the host as that network's containers reach it) and a count of requests.
func listenOutside(t *testing.T, r *rig, netID string) (string, *atomic.Int64) {
	t.Helper()
	ni, err := r.dc.NetworkInspect(t.Context(), netID, client.NetworkInspectOptions{})
	if err != nil || len(ni.Network.IPAM.Config) == 0 {
		t.Fatalf("inspect network %s: %v %+v", netID, err, ni.Network.IPAM)
	}
	gw := ni.Network.IPAM.Config[0].Gateway
	ln, err := net.Listen("tcp", net.JoinHostPort(gw.String(), "0"))
	if err != nil {
		t.Fatal(err)
	}
	hits := &atomic.Int64{}
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		hits.Add(1)
		_, _ = w.Write([]byte("outside"))
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String() + "/", hits
}

// runOn runs the test workload with args on docker network netID, labelled with the
// deployment's id (so the leftover check covers it), and returns its output once it exits.
func (r *rig) runOn(netID string, res *deploy.Result, args ...string) (string, error) {
	r.t.Helper()
	id := "probe-" + strings.TrimPrefix(res.Doc.ID, "dep-")
	ctx, cancel := context.WithTimeout(r.t.Context(), 30*time.Second)
	defer cancel()
	if _, err := r.docker.Create(ctx, agentenv.SandboxSpec{Name: id, Image: r.test, Command: args, Network: netID,
		Labels: map[string]string{agentenv.LabelRecord: id, agentenv.LabelDeployment: res.Doc.ID}}); err != nil {
		return "", err
	}
	defer func() { _ = r.docker.Terminate(context.Background(), id) }()
	wait := r.dc.ContainerWait(ctx, id, client.ContainerWaitOptions{})
	var code int64
	select {
	case w := <-wait.Result:
		code = w.StatusCode
	case err := <-wait.Error:
		return "", err
	}
	logs, _ := r.docker.Logs(ctx, id, 4096)
	if code != 0 {
		return logs, fmt.Errorf("exit code %d", code)
	}
	return logs, nil
}

// browserEnv is examples/shop/browser.yaml with this checkout's images.
func (r *rig) browserEnv() *spec.Env { return r.shopFile("../examples/shop/browser.yaml") }

// TestBrowserCancelAtEveryEvent deploys examples/shop/browser.yaml once to learn its progress
// events, then once per event cancelled at that event (Ctrl-C as the CLI sees it): each deploy
// returns context.Canceled and leaves nothing labelled with its deployment, the browser sidecar
// and its network with no route out included. Container mode only: every deploy starts
// Chromium's sidecar, the service DB and the website, and VM mode's walk is
// TestCancelAtEveryStep's on the kv env.
func TestBrowserCancelAtEveryEvent(t *testing.T) {
	t.Parallel()
	r := newRig(t, nil)
	begin := time.Now()
	var events []deploy.Event
	id := r.name()
	res, err := r.d.Deploy(t.Context(), r.browserEnv(), deploy.Options{Provider: "docker", Name: id,
		Progress: func(e deploy.Event) { events = append(events, e) }})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("whole deploy: %d events in %s", len(events), time.Since(begin).Round(time.Millisecond))
	teardown(t, r, res.Doc.ID)
	var sawBrowser, sawBrowserNet bool
	for _, e := range events {
		sawBrowser = sawBrowser || e.Component == spec.BrowserName
		sawBrowserNet = sawBrowserNet || e.Role == agentenv.RoleBrowserNetwork
	}
	if !sawBrowser || !sawBrowserNet {
		t.Fatalf("the deploy's events have no browser (%v) or browser network (%v): %+v", sawBrowser, sawBrowserNet, events)
	}
	r.cancelAtEachEvent(r.browserEnv, deploy.Options{Provider: "docker"}, events)
	t.Logf("cancelled at each of %d events in %s", len(events), time.Since(begin).Round(time.Millisecond))
}
