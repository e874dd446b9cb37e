package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/moby/moby/api/types/container"
	"github.com/moby/moby/client"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/engine"
	"github.com/agentenv/agentenv/mcpclient"
)

// Names of the web measures (the "web" step).
const (
	DeployWebAgentenv   = "web: deploy to ready: agentenv env deploy, shop with the browser"
	TeardownWebAgentenv = "web: teardown: agentenv env teardown, shop with the browser"
	DeployWebCompose    = "web: deploy: docker compose up -d --wait, shop with the browser"
	TeardownWebCompose  = "web: teardown: docker compose down -t 1, shop with the browser"
	NavigateGateway     = "web: browser_navigate through the gateway"
	NavigateDirect      = "web: browser_navigate straight to the Playwright MCP server"
	SnapshotGateway     = "web: browser_snapshot through the gateway"
	SnapshotDirect      = "web: browser_snapshot straight to the Playwright MCP server"
)

// Defaults of the web step.
const (
	// DefaultWebEnv is the env the web step deploys: the shop with the browser.
	DefaultWebEnv = "examples/shop/browser.yaml"
	// DefaultWebCalls is how many browser_navigate and browser_snapshot calls each path takes.
	DefaultWebCalls = 40
	// browserPort is the Playwright MCP server's port in the browser sidecar (spec.BrowserPort).
	browserPort = 8931
	callTimeout = 2 * time.Minute
)

// DefaultWebConcurrency are the counts of browser deployments the web step runs at once.
var DefaultWebConcurrency = []int{1, 2, 4, 6}

// WebFigures are the web step's figures beyond its measures.
type WebFigures struct {
	// Direct says how the bench reached the Playwright MCP server without the gateway.
	Direct string `json:"direct"`
	// Calls is how many navigate+snapshot pairs each path took while the memory was sampled.
	Calls int `json:"calls"`
	// PeakMemory is the browser sidecar's highest memory use during the loop as `docker stats`
	// shows it (usage less inactive file pages); PeakUsage the highest raw cgroup usage; Limit
	// the sidecar's memory limit; Samples the stats samples read.
	PeakMemory int64 `json:"peak_memory_bytes"`
	PeakUsage  int64 `json:"peak_usage_bytes"`
	Limit      int64 `json:"limit_bytes"`
	Samples    int   `json:"memory_samples"`
	// Concurrency is one row per count of deployments run at once.
	Concurrency []WebConcurrency `json:"concurrency,omitempty"`
}

// WebConcurrency is one round of N browser deployments at once, each deploying, navigating to
// the shop, checking its snapshot shows the catalogue, and tearing down.
type WebConcurrency struct {
	N      int             `json:"n"`
	Passed int             `json:"passed"`
	Wall   time.Duration   `json:"wall_ns"`  // the round, first deploy to last teardown
	Ready  []time.Duration `json:"ready_ns"` // each passing deployment's deploy to ready
	Errors []string        `json:"errors,omitempty"`
}

// deployed is what `agentenv env deploy --json` prints that the web step uses.
type deployed struct {
	ID         string   `json:"id"`
	GatewayURL string   `json:"gateway_url"`
	Token      string   `json:"token"`
	Records    []string `json:"records"`
}

// webEnv copies the folder of the web env file into the bench's folder with agentenv:dev
// replaced by the bench's image, and returns the copy's path.
func (b *bencher) webEnv() (string, error) {
	src := b.cfg.WebEnv
	dir := filepath.Join(b.cfg.Dir, "web")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	ents, err := os.ReadDir(filepath.Dir(src))
	if err != nil {
		return "", err
	}
	for _, e := range ents {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(filepath.Dir(src), e.Name()))
		if err != nil {
			return "", err
		}
		if strings.HasSuffix(e.Name(), ".yaml") {
			data = []byte(strings.ReplaceAll(string(data), "agentenv:dev", b.cfg.Image))
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o600); err != nil {
			return "", err
		}
	}
	return filepath.Join(dir, filepath.Base(src)), nil
}

