//go:build integration

package explorer_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/explorer"
	"github.com/agentenv/agentenv/internal/chromiumtest"
	"github.com/agentenv/agentenv/internal/testbin"
	"github.com/agentenv/agentenv/ledger/bolt"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
)

// browserTest is one agentenv state folder, the CLI that writes it, an `agentenv ui` over it
// and a headless Chromium looking at that.
type browserTest struct {
	t        *testing.T
	bin      string
	state    string
	url      string
	shots    string
	dc       *client.Client
	ctx      context.Context // the browser tab
	mu       sync.Mutex
	alerts   []string // alert() dialogs the pages opened: script from data ran
	ledgerDB string
}

func buildCLI(t *testing.T) string {
	t.Helper()
	return testbin.Agentenv(t)
}

func (b *browserTest) cmd(ctx context.Context, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, b.bin, args...)
	cmd.Env = append(os.Environ(), "XDG_STATE_HOME="+b.state, "HOME="+b.state, "AGENTENV_CONFIG=")
	return cmd
}

// run runs the CLI to completion and fails the test unless it exits 0.
func (b *browserTest) run(args ...string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var out, errb bytes.Buffer
	cmd := b.cmd(ctx, args...)
	cmd.Stdout, cmd.Stderr = &out, &errb
	if err := cmd.Run(); err != nil {
		b.t.Fatalf("agentenv %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
	}
	return out.String()
}

// deployments lists every deployment id in the test's ledger.
func (b *browserTest) deployments() []string {
	b.t.Helper()
	l, err := bolt.Open(context.Background(), b.ledgerDB, nil)
	if err != nil {
		b.t.Fatalf("open ledger: %v", err)
	}
	defer l.Close()
	docs, err := l.Deployments().List(context.Background(), nil, 0)
	if err != nil {
		b.t.Fatal(err)
	}
	var ids []string
	for _, d := range docs {
		ids = append(ids, d.ID)
	}
	return ids
}

// leftovers returns what the engine still runs of deployment id.
func (b *browserTest) leftovers(id string) []string {
	b.t.Helper()
	left, err := dockertest.Leftovers(context.Background(), b.dc, map[string]string{agentenv.LabelDeployment: id})
	if err != nil {
		b.t.Fatal(err)
	}
	return left
}

// shot saves a full-page screenshot of the tab as name.png.
func (b *browserTest) shot(name string) {
	b.t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
	if err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
		return
	}
	p := filepath.Join(b.shots, name+".png")
	if err := os.WriteFile(p, png, 0o644); err != nil {
		b.t.Errorf("screenshot %s: %v", name, err)
	}
	b.t.Logf("screenshot %s", p)
}

// do runs browser actions with a deadline and fails the test on error.
func (b *browserTest) do(what string, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	err := chromedp.Do(ctx, actions...)
	// Chromium aborts a page load when the host's network interfaces change, as they do
	// whenever another test's engine makes a bridge network: the load is tried again.
	for i := 0; i < 3 && err != nil && strings.Contains(err.Error(), "ERR_NETWORK_CHANGED") && ctx.Err() == nil; i++ {
		b.t.Logf("%s: %v; again", what, err)
		err = chromedp.Do(ctx, actions...)
	}
	if err != nil {
		b.shot("failed-" + regexp.MustCompile(`\W+`).ReplaceAllString(what, "-"))
		b.t.Fatalf("%s: %v", what, err)
	}
}

// waitText polls until the element sel's text contains want, within d.
func (b *browserTest) waitText(what, sel, want string, d time.Duration) string {
	b.t.Helper()
	deadline := time.Now().Add(d)
	var text string
	for {
		ctx, cancel := context.WithTimeout(b.ctx, 5*time.Second)
		var err error
		text, err = chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
		cancel()
		if err == nil && strings.Contains(text, want) {
			return text
		}
		if time.Now().After(deadline) {
			b.shot("failed-" + regexp.MustCompile(`\W+`).ReplaceAllString(what, "-"))
			b.t.Fatalf("%s: %q never showed %q within %s (last: %v %q)", what, sel, want, d, err, text)
		}
		time.Sleep(300 * time.Millisecond)
	}
}

// eval evaluates a JavaScript expression in the tab.
func eval[T any](b *browserTest, what, expr string) T {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, 10*time.Second)
	defer cancel()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		b.t.Fatalf("%s: %v", what, err)
	}
	return v
}

