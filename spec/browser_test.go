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

func TestParse_browserErrors(t *testing.T) {
	tests := []struct {
		name string
		in   string
		want []string // every line of the joined error, in order
	}{
		{
			name: "unknown field",
			in:   minimal + "browser:\n  enabled: true\n  vison: true\n",
			want: []string{`testdata/env.yaml:8: browser.vison: unknown field (did you mean "vision"?)`},
		},
		{
			name: "not a bool",
			in:   minimal + "browser:\n  enabled: yes\n",
			want: []string{`testdata/env.yaml:7: browser.enabled: want true or false, got "yes"`},
		},
		{
			name: "vision without the browser",
			in:   minimal + "browser:\n  vision: true\n",
			want: []string{`testdata/env.yaml:7: browser.vision: vision adds tools to the browser: set enabled: true too`},
		},
		{
			name: "screenshots not a known value",
			in:   minimal + "browser:\n  enabled: true\n  screenshots: always\n",
			want: []string{`testdata/env.yaml:8: browser.screenshots: want each_step or none, got "always"`},
		},
		{
			name: "screenshots without the browser",
			in:   minimal + "browser:\n  screenshots: each_step\n",
			want: []string{`testdata/env.yaml:7: browser.screenshots: screenshots are of the browser's page: set enabled: true too`},
		},
		{
			name: "vnc without the browser",
			in:   minimal + "browser:\n  vnc: true\n",
			want: []string{`testdata/env.yaml:7: browser.vnc: vnc shows the browser live: set enabled: true too`},
		},
		{
			name: "a server takes the browser's screen route",
			in:   "name: ok\nservers:\n  - name: browser-vnc\n    image: x\n    port: 80\nbrowser: {enabled: true, vnc: true}\n",
			want: []string{`testdata/env.yaml:3: servers[0].name: name "browser-vnc" is the gateway's route to the browser's screen while browser.vnc is true (line 6): rename the server`},
		},
		{
			name: "a server takes the browser's name",
			in:   "name: ok\nservers:\n  - name: browser\n    image: x\n    port: 80\nbrowser: {enabled: true}\n",
			want: []string{`testdata/env.yaml:3: servers[0].name: name "browser" is the browser's host name while browser.enabled is true (line 6): rename the server`},
		},
		{
			name: "without a gateway",
			in:   minimal + "browser: {enabled: true}\ngateway: {enabled: false}\n",
			want: []string{`testdata/env.yaml:6: browser.enabled: the browser is reached through the gateway only: keep the gateway (remove gateway.enabled: false)`},
		},
		{
			name: "memory too small",
			in:   minimal + "browser:\n  enabled: true\n  resources: {memory: 1k}\n",
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
			if tt.want == nil {
				if !strings.Contains(err.Error(), "browser.resources.memory") {
					t.Errorf("Parse() error %q does not name browser.resources.memory", err)
				}
				return
			}
			if diff := cmp.Diff(tt.want, strings.Split(err.Error(), "\n")); diff != "" {
				t.Errorf("Parse() error lines (-want +got):\n%s", diff)
			}
		})
	}
}

