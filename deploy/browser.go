package deploy

import (
	"context"
	"fmt"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/spec"
)

// browserNetwork, in container mode, gives the env's browser (browser.enabled) a network of its
// own with no route out, when the env allows no egress and the provider can both make such a
// network and join a sandbox to a second one (docker): the browser is on it alone with the
// gateway (which reaches it as a backend) and each website the gateway serves (which the browser
// reaches by its name). A provider that enforces egress (Kubernetes) holds the browser to the
// env's list on the env's own network. Everywhere Chromium itself sends what is not the
// websites or the egress prefixes to a proxy that is not there (spec.BrowserProxy), which also
// keeps it off the host's own addresses that a docker network with no route out still reaches;
// where that proxy is all there is, a warning says so.
func (st *stack) browserNetwork(ctx context.Context) error {
	if !st.env.Browser.Enabled {
		return nil
	}
	caps, err := st.d.mgr.Capabilities(st.member)
	if err != nil {
		return err
	}
	switch {
	case caps.Egress:
		return nil // the env's network allows its egress list and nothing more
	case len(st.env.Egress) > 0:
		st.warnBrowser("provider " + st.member + " does not enforce the env's egress list")
		return nil
	case !caps.Isolate || !caps.Join:
		st.warnBrowser("provider " + st.member + " cannot give the browser a network with no route out")
		return nil
	}
	_, nsb, err := st.d.mgr.Create(ctx, st.request(agentenv.KindNetwork, agentenv.RoleBrowserNetwork, agentenv.SandboxSpec{Isolated: true}, "browser-net"))
	if err != nil {
		return fmt.Errorf("browser network: %w", err)
	}
	st.mu.Lock()
	st.browserNet = nsb.ID
	st.mu.Unlock()
	st.emit(spec.Component{Name: "browser-network", Role: agentenv.RoleBrowserNetwork}, "created", nsb.ID+" (no route out)")
	return nil
}

// placeBrowser puts, in container mode with a browser network, the browser on that network
// alone, and the gateway and the websites the gateway serves on it too, under their names.
func (st *stack) placeBrowser(c spec.Component, sp *agentenv.SandboxSpec) {
	st.mu.Lock()
	bnet := st.browserNet
	st.mu.Unlock()
	if bnet == "" {
		return
	}
	switch {
	case c.Name == spec.BrowserName && c.Role == agentenv.RoleMCPServer:
		sp.Network = bnet
	case c.Role == agentenv.RoleGateway, c.Role == agentenv.RoleWebsite && st.env.Website(c.Name) != nil:
		sp.Join = append(sp.Join, agentenv.NetworkJoin{Network: bnet, Aliases: []string{c.Name}})
	}
}

// warnBrowser says, as a warning event and in the log, that only Chromium's proxy settings keep
// the browser to the env's websites and egress list, not the network, and why.
func (st *stack) warnBrowser(why string) {
	if !st.env.Browser.Enabled {
		return
	}
	msg := "browser egress held by its proxy settings only: " + why + ", so what Chromium sends past its proxy (WebRTC) can reach any address its sandbox reaches"
	st.d.log.Warn("browser egress not enforced by the network", "deployment", st.doc.ID, "provider", st.member, "why", why)
	st.emit(spec.Component{Name: spec.BrowserName, Role: agentenv.RoleMCPServer}, "warning", msg)
}

// browserScreen waits, with browser.vnc and once the gateway is ready, until the browser's
// noVNC page answers through the gateway (/svc/browser-vnc/vnc.html, with the admin token)
// within spec.DefaultReadyTimeout. The browser's own readiness already covers it (its image
// starts the MCP server only once the screen is up); this checks the gateway's route to it.
func (st *stack) browserScreen(ctx context.Context) error {
	b := &st.env.Browser
	if !b.Enabled || !b.VNC || !st.env.Gateway.On() {
		return nil
	}
	c := spec.Component{Role: agentenv.RoleWebsite, Name: spec.BrowserName, ReadyPath: "/svc/" + spec.BrowserVNCService + "/vnc.html", Private: true}
	wctx, cancel := context.WithTimeout(ctx, spec.DefaultReadyTimeout)
	defer cancel()
	err := st.d.ready(st, wctx, c, st.endpoints["gateway"])
	if err == nil {
		st.emit(c, "ready", "screen through the gateway at /svc/"+spec.BrowserVNCService+"/")
		return nil
	}
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	st.mu.Lock()
	rec := st.records[spec.BrowserName]
	st.mu.Unlock()
	err = fmt.Errorf("browser screen (vnc) not ready within %s (GET %s through the gateway): %w%s", spec.DefaultReadyTimeout, c.ReadyPath, err, st.logs(ctx, rec))
	st.emit(c, "failed", err.Error())
	return err
}

// browserURLs adds, with browser.vnc, the browser's noVNC page through the gateway to urls as
// spec.BrowserVNCService (it takes the admin token).
func (st *stack) browserURLs(urls map[string]string) {
	b := &st.env.Browser
	if b.Enabled && b.VNC && st.env.Gateway.On() {
		urls[spec.BrowserVNCService] = baseURL(st.endpoints["gateway"]) + spec.BrowserVNCPage
	}
}
