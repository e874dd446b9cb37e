package deploy

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/lifecycle"
	"github.com/agentenv/agentenv/provider/fake"
	"github.com/agentenv/agentenv/spec"
)

// isolating is the fake provider saying it can make a network with no route out and join a
// sandbox to a second network, as docker does, recording each sandbox's spec by its record's
// component name. A test double: the fake has no networks to isolate.
type isolating struct {
	*fake.Provider
	mu    sync.Mutex
	specs map[string]agentenv.SandboxSpec
}

func (p *isolating) Capabilities() agentenv.Capabilities {
	c := p.Provider.Capabilities()
	c.Isolate, c.Join = true, true
	return c
}

func (p *isolating) Create(ctx context.Context, sp agentenv.SandboxSpec) (agentenv.Sandbox, error) {
	p.mu.Lock()
	p.specs[sp.Name[:strings.LastIndexByte(sp.Name, '-')]] = sp
	p.mu.Unlock()
	return p.Provider.Create(ctx, sp)
}

func browserRig(t *testing.T) (*rig, *isolating) {
	t.Helper()
	r := newRig(t)
	iso := &isolating{Provider: fake.New("iso"), specs: map[string]agentenv.SandboxSpec{}}
	led, err := bolt.Open(t.Context(), filepath.Join(t.TempDir(), "iso.bolt"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { led.Close() })
	r.led, r.fake = led, iso.Provider
	if r.mgr, err = lifecycle.New(lifecycle.Config{Ledger: led, Providers: map[string]agentenv.Provider{"iso": iso, "fake": fake.New("fake")}}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.mgr.Close)
	r.d = New(r.mgr, nil)
	r.d.ready = func(*stack, context.Context, spec.Component, string) error { return nil }
	if r.env, err = spec.Load(filepath.Join("..", "examples", "shop", "browser.yaml")); err != nil {
		t.Fatal(err)
	}
	return r, iso
}

// On a provider that isolates and joins, the browser is alone on a network of its own made
// isolated, which the gateway and the shop join under their names; the env's network stays the
// others'. Nothing is left after teardown.
func TestBrowserOnItsOwnNetwork(t *testing.T) {
	r, iso := browserRig(t)
	var warnings []string
	res, err := r.d.Deploy(t.Context(), r.env, Options{Provider: "iso", Mode: ModeContainer, Progress: func(e Event) {
		if e.Phase == "warning" {
			warnings = append(warnings, e.Detail)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings) > 0 {
		t.Errorf("warnings %q on a provider that cuts the browser off", warnings)
	}
	var bnet, envNet string
	for _, rec := range r.up(t) {
		switch {
		case rec.Kind == agentenv.KindNetwork && rec.Role == agentenv.RoleBrowserNetwork:
			bnet = rec.SandboxID
		case rec.Kind == agentenv.KindNetwork:
			envNet = rec.SandboxID
		}
	}
	if bnet == "" || envNet == "" || bnet == envNet {
		t.Fatalf("networks: env %q browser %q, want two", envNet, bnet)
	}
	iso.mu.Lock()
	br, gw, shop, db := iso.specs["browser"], iso.specs["gateway"], iso.specs["shop"], iso.specs["servicedb"]
	iso.mu.Unlock()
	if br.Network != bnet || len(br.Join) != 0 || br.ShmSize != spec.BrowserShmSize {
		t.Errorf("browser on %q joins %v shm %d, want %q alone with shm %d", br.Network, br.Join, br.ShmSize, bnet, spec.BrowserShmSize)
	}
	for name, sp := range map[string]agentenv.SandboxSpec{"gateway": gw, "shop": shop} {
		if want := []agentenv.NetworkJoin{{Network: bnet, Aliases: []string{name}}}; sp.Network != envNet || !slices.EqualFunc(sp.Join, want, func(a, b agentenv.NetworkJoin) bool {
			return a.Network == b.Network && slices.Equal(a.Aliases, b.Aliases)
		}) {
			t.Errorf("%s on %q joins %v, want %q and the browser's network", name, sp.Network, sp.Join, envNet)
		}
	}
	if db.Network != envNet || len(db.Join) != 0 {
		t.Errorf("servicedb on %q joins %v, want the env's network alone", db.Network, db.Join)
	}
	if _, err := r.d.Teardown(t.Context(), res.Doc.ID); err != nil {
		t.Fatal(err)
	}
	r.assertNothingLeft(t)
}

// Where the network cannot cut the browser off (a provider that cannot, or VM mode), the deploy
// says so as a warning.
func TestBrowserNotCutOffIsAWarning(t *testing.T) {
	for _, mode := range []string{ModeContainer, ModeVM} {
		t.Run(mode, func(t *testing.T) {
			r, _ := browserRig(t) // deployed on "fake", which neither isolates nor joins
			var warnings []string
			res, err := r.d.Deploy(t.Context(), r.env, Options{Provider: "fake", Mode: mode, Progress: func(e Event) {
				if e.Phase == "warning" && e.Component == spec.BrowserName {
					warnings = append(warnings, e.Detail)
				}
			}})
			if err != nil {
				t.Fatal(err)
			}
			if len(warnings) != 1 || !strings.Contains(warnings[0], "proxy settings only") {
				t.Errorf("warnings = %q, want one saying only the proxy holds the browser", warnings)
			}
			if _, err := r.d.Teardown(t.Context(), res.Doc.ID); err != nil {
				t.Fatal(err)
			}
			for _, rec := range r.up(t) {
				t.Errorf("record %s (%s) is %s after teardown", rec.ID, rec.Role, rec.State)
			}
		})
	}
}

// Cancelled at each progress event, a deploy of the shop with its browser on its own network
// leaves nothing (the browser's network included).
func TestBrowserDeployCancelledAtEachEvent(t *testing.T) {
	var events int
	{
		r, _ := browserRig(t)
		res, err := r.d.Deploy(t.Context(), r.env, Options{Provider: "iso", Mode: ModeContainer, Progress: func(Event) { events++ }})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := r.d.Teardown(t.Context(), res.Doc.ID); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i <= events; i++ {
		r, _ := browserRig(t)
		ctx, cancel := context.WithCancel(t.Context())
		var mu sync.Mutex
		n, at := 0, ""
		_, err := r.d.Deploy(ctx, r.env, Options{Provider: "iso", Mode: ModeContainer, Progress: func(e Event) {
			mu.Lock()
			defer mu.Unlock()
			if n++; n == i {
				at = e.Component + " " + e.Phase
				cancel()
			}
		}})
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled at event %d (%s): Deploy = %v, want context.Canceled", i, at, err)
		}
		r.assertNothingLeft(t)
	}
}

// With browser.vnc the browser runs under its image's browser-vnc script, the gateway serves
// its screen as the service browser-vnc, the deploy readies that route through the gateway
// after the websites, and the deployment's URLs have the noVNC page; a screen that never
// answers fails the deploy naming it, and leaves nothing.
func TestBrowserVNC(t *testing.T) {
	r, iso := browserRig(t)
	r.env.Browser.VNC = true
	var probed []string
	r.d.ready = func(_ *stack, _ context.Context, c spec.Component, _ string) error {
		if c.Name == spec.BrowserName && c.Role == agentenv.RoleWebsite {
			probed = append(probed, c.ReadyPath)
		}
		return nil
	}
	res, err := r.d.Deploy(t.Context(), r.env, Options{Provider: "iso", Mode: ModeContainer})
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"/svc/browser-vnc/vnc.html"}; !slices.Equal(probed, want) {
		t.Errorf("probed %q through the gateway, want %q", probed, want)
	}
	iso.mu.Lock()
	br, gw := iso.specs["browser"], iso.specs["gateway"]
	iso.mu.Unlock()
	if len(br.Command) == 0 || br.Command[0] != spec.BrowserVNCEntrypoint || br.Env["VNC_WEB_PORT"] != "6080" || len(br.Ports) != 0 {
		t.Errorf("browser command %q env %v ports %v, want browser-vnc, VNC_WEB_PORT=6080 and no host port", br.Command, br.Env, br.Ports)
	}
	if !slices.Contains(gw.Command, "browser-vnc=http://browser:6080") {
		t.Errorf("gateway command %q does not serve the browser's screen", gw.Command)
	}
	u := res.Doc.URLs[spec.BrowserVNCService]
	if gwURL := strings.TrimSuffix(res.GatewayURL, "/mcp"); u != gwURL+spec.BrowserVNCPage {
		t.Errorf("URLs[browser-vnc] = %q, want the noVNC page under %s", u, gwURL)
	}
	if _, err := r.d.Teardown(t.Context(), res.Doc.ID); err != nil {
		t.Fatal(err)
	}
	r.assertNothingLeft(t)

	// A screen that never answers.
	r, _ = browserRig(t)
	r.env.Browser.VNC = true
	r.d.ready = func(_ *stack, _ context.Context, c spec.Component, _ string) error {
		if c.Name == spec.BrowserName && c.Role == agentenv.RoleWebsite {
			return errors.New("answered 502 Bad Gateway")
		}
		return nil
	}
	_, err = r.d.Deploy(t.Context(), r.env, Options{Provider: "iso", Mode: ModeContainer})
	if err == nil || !strings.Contains(err.Error(), "browser screen (vnc) not ready") || !strings.Contains(err.Error(), "502") {
		t.Errorf("Deploy with a dead screen = %v, want an error naming the browser's screen", err)
	}
	r.assertNothingLeft(t)

	// Without vnc: no probe, no URL.
	r, _ = browserRig(t)
	res, err = r.d.Deploy(t.Context(), r.env, Options{Provider: "iso", Mode: ModeContainer})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := res.Doc.URLs[spec.BrowserVNCService]; ok {
		t.Errorf("URLs %v has browser-vnc without vnc", res.Doc.URLs)
	}
	if _, err := r.d.Teardown(t.Context(), res.Doc.ID); err != nil {
		t.Fatal(err)
	}
}