// web measures the shop with the browser: deploy to ready side by side with docker compose,
// browser_navigate and browser_snapshot through the gateway and straight to the Playwright MCP
// server with the sidecar's peak memory meanwhile, and how many such deployments run at once.
func (b *bencher) web(ctx context.Context) {
	b.res.Web = &WebFigures{}
	env, err := b.webEnv()
	if err != nil {
		b.problem("web env: %v", err)
		return
	}
	ad, at := Measure{Name: DeployWebAgentenv}, Measure{Name: TeardownWebAgentenv}
	cd, ct := Measure{Name: DeployWebCompose}, Measure{Name: TeardownWebCompose}
	ad.Note = "until the website's ready path answers, every MCP server (the browser's included) answers and the gateway's tools probe passes; its network with no route out made"
	cd.Note = "until every container runs and the service DB's healthcheck passes (compose has no probe of the website's ready path nor of the MCP servers, and the browser shares the one network)"
	b.sideBySide(ctx, env, b.cfg.Reps, &ad, &at, &cd, &ct)
	for _, m := range []Measure{ad, at, cd, ct} {
		b.res.add(m)
	}
	b.res.Comparisons = append(b.res.Comparisons,
		Comparison{"web: deploy to ready, shop with the browser", DeployWebAgentenv, DeployWebCompose},
		Comparison{"web: teardown, shop with the browser", TeardownWebAgentenv, TeardownWebCompose},
		Comparison{"web: browser_navigate, gateway vs direct", NavigateGateway, NavigateDirect},
		Comparison{"web: browser_snapshot, gateway vs direct", SnapshotGateway, SnapshotDirect})
	if ctx.Err() != nil {
		return
	}
	dc, _, err := engine.Client(b.cfg.DockerHost)
	if err != nil {
		b.problem("web: docker engine: %v", err)
		return
	}
	defer dc.Close()
	b.webCalls(ctx, dc, env)
	for _, n := range b.cfg.WebConcurrency {
		if ctx.Err() != nil {
			return
		}
		b.cfg.Progress(fmt.Sprintf("web: %d browser deployments at once", n))
		b.res.Web.Concurrency = append(b.res.Web.Concurrency, b.webRound(ctx, env, n))
	}
}

// deployWeb deploys env with the binary under test and returns what it printed.
func (b *bencher) deployWeb(ctx context.Context, env string) (deployed, time.Duration, error) {
	r, err := b.agentenv(ctx, deployTimeout, "env", "deploy", env, "--json", "--ttl", "30m")
	var d deployed
	if err == nil {
		err = json.Unmarshal([]byte(r.stdout), &d)
	}
	if err == nil && (d.ID == "" || d.GatewayURL == "") {
		err = fmt.Errorf("env deploy --json printed no id or gateway_url: %s", tail(r.stdout, 300))
	}
	return d, r.took, err
}

// teardownWeb tears down deployment id, on a context that outlives ctx's cancellation.
func (b *bencher) teardownWeb(ctx context.Context, id string) error {
	_, err := b.agentenv(cleanup.Unbounded(ctx), shortTimeout, "env", "teardown", id)
	return err
}

