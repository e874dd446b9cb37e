//go:build integration

package main_test

import (
	"bufio"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/agentenv/agentenv/internal/chromiumtest"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
)

// shopExamples copies examples/shop and examples/shop-task into a folder of the test, with
// agentenv:dev (the shop's backend, the gateway, db-mcp) replaced by this checkout's runtime
// image, so that no other test's `images build` of agentenv:dev runs under this one, and
// returns the task's folder.
func shopExamples(t *testing.T) string {
	t.Helper()
	runtime, _ := dockertest.RuntimeImage(t)
	dir := t.TempDir()
	for _, ex := range []string{"shop", "shop-task"} {
		if err := os.CopyFS(filepath.Join(dir, ex), os.DirFS(filepath.Join("../../examples", ex))); err != nil {
			t.Fatal(err)
		}
	}
	env := filepath.Join(dir, "shop", "browser.yaml")
	b, err := os.ReadFile(env)
	if err != nil {
		t.Fatal(err)
	}
	y := strings.ReplaceAll(string(b), "agentenv:dev", runtime)
	y = strings.Replace(y, "\ngateway:\n", "\ngateway:\n  image: "+runtime+"\n", 1)
	y = strings.Replace(y, "\n  db_mcp:\n", "\n  db_mcp:\n    image: "+runtime+"\n", 1)
	if strings.Count(y, runtime) != 3 {
		t.Fatalf("examples/shop/browser.yaml changed shape: want the runtime image in 3 places:\n%s", y)
	}
	if err := os.WriteFile(env, []byte(y), 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, "shop-task")
}

var runRow = regexp.MustCompile(`(?m)^(run-\S+)\s+(\S+)\s+(\S+)\s`)

// TestRunShopTaskK4 runs examples/shop-task four times through the CLI: the scripted agent
// orders two items through the browser, every episode scores 1, each episode keeps one
// screenshot per call that acted on the page (browser.screenshots: each_step) as files beside
// its trajectory, nothing is left on the engine; and the explorer's trajectory page of one run
// shows those screenshots, which load in a real browser (Chromium).
func TestRunShopTaskK4(t *testing.T) {
	t.Parallel()
	c := newCLI(t)
	dir := shopExamples(t)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Minute)
	defer cancel()
	start := time.Now()
	r := c.run(ctx, nil, "run", dir, "--k", "4", "--concurrency", "2")
	t.Logf("agentenv run shop-task --k 4 --concurrency 2: %s", time.Since(start).Round(time.Millisecond))
	if r.code != 0 || !strings.Contains(r.stdout, "passed: 4 passed") || !strings.Contains(r.stdout, "mean score 1") {
		t.Fatalf("run shop-task: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	noFalseWarnings(t, r.stdout)
	if left := c.deployLeftovers(); len(left) != 0 {
		t.Errorf("left %v", left)
	}
	rows := runRow.FindAllStringSubmatch(r.stdout, -1)
	if len(rows) != 4 {
		t.Fatalf("want 4 runs in the summary:\n%s", r.stdout)
	}
	// navigate, then three clicks: the first order, back to the shop, the second order.
	const wantShots = 4
	for _, row := range rows {
		id := row[1]
		if row[2] != "passed" || row[3] != "1" {
			t.Errorf("%s: %s score %s, want passed score 1", id, row[2], row[3])
		}
		shots, _ := filepath.Glob(filepath.Join(c.state, "agentenv", "runs", id, "agent.trajectory.images", "*.png"))
		var sizes []int64
		for _, s := range shots {
			fi, err := os.Stat(s)
			if err != nil || fi.Size() < 1000 {
				t.Errorf("%s: screenshot %s: %v, %d bytes", id, s, err, fi.Size())
				continue
			}
			sizes = append(sizes, fi.Size())
		}
		t.Logf("%s: %d screenshots, bytes %v", id, len(shots), sizes)
		if len(shots) != wantShots {
			t.Errorf("%s: %d screenshots saved, want %d (one per call that acted on the page)", id, len(shots), wantShots)
		}
	}

	// The explorer's trajectory page of the first run shows each screenshot, and Chromium
	// loads every one of them.
	base := c.startUI()
	tab := chromiumtest.Tab(t)
	url := base + "/runs/" + rows[0][1] + "/trajectory/agent"
	tctx, tcancel := context.WithTimeout(tab, time.Minute)
	defer tcancel()
	if err := chromedp.Do(tctx, chromedp.Navigate(url), chromedp.WaitVisible(chromedp.CSS(`img`))); err != nil {
		t.Fatalf("open %s: %v", url, err)
	}
	// Every <img> complete and decoded: naturalWidth is 0 for one that failed to load. The page
	// loads them lazily, as they near the viewport: they are asked for at once here.
	var widths []int
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(300 * time.Millisecond) {
		var err error
		widths, err = chromedp.Run(tctx, chromedp.Evaluate[[]int](`[...document.images].map(i => (i.loading = "eager", i)).filter(i => i.complete).map(i => i.naturalWidth)`))
		if err == nil && len(widths) == wantShots || time.Now().After(deadline) {
			break
		}
	}
	if len(widths) != wantShots {
		t.Fatalf("trajectory page %s: %d images loaded, want %d", url, len(widths), wantShots)
	}
	for i, w := range widths {
		if w <= 0 {
			t.Errorf("trajectory page %s: image %d did not load (naturalWidth %d)", url, i, w)
		}
	}
	t.Logf("trajectory page images' natural widths: %v", widths)
}

// startUI starts `agentenv ui` over the test's state on a free loopback port until the test
// ends, and returns its URL.
func (c *cli) startUI() string {
	c.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ui := c.cmd(ctx, nil, "ui", "--listen", "127.0.0.1:0")
	out, err := ui.StdoutPipe()
	if err != nil {
		c.t.Fatal(err)
	}
	if err := ui.Start(); err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(func() {
		_ = ui.Process.Signal(syscall.SIGINT)
		_ = ui.Wait()
		cancel()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case l := <-lines:
		u, ok := strings.CutPrefix(strings.TrimSpace(l), "explorer: ")
		if !ok {
			c.t.Fatalf("agentenv ui printed %q, want its URL", l)
		}
		return strings.TrimSuffix(u, "/")
	case <-time.After(30 * time.Second):
		c.t.Fatal("agentenv ui printed no URL within 30 s")
	}
	return ""
}