// startFromPage starts examples/notes-task with k and concurrency from the start page, and
// waits for the group page it leads to; shot names a screenshot of the filled form.
func (b *browserTest) startFromPage(k, concurrency, shot string) {
	b.t.Helper()
	b.do("open the start page", 30*time.Second, chromedp.Navigate(b.url+"/start"), chromedp.WaitVisible(chromedp.CSS("#start")))
	b.do("fill the form", 10*time.Second,
		chromedp.SetValue(chromedp.CSS(`#start input[name=task]`), "../examples/notes-task"),
		chromedp.SetValue(chromedp.CSS(`#start input[name=k]`), k),
		chromedp.SetValue(chromedp.CSS(`#start input[name=concurrency]`), concurrency))
	if shot != "" {
		b.shot(shot)
	}
	b.do("start", 3*time.Minute, chromedp.Click(chromedp.CSS(`#start button`)), chromedp.WaitVisible(chromedp.CSS("#episodes")))
}

func newBrowserTest(t *testing.T) *browserTest {
	dc := dockertest.Require(t)
	b := &browserTest{t: t, bin: buildCLI(t), state: t.TempDir(), dc: dc}
	b.ledgerDB = filepath.Join(b.state, "agentenv", "ledger.bolt")
	b.shots = os.Getenv("AGENTENV_TEST_ARTIFACTS")
	if b.shots == "" {
		b.shots = t.TempDir()
	}
	b.shots = filepath.Join(b.shots, "explorer")
	if err := os.MkdirAll(b.shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Whatever the test left, gc collects and the check below names.
		gc := b.cmd(context.Background(), "gc")
		_ = gc.Run()
		for _, id := range b.deployments() {
			if left := b.leftovers(id); len(left) > 0 {
				t.Errorf("deployment %s left %v on the engine; removing them", id, left)
				_ = dockertest.Remove(context.Background(), dc, map[string]string{agentenv.LabelDeployment: id})
			}
		}
	})
	return b
}