// webCalls deploys env once and times browser_navigate and browser_snapshot through the gateway
// and straight to the browser sidecar's Playwright MCP server, alternating the paths call by
// call, while the sidecar's memory is read from the engine's stats stream.
func (b *bencher) webCalls(ctx context.Context, dc *client.Client, env string) {
	web := b.res.Web
	ng, nd := Measure{Name: NavigateGateway}, Measure{Name: NavigateDirect}
	sg, sd := Measure{Name: SnapshotGateway}, Measure{Name: SnapshotDirect}
	defer func() {
		for _, m := range []Measure{ng, nd, sg, sd} {
			b.res.add(m)
		}
	}()
	d, _, err := b.deployWeb(ctx, env)
	if err != nil {
		b.problem("web calls: %v", err)
		return
	}
	defer func() {
		if err := b.teardownWeb(ctx, d.ID); err != nil {
			b.problem("web calls: teardown %s: %v", d.ID, err)
		}
	}()
	var browser string
	for _, rec := range d.Records {
		if strings.HasPrefix(rec, "browser-") && !strings.HasPrefix(rec, "browser-net-") {
			browser = rec
		}
	}
	in, err := dc.ContainerInspect(ctx, browser, client.ContainerInspectOptions{})
	if err != nil {
		b.problem("web calls: inspect the browser sidecar %q: %v", browser, err)
		return
	}
	var ip string
	for name, n := range in.Container.NetworkSettings.Networks {
		if n.IPAddress.IsValid() {
			ip = n.IPAddress.String()
			web.Direct = fmt.Sprintf("the sidecar's address on its network with no route out (%s), which the host reaches through that network's bridge; no port published", name)
		}
	}
	if ip == "" {
		b.problem("web calls: the browser sidecar %s has no address", browser)
		return
	}
	c := mcpclient.Client{Name: "agentenv-bench", NoStandaloneSSE: true}
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	gw, err := c.Connect(cctx, d.GatewayURL, d.Token)
	cancel()
	if err != nil {
		b.problem("web calls: connect to the gateway: %v", err)
		return
	}
	defer gw.Close()
	cctx, cancel = context.WithTimeout(ctx, callTimeout)
	direct, err := c.Connect(cctx, fmt.Sprintf("http://%s:%d/mcp", ip, browserPort), "")
	cancel()
	if err != nil {
		b.problem("web calls: connect straight to the browser at %s: %v", ip, err)
		return
	}
	defer direct.Close()
	url, err := siteURL(ctx, gw)
	if err != nil {
		b.problem("web calls: %v", err)
		return
	}
	// Chromium starts on a session's first navigate: not counted.
	for _, s := range []*mcp.ClientSession{gw, direct} {
		if _, _, err := call(ctx, s, "browser_navigate", map[string]any{"url": url}); err != nil {
			b.problem("web calls: first browser_navigate %s: %v", url, err)
			return
		}
	}
	sctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Add(1)
	var statsErr error
	go func() { defer wg.Done(); statsErr = peakMemory(sctx, dc, browser, web) }()
	defer func() {
		stop()
		wg.Wait()
		if statsErr != nil {
			b.problem("web: stats of the browser sidecar %s: %v", browser, statsErr)
		}
	}()
	paths := []struct {
		s        *mcp.ClientSession
		nav, snp *Measure
	}{{gw, &ng, &sg}, {direct, &nd, &sd}}
	for i := range b.cfg.WebCalls {
		for j := range paths {
			p := paths[(i+j)%2] // the path that goes first alternates
			if _, took, err := call(ctx, p.s, "browser_navigate", map[string]any{"url": url}); err != nil {
				b.problem("web calls: browser_navigate: %v", err)
				return
			} else {
				p.nav.Samples = append(p.nav.Samples, took)
			}
			snap, took, err := call(ctx, p.s, "browser_snapshot", map[string]any{})
			if err != nil || !strings.Contains(snap, "Blue mug") {
				b.problem("web calls: browser_snapshot lacks the catalogue (%v): %s", err, tail(snap, 200))
				return
			}
			p.snp.Samples = append(p.snp.Samples, took)
		}
		web.Calls = i + 1
	}
}

// siteURL asks the gateway on s for its first website's URL inside the env (env_url).
func siteURL(ctx context.Context, s *mcp.ClientSession) (string, error) {
	text, _, err := call(ctx, s, "list_website_urls", nil)
	var sites struct {
		Websites []struct {
			EnvURL string `json:"env_url"`
		} `json:"websites"`
	}
	if err == nil {
		err = json.Unmarshal([]byte(text), &sites)
	}
	if err == nil && len(sites.Websites) == 0 {
		err = errors.New("no website")
	}
	if err != nil {
		return "", fmt.Errorf("list_website_urls: %w: %s", err, tail(text, 200))
	}
	return sites.Websites[0].EnvURL, nil
}