// A server named browser is fine while the browser is off; an env of the browser alone is one.
func TestParse_browserAccepted(t *testing.T) {
	if _, err := spec.Parse(envFile, []byte("name: ok\nservers: [{name: browser, image: x, port: 80}]\n")); err != nil {
		t.Errorf("a server named browser without the browser: %v", err)
	}
	env, err := spec.Parse(envFile, []byte("name: ok\nbrowser: {enabled: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b := env.Browser
	if b.Image != spec.DefaultBrowserImage || b.Resources.Memory != spec.DefaultMemory || b.Resources.CPUs != spec.DefaultCPUs || b.Vision {
		t.Errorf("defaults: %+v", b)
	}
}

func TestComponents_browser(t *testing.T) {
	env, err := spec.Load("../examples/shop/browser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	comps, err := env.Components(spec.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]spec.Component{}
	for _, c := range comps {
		byName[c.Name] = c
	}
	br, gw := byName[spec.BrowserName], byName["gateway"]
	if br.Role != agentenv.RoleMCPServer || !br.Private || br.Image != spec.DefaultBrowserImage || br.Port != spec.BrowserPort || br.Path != "/mcp" {
		t.Errorf("browser component %+v, want a private MCP server on %d", br, spec.BrowserPort)
	}
	if br.ShmSize != spec.BrowserShmSize || br.Resources.Memory != spec.DefaultMemory {
		t.Errorf("browser shm %d memory %d", br.ShmSize, br.Resources.Memory)
	}
	cmd := strings.Join(br.Command, " ")
	for _, want := range []string{"--executable-path /usr/bin/chromium", "--headless", "--isolated", "--no-sandbox", "--port 8931", "--host 0.0.0.0",
		"--proxy-server " + spec.BrowserProxy, "--proxy-bypass shop"} {
		if !strings.Contains(cmd, want) {
			t.Errorf("browser command %q lacks %q", cmd, want)
		}
	}
	if strings.Contains(cmd, "--caps") {
		t.Errorf("browser command %q has caps without vision", cmd)
	}
	gcmd := strings.Join(gw.Command, " ")
	for _, want := range []string{"--server browser=http://browser:8931/mcp", "--screenshots browser", "--disable visitor=browser_*", "--website shop=http://shop:8080"} {
		if !strings.Contains(gcmd, want) {
			t.Errorf("gateway command %q lacks %q", gcmd, want)
		}
	}
	if !slices.Contains(gw.After, spec.BrowserName) {
		t.Errorf("gateway after %v: it needs the browser as a backend", gw.After)
	}
	// Start order: the browser before the gateway.
	if slices.IndexFunc(comps, func(c spec.Component) bool { return c.Name == "browser" }) > slices.IndexFunc(comps, func(c spec.Component) bool { return c.Name == "gateway" }) {
		t.Errorf("browser after the gateway in %v", comps)
	}

	env.Browser.Vision = true
	env.Egress = []string{"203.0.113.0/24:443"}
	comps, err = env.Components(spec.TopologyOptions{Host: func(name string) string { return "10.0.0.7" }})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range comps {
		switch c.Name {
		case spec.BrowserName:
			if cmd := strings.Join(c.Command, " "); !strings.Contains(cmd, "--caps vision") || !strings.Contains(cmd, "--proxy-bypass 10.0.0.7,203.0.113.0/24 ") {
				t.Errorf("vision, private hosts and egress: browser command %q", c.Command)
			}
		case "gateway":
			if !strings.Contains(strings.Join(c.Command, " "), "--server browser=http://10.0.0.7:8931/mcp") {
				t.Errorf("gateway command %q does not reach the browser at its private host", c.Command)
			}
		}
	}
}

func TestRenderCompose_browserShm(t *testing.T) {
	env, err := spec.Load("../examples/shop/browser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out, err := spec.RenderCompose(env, spec.ComposeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(out), "shm_size: 268435456") {
		t.Errorf("compose file without the browser's shm_size:\n%s", out)
	}
}

// browser.screenshots: each_step hands the gateway the browser as the server it screenshots
// after each call that acts on the page; none, like the default, does not.
func TestComponents_browserScreenshots(t *testing.T) {
	for _, tt := range []struct {
		value string
		want  bool
	}{{"each_step", true}, {"none", false}, {"", false}} {
		env, err := spec.Parse(envFile, []byte("name: ok\nbrowser: {enabled: true, screenshots: \""+tt.value+"\"}\n"))
		if err != nil {
			t.Fatalf("screenshots %q: %v", tt.value, err)
		}
		comps, err := env.Components(spec.TopologyOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range comps {
			if c.Name != "gateway" {
				continue
			}
			if got := strings.Contains(strings.Join(c.Command, " "), "--screenshots browser"); got != tt.want {
				t.Errorf("screenshots %q: gateway command %q, want --screenshots browser %v", tt.value, c.Command, tt.want)
			}
		}
	}
}

// With vnc the browser runs headed under the image's browser-vnc script, and the gateway
// serves its noVNC as the service browser-vnc; without it neither appears.
func TestComponents_browserVNC(t *testing.T) {
	env, err := spec.Load("../examples/shop/browser.yaml")
	if err != nil {
		t.Fatal(err)
	}
	find := func(comps []spec.Component, name string) spec.Component {
		t.Helper()
		i := slices.IndexFunc(comps, func(c spec.Component) bool { return c.Name == name })
		if i < 0 {
			t.Fatalf("no component %s in %v", name, comps)
		}
		return comps[i]
	}
	comps, err := env.Components(spec.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	br, gw := find(comps, spec.BrowserName), find(comps, "gateway")
	if br.Command[0] != "playwright-mcp" || !slices.Contains(br.Command, "--headless") || br.Env != nil {
		t.Errorf("without vnc: browser command %q env %v, want headless playwright-mcp and no env", br.Command, br.Env)
	}
	if strings.Contains(strings.Join(gw.Command, " "), spec.BrowserVNCService) {
		t.Errorf("without vnc: gateway command %q serves the browser's screen", gw.Command)
	}

	env.Browser.VNC = true
	comps, err = env.Components(spec.TopologyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	br, gw = find(comps, spec.BrowserName), find(comps, "gateway")
	if diff := cmp.Diff([]string{spec.BrowserVNCEntrypoint, "playwright-mcp", "--browser", "chromium"}, br.Command[:4]); diff != "" {
		t.Errorf("with vnc: browser command (-want +got):\n%s", diff)
	}
	if slices.Contains(br.Command, "--headless") {
		t.Errorf("with vnc: browser command %q is headless", br.Command)
	}
	if br.Env["VNC_WEB_PORT"] != "6080" || br.Port != spec.BrowserPort || !br.Private {
		t.Errorf("with vnc: browser env %v port %d private %v", br.Env, br.Port, br.Private)
	}
	if want := "--service browser-vnc=http://browser:6080"; !strings.Contains(strings.Join(gw.Command, " "), want) {
		t.Errorf("with vnc: gateway command %q lacks %q", gw.Command, want)
	}
	if !strings.HasPrefix(spec.BrowserVNCPage, "/svc/browser-vnc/vnc.html?") || !strings.Contains(spec.BrowserVNCPage, "path=websockify") {
		t.Errorf("BrowserVNCPage %q", spec.BrowserVNCPage)
	}

	// Side by side (the process provider), the VNC port is claimed like the others.
	env.Servers = append(env.Servers, spec.Server{Name: "clash", Image: "x", Port: spec.BrowserVNCPort})
	if err := env.CheckSharedPorts(); err == nil || !strings.Contains(err.Error(), "browser.vnc: port 6080 clashes with servers[0].port") {
		t.Errorf("CheckSharedPorts with a server on 6080: %v", err)
	}
}