// startUI starts `agentenv ui` on a free loopback port and returns its URL.
func (b *browserTest) startUI() {
	b.t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := b.cmd(ctx, "ui", "--listen", "127.0.0.1:0")
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 2 * time.Minute
	var errb bytes.Buffer
	cmd.Stderr = &errb
	out, err := cmd.StdoutPipe()
	if err != nil {
		b.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.t.Fatal(err)
	}
	b.t.Cleanup(func() {
		cancel()
		_ = cmd.Wait()
		if b.t.Failed() {
			b.t.Logf("agentenv ui stderr:\n%s", errb.String())
		}
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case l := <-lines:
		u, ok := strings.CutPrefix(l, "explorer: ")
		if !ok {
			b.t.Fatalf("agentenv ui printed %q, want its URL", l)
		}
		b.url = strings.TrimSuffix(u, "/")
	case <-time.After(30 * time.Second):
		b.t.Fatalf("agentenv ui printed no URL within 30 s:\n%s", errb.String())
	}
}

func (b *browserTest) startBrowser() {
	b.t.Helper()
	ctx := chromiumtest.Tab(b.t, chromedp.WindowSize(1400, 1000))
	// confirm() of the buttons is accepted; an alert() means script from data ran.
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return
			}
			if ev.Type == page.DialogTypeAlert {
				b.mu.Lock()
				b.alerts = append(b.alerts, ev.Message)
				b.mu.Unlock()
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	b.ctx = ctx
}

// putScriptTrajectory writes a finished run whose trajectory holds <script> tags in every
// text an agent or server controls, and returns its id.
func (b *browserTest) putScriptTrajectory() string {
	b.t.Helper()
	id := "run-xss0000001"
	dir := filepath.Join(b.state, "agentenv", "runs", id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		b.t.Fatal(err)
	}
	traj := filepath.Join(dir, "agent.trajectory.ndjson")
	lines := []string{
		`{"seq":1,"time":"2026-01-01T00:00:00Z","kind":"prompt","agent":"scripted","text":"<script>alert('prompt')</script>"}`,
		`{"seq":2,"time":"2026-01-01T00:00:01Z","kind":"tool_call","turn":1,"tool":"<img src=x onerror=alert('tool')>","arguments":{"q":"<script>alert('args')</script>"}}`,
		`{"seq":3,"time":"2026-01-01T00:00:02Z","kind":"tool_result","turn":1,"tool":"search","text":"</pre><script>alert('result')</script>"}`,
	}
	if err := os.WriteFile(traj, []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		b.t.Fatal(err)
	}
	l, err := bolt.Open(context.Background(), b.ledgerDB, nil)
	if err != nil {
		b.t.Fatal(err)
	}
	defer l.Close()
	score := 0.0
	run := agentenv.Run{ID: id, Task: "<script>alert('task')</script>", TaskDigest: "sha256:x", Status: "completed", Score: &score,
		Error:   "<script>alert('error')</script>",
		Attrs:   map[string]string{"episode": "1", "file": "xss.yaml"},
		Created: time.Now().Add(-time.Hour), Ended: time.Now().Add(-time.Hour + time.Second),
		Steps: []agentenv.StepRecord{{ID: "agent", Type: "prompt_agent", Status: "passed",
			Outputs: map[string]string{"trajectory": traj, "response": "<script>alert('output')</script>"}}},
	}
	if err := l.Runs().Put(context.Background(), run); err != nil {
		b.t.Fatal(err)
	}
	return id
}

func TestBrowser(t *testing.T) {
	b := newBrowserTest(t)
	b.run("images", "build")

	// A group of 4 through the CLI, as a user runs it.
	out := b.run("run", "../examples/notes-task", "--k", "4", "--concurrency", "4")
	if !strings.Contains(out, "passed: 4 passed") {
		t.Fatalf("run notes-task --k 4:\n%s", out)
	}
	// A deployment to tear down from its page.
	var dep struct{ ID string }
	if err := json.Unmarshal([]byte(b.run("env", "deploy", "../examples/kv/env.yaml", "--json")), &dep); err != nil || dep.ID == "" {
		t.Fatalf("env deploy --json: %v", err)
	}
	if left := b.leftovers(dep.ID); len(left) == 0 {
		t.Fatalf("deployment %s runs nothing on the engine", dep.ID)
	}
	xss := b.putScriptTrajectory()

	b.startUI()
	b.startBrowser()

	t.Run("groups, group, episode, trajectory", func(t *testing.T) {
		b.t = t
		b.do("open the groups page", 30*time.Second, chromedp.Navigate(b.url+"/"), chromedp.WaitVisible(chromedp.CSS("#groups")))
		text := b.waitText("groups table", "#groups", "notes-task", 10*time.Second)
		if !strings.Contains(text, "4 passed") {
			t.Errorf("groups table does not show 4 passed:\n%s", text)
		}
		b.shot("01-groups")
		b.do("open the notes-task group", 30*time.Second,
			chromedp.Click(chromedp.Search(`//tr[td[contains(., "notes-task")]]//a`)),
			chromedp.WaitVisible(chromedp.CSS("#episodes")))
		text = b.waitText("group page", "main", "pass@4", 10*time.Second)
		for _, want := range []string{"4/4", "Score distribution", "Funnel by step", "search_dentist"} {
			if !strings.Contains(text, want) {
				t.Errorf("group page lacks %q", want)
			}
		}
		rows := eval[int](b, "count episodes", `document.querySelectorAll("#episodes tbody tr").length`)
		if rows != 4 {
			t.Errorf("group page lists %d episodes, want 4", rows)
		}
		b.shot("02-group")
		b.do("open an episode", 30*time.Second,
			chromedp.Click(chromedp.CSS(`#episodes tbody tr:first-child a`)),
			chromedp.WaitVisible(chromedp.CSS("#steps")))
		text = b.waitText("episode page", "main", "Teardown receipt", 10*time.Second)
		for _, want := range []string{"deploy_env", "prompt_agent", "sql", "expected", "✓ pass", "terminated", "all down"} {
			if !strings.Contains(text, want) {
				t.Errorf("episode page lacks %q", want)
			}
		}
		verifierRows := eval[int](b, "count verifier rows", `document.querySelectorAll("table.verifier tbody tr").length`)
		if verifierRows < 4 {
			t.Errorf("episode page shows %d verifier rows, want one per check (at least 4)", verifierRows)
		}
		b.shot("03-episode")
		b.do("open its trajectory", 30*time.Second,
			chromedp.Click(chromedp.CSS(`a.traj`)),
			chromedp.WaitVisible(chromedp.CSS("#conversation")))
		text = b.waitText("trajectory page", "#conversation", "tool_call", 10*time.Second)
		for _, want := range []string{"add_note", "search_notes", "tool_result", "dentist", "groceries"} {
			if !strings.Contains(text, want) {
				t.Errorf("trajectory lacks %q:\n%s", want, text)
			}
		}
		// Beside the agent's own record: what the env's gateway recorded, kept before teardown.
		gw := b.waitText("the gateway's trajectory", "ol.gateway", "add_note", 10*time.Second)
		for _, want := range []string{"add_note", "search_notes", "role default"} {
			if !strings.Contains(gw, want) {
				t.Errorf("the gateway's trajectory lacks %q:\n%s", want, gw)
			}
		}
		b.shot("04-trajectory")
	})

	t.Run("a trajectory with <script> renders as text", func(t *testing.T) {
		b.t = t
		for _, path := range []string{"/runs/" + xss + "/trajectory/agent", "/runs/" + xss, "/runs", "/"} {
			b.do("open "+path, 30*time.Second, chromedp.Navigate(b.url+path), chromedp.WaitVisible(chromedp.CSS("main")))
			scripts := eval[int](b, "count scripts", `document.querySelectorAll("main script").length`)
			imgs := eval[int](b, "count images", `document.querySelectorAll("main img").length`)
			text := eval[string](b, "read the page", `document.getElementById("main").innerText`)
			if scripts != 0 || imgs != 0 {
				t.Errorf("%s: %d script and %d img elements from data in the page", path, scripts, imgs)
			}
			if !strings.Contains(text, "<script>alert(") {
				t.Errorf("%s: the <script> text is not shown as text:\n%s", path, text)
			}
			if path == "/runs/"+xss+"/trajectory/agent" {
				b.shot("05-trajectory-script-as-text")
			}
		}
		time.Sleep(500 * time.Millisecond)
		b.mu.Lock()
		defer b.mu.Unlock()
		if len(b.alerts) > 0 {
			t.Errorf("script from data ran: alerts %q", b.alerts)
		}
	})

	t.Run("start a run and watch it finish without reloading", func(t *testing.T) {
		b.t = t
		b.startFromPage("2", "2", "06-start")
		eval[bool](b, "mark the page", `window.agentenvMarker = true`)
		b.waitText("live progress", "main", "running", 30*time.Second)
		b.shot("07-group-running")
		// The outcome counts say "2 passed" only once both episodes ended and passed; the
		// cancel button goes once the run, teardowns included, is over.
		b.waitText("the started run finishing", "main", "2 passed", 4*time.Minute)
		for deadline := time.Now().Add(2 * time.Minute); eval[bool](b, "poll", `!!document.querySelector('form[data-api$="/cancel"]')`); {
			if time.Now().After(deadline) {
				t.Fatal("the run's cancel button is still there 2 min after both episodes passed")
			}
			time.Sleep(500 * time.Millisecond)
		}
		if text := b.waitText("the started run's episodes", "#episodes", "passed", 30*time.Second); strings.Contains(text, "running") {
			t.Errorf("an episode is still shown running after the run ended:\n%s", text)
		}
		still := eval[bool](b, "check it was not reloaded", `window.agentenvMarker === true`)
		refreshed := eval[string](b, "count live refreshes", `document.body.dataset.refreshed || "0"`)
		if !still || refreshed == "0" {
			t.Errorf("the page was reloaded (marker kept: %v) or never updated live (refreshes: %s)", still, refreshed)
		}
		b.shot("08-group-finished-live")
	})

	t.Run("cancel a run", func(t *testing.T) {
		b.t = t
		b.startFromPage("6", "1", "")
		b.do("wait for the cancel button", 30*time.Second, chromedp.WaitVisible(chromedp.CSS(`form[data-api$="/cancel"] button`)))
		loc := eval[string](b, "read the group", `location.pathname`)
		b.do("cancel", 30*time.Second, chromedp.Click(chromedp.CSS(`form[data-api$="/cancel"] button`)))
		b.waitText("the cancelled run", "main", "cancelled", 3*time.Minute)
		deadline := time.Now().Add(3 * time.Minute)
		for {
			running := eval[bool](b, "poll", `!!document.querySelector('form[data-api$="/cancel"]')`)
			if !running {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the cancelled run %s is still running after 3 min", loc)
			}
			time.Sleep(500 * time.Millisecond)
		}
		b.shot("09-group-cancelled")
		for _, id := range b.deployments() {
			if id == dep.ID {
				continue
			}
			if left := b.leftovers(id); len(left) > 0 {
				t.Errorf("after the cancel, deployment %s still runs %v", id, left)
			}
		}
	})

	t.Run("tear down a deployment from its page", func(t *testing.T) {
		b.t = t
		b.do("open the deployments", 30*time.Second, chromedp.Navigate(b.url+"/deployments?state=current"), chromedp.WaitVisible(chromedp.CSS("#deployments")))
		b.waitText("deployments table", "#deployments", dep.ID, 10*time.Second)
		b.shot("10-deployments")
		b.do("open the deployment", 30*time.Second,
			chromedp.Click(chromedp.CSS(fmt.Sprintf(`tr[data-deployment=%q] a`, dep.ID))),
			chromedp.WaitVisible(chromedp.CSS("#sandboxes")))
		b.waitText("sandbox health", "#sandboxes", "running", 10*time.Second)
		b.shot("11-deployment-live")
		b.do("tear down", 30*time.Second, chromedp.Click(chromedp.CSS("#teardown")))
		b.waitText("teardown result", "main", "torn_down", 3*time.Minute)
		b.waitText("the receipt", "main", "Teardown receipt", 30*time.Second)
		if left := b.leftovers(dep.ID); len(left) != 0 {
			t.Errorf("after teardown from the page the engine still runs %v", left)
		}
		b.shot("12-deployment-torn-down")
	})

	t.Run("ledger and episodes pages", func(t *testing.T) {
		b.t = t
		b.do("open the ledger", time.Minute, chromedp.Navigate(b.url+"/ledger"), chromedp.WaitVisible(chromedp.CSS("#rungc")))
		b.shot("13-ledger")
		b.do("run gc", time.Minute, chromedp.Click(chromedp.CSS("#rungc")))
		b.waitText("gc result", "main", "gc: ", time.Minute)
		b.do("open the episodes", 30*time.Second, chromedp.Navigate(b.url+"/runs"), chromedp.WaitVisible(chromedp.CSS("#runs")))
		b.waitText("episodes table", "#runs", "notes-task", 10*time.Second)
		// 4 from the CLI, 2 started here, at least 1 of the cancelled run (its episodes that
		// never began are not recorded), and the one with the script.
		if n := eval[int](b, "count episodes", `document.querySelectorAll("#runs tbody tr").length`); n < 8 {
			t.Errorf("episodes table shows %d episodes, want at least 4 + 2 + 1 + 1", n)
		}
		b.shot("14-episodes")
		b.do("filter the episodes", 30*time.Second,
			chromedp.SetValue(chromedp.CSS(`select[name=outcome]`), "cancelled"),
			chromedp.Click(chromedp.CSS(`form.filters button`)),
			chromedp.WaitVisible(chromedp.CSS("#runs")))
		// The click navigates: until the filtered page has replaced the old one, #runs is the
		// unfiltered table. Wait (bounded) for a table of cancelled episodes only.
		var text string
		for deadline := time.Now().Add(10 * time.Second); ; {
			text = b.waitText("filtered episodes", "#runs", "cancelled", 10*time.Second)
			if !strings.Contains(text, "passed") || time.Now().After(deadline) {
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if strings.Contains(text, "passed") {
			t.Errorf("the cancelled filter shows passed episodes:\n%s", text)
		}
	})
}

// TestRunsPageRendered10k measures, in Chromium, how long the runs and groups pages take over
// a ledger of 10,000 episodes: to the first byte, to DOMContentLoaded and to the load event
// (Navigation Timing). It reports figures; it asserts only that the pages render their rows.
func TestRunsPageRendered10k(t *testing.T) {
	r := newRig(t, explorer.Config{})
	t0 := time.Now().Add(-48 * time.Hour)
	for g := range 2500 {
		r.putGroup(t, "notes-task", 4, t0.Add(time.Duration(g)*time.Minute), func(i int) *float64 { return ptr(float64(i % 2)) })
	}
	tab := chromiumtest.Tab(t, chromedp.WindowSize(1400, 1000))
	for _, path := range []string{"/runs", "/runs?outcome=passed", "/"} {
		ctx, cancel := context.WithTimeout(tab, time.Minute)
		if err := chromedp.Do(ctx, chromedp.Navigate(r.srv.URL+path), chromedp.WaitVisible(chromedp.CSS("table.grid tbody tr"))); err != nil {
			cancel()
			t.Fatalf("open %s: %v", path, err)
		}
		timing, err := chromedp.Run(ctx, chromedp.Evaluate[map[string]float64](`(() => {
			const n = performance.getEntriesByType("navigation")[0];
			return {ttfb: n.responseStart - n.requestStart, dom: n.domContentLoadedEventEnd - n.startTime,
				load: n.loadEventEnd - n.startTime, rows: document.querySelectorAll("table.grid tbody tr").length};
		})()`))
		cancel()
		if err != nil {
			t.Fatalf("timing of %s: %v", path, err)
		}
		if timing["rows"] < 25 {
			t.Errorf("%s shows %v rows, want a full page", path, timing["rows"])
		}
		t.Logf("%-22s 10,000 episodes: first byte %.1f ms, DOMContentLoaded %.1f ms, load %.1f ms, %v rows",
			path, timing["ttfb"], timing["dom"], timing["load"], timing["rows"])
	}
}