// call calls tool on s within callTimeout and returns its text and the call's time; a result
// flagged as an error is an error.
func call(ctx context.Context, s *mcp.ClientSession, tool string, args map[string]any) (string, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	start := time.Now()
	res, err := s.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	took := time.Since(start)
	if err != nil {
		return "", took, fmt.Errorf("%s: %w", tool, err)
	}
	text, _ := mcpclient.Text(res)
	if res.IsError {
		return text, took, fmt.Errorf("%s: %s", tool, tail(text, 300))
	}
	return text, took, nil
}

// peakMemory reads the engine's stats stream of container id until ctx ends, keeping the
// highest memory use in web; it returns what cut the stream short, if not ctx's end.
func peakMemory(ctx context.Context, dc *client.Client, id string, web *WebFigures) error {
	st, err := dc.ContainerStats(ctx, id, client.ContainerStatsOptions{Stream: true})
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	defer st.Body.Close()
	dec := json.NewDecoder(st.Body)
	for {
		var s container.StatsResponse
		if err := dec.Decode(&s); err != nil {
			if ctx.Err() != nil || errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		m := s.MemoryStats
		used := m.Usage
		for _, k := range []string{"inactive_file", "total_inactive_file"} {
			if v, ok := m.Stats[k]; ok && v < used {
				used -= v
				break
			}
		}
		web.Samples++
		web.PeakMemory = max(web.PeakMemory, int64(used))
		web.PeakUsage = max(web.PeakUsage, int64(m.Usage), int64(m.MaxUsage))
		web.Limit = int64(m.Limit)
	}
}

// webRound runs n browser deployments at once, each: deploy, navigate to the shop through the
// gateway, its snapshot must show the catalogue, teardown.
func (b *bencher) webRound(ctx context.Context, env string, n int) WebConcurrency {
	row := WebConcurrency{N: n}
	var mu sync.Mutex
	var wg sync.WaitGroup
	start := time.Now()
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ready, err := b.oneBrowserEpisode(ctx, env)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				row.Errors = append(row.Errors, fmt.Sprintf("#%d: %v", i+1, err))
				return
			}
			row.Passed++
			row.Ready = append(row.Ready, ready)
		}()
	}
	wg.Wait()
	row.Wall = time.Since(start)
	for _, e := range row.Errors {
		b.problem("web: %d at once: %s", n, e)
	}
	return row
}

// oneBrowserEpisode deploys env, opens the shop in its browser through the gateway, checks the
// snapshot shows the catalogue, and tears the deployment down; it returns the deploy's time.
func (b *bencher) oneBrowserEpisode(ctx context.Context, env string) (time.Duration, error) {
	d, took, err := b.deployWeb(ctx, env)
	if err != nil {
		return 0, err
	}
	err = func() error {
		cctx, cancel := context.WithTimeout(ctx, callTimeout)
		defer cancel()
		s, err := mcpclient.Client{Name: "agentenv-bench", NoStandaloneSSE: true}.Connect(cctx, d.GatewayURL, d.Token)
		if err != nil {
			return fmt.Errorf("connect to the gateway: %w", err)
		}
		defer s.Close()
		url, err := siteURL(ctx, s)
		if err != nil {
			return err
		}
		if _, _, err := call(ctx, s, "browser_navigate", map[string]any{"url": url}); err != nil {
			return err
		}
		snap, _, err := call(ctx, s, "browser_snapshot", map[string]any{})
		if err != nil {
			return err
		}
		if !strings.Contains(snap, "Blue mug") {
			return fmt.Errorf("the snapshot lacks the catalogue: %s", tail(snap, 200))
		}
		return nil
	}()
	if terr := b.teardownWeb(ctx, d.ID); terr != nil {
		err = errors.Join(err, fmt.Errorf("teardown %s: %w", d.ID, terr))
	}
	return took, err
}
