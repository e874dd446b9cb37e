package explorer_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/explorer"
	"github.com/agentenv/agentenv/task"
)

var scriptLines = []string{
	`{"seq":1,"time":"2026-01-01T00:00:00Z","kind":"prompt","agent":"scripted","text":"find <script>alert(1)</script> notes"}`,
	`{"seq":2,"time":"2026-01-01T00:00:01Z","kind":"tool_call","turn":1,"tool":"search_notes","arguments":{"query":"<script>alert(2)</script>"}}`,
	`{"seq":3,"time":"2026-01-01T00:00:02Z","kind":"tool_result","turn":1,"tool":"search_notes","text":"</pre><script>alert(3)</script>"}`,
	`{"seq":4,"time":"2026-01-01T00:00:03Z","kind":"response","text":"groceries"}`,
}

func TestPages(t *testing.T) {
	r := newRig(t, explorer.Config{Deployer: &fakeDeployer{}, Collector: &fakeCollector{}})
	start := time.Now().Add(-time.Hour)
	ids := r.putGroup(t, "notes-task", 4, start, func(i int) *float64 { return ptr([]float64{1, 1, 0.5, 0}[i-1]) }, scriptLines...)

	for _, tc := range []struct {
		path string
		want []string
	}{
		{"/", []string{ids[0], "notes-task", "2 passed", "1 scored below 1", "1 failed"}},
		{"/groups/" + ids[0], []string{"Score distribution", "pass@k by k", "Funnel by step", ids[3], "pass@4"}},
		{"/runs", ids},
		{"/runs?outcome=passed", ids[:2]},
		{"/runs/" + ids[2], []string{"deploy_env", "expected", "&lt;b&gt;x&lt;/b&gt;", "✗ fail", "Teardown receipt", "c0ffee", "trajectory →", "dep-" + ids[2]}},
		{"/runs/" + ids[0] + "/trajectory/agent", []string{"search_notes", "&lt;script&gt;alert(1)&lt;/script&gt;", "tool_result", "groceries"}},
		{"/ledger", []string{"rec-&lt;leak&gt;", "owner dead", "Run gc"}},
		{"/deployments", []string{"No deployments"}},
		{"/start", []string{"Task file or folder"}},
	} {
		code, body := r.get(t, tc.path)
		if code != http.StatusOK {
			t.Errorf("GET %s = %d:\n%s", tc.path, code, body)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(body, w) {
				t.Errorf("GET %s: no %q in the page", tc.path, w)
			}
		}
		if strings.Contains(body, "<script>alert") {
			t.Errorf("GET %s: an unescaped <script> from the trajectory", tc.path)
		}
	}
	// Any episode of the group leads to the group.
	resp, err := http.Get(r.srv.URL + "/groups/" + ids[2])
	if err != nil || resp.Request.URL.Path != "/groups/"+ids[0] {
		t.Errorf("GET /groups/<episode 3> ended at %v, %v; want redirected to episode 1's group", resp.Request.URL, err)
	}
	if code, _ := r.get(t, "/runs/nope"); code != http.StatusNotFound {
		t.Errorf("GET /runs/nope = %d, want 404", code)
	}
}

func TestGroups(t *testing.T) {
	r := newRig(t, explorer.Config{})
	t0 := time.Now().Add(-time.Hour)
	a := r.putGroup(t, "notes-task", 3, t0, func(int) *float64 { return ptr(1) })
	b := r.putGroup(t, "hello", 2, t0.Add(time.Millisecond), func(i int) *float64 { return ptr(float64(i - 1)) })
	c := r.putGroup(t, "notes-task", 2, t0.Add(time.Minute), func(i int) *float64 {
		if i == 2 {
			return nil
		}
		return ptr(1)
	})
	var page explorer.GroupsPage
	r.getJSON(t, "/api/v1/groups", &page)
	var got []string
	for _, g := range page.Groups {
		got = append(got, g.ID+":"+strconv.Itoa(g.Episodes))
	}
	want := []string{c[0] + ":2", b[0] + ":2", a[0] + ":3"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("groups = %v, want %v", got, want)
	}
	var g explorer.Group
	r.getJSON(t, "/api/v1/groups/"+a[0], &g)
	if g.Counts["passed"] != 3 || len(g.Stats.PassAt) != 3 || g.Stats.PassAt[2].Value != 1 || *g.Stats.Mean != 1 || g.Running {
		t.Errorf("group a = %+v", g)
	}
	r.getJSON(t, "/api/v1/groups/"+c[0], &g)
	if !g.Running || g.Counts["running"] != 1 {
		t.Errorf("group c = running %v counts %v, want running with one running episode", g.Running, g.Counts)
	}
	r.getJSON(t, "/api/v1/groups/"+b[0], &g)
	if g.Counts["failed"] != 1 || g.Counts["passed"] != 1 || g.Stats.PassAt[0].Value != 0.5 || g.Stats.PassAt[1].Value != 1 {
		t.Errorf("group b = counts %v pass@k %v", g.Counts, g.Stats.PassAt)
	}
	// A group's later episode redirects to its group in the API too.
	r.getJSON(t, "/api/v1/groups/"+a[2], &g)
	if g.ID != a[0] {
		t.Errorf("GET /api/v1/groups/<a episode 3> = group %s, want %s", g.ID, a[0])
	}
}

func TestRunsPagination(t *testing.T) {
	r := newRig(t, explorer.Config{})
	t0 := time.Now().Add(-time.Hour)
	r.putGroup(t, "notes-task", 30, t0, func(i int) *float64 { return ptr(float64(i % 2)) })
	seen := map[string]bool{}
	path := "/api/v1/runs?limit=7&outcome=passed"
	for pages := 0; path != ""; pages++ {
		if pages > 5 {
			t.Fatal("more pages than 15 passed episodes need")
		}
		var p explorer.RunsPage
		r.getJSON(t, path, &p)
		for _, e := range p.Runs {
			if e.Outcome != "passed" || seen[e.ID] {
				t.Errorf("episode %s (%s) repeated or not passed", e.ID, e.Outcome)
			}
			seen[e.ID] = true
		}
		path = ""
		if p.Next != "" {
			path = "/api/v1/runs?limit=7&outcome=passed&cursor=" + url.QueryEscape(p.Next)
		}
	}
	if len(seen) != 15 {
		t.Errorf("paged through %d passed episodes, want 15", len(seen))
	}
	if code, _ := r.get(t, "/api/v1/runs?cursor=bogus"); code != http.StatusBadRequest {
		t.Errorf("GET runs with a bogus cursor = %d, want 400", code)
	}
}

// TestExactGroups: runs carrying attrs.group form exactly their group (its own document's id),
// whatever the task files, without the runs a resume replaced, listed once.
func TestExactGroups(t *testing.T) {
	r := newRig(t, explorer.Config{})
	ctx := context.Background()
	t0 := time.Now().Add(-time.Hour)
	doc := agentenv.Run{ID: "group-1", Task: "sweep", TaskDigest: "sha256:sweep", Status: "completed",
		Attrs: map[string]string{"kind": "group", "file": "sweep.yaml"}, Created: t0}
	if err := r.ledger.Runs().Put(ctx, doc); err != nil {
		t.Fatal(err)
	}
	one := 1.0
	put := func(id, task, ep string, created time.Time, extra map[string]string) {
		attrs := map[string]string{"episode": ep, "file": task + ".yaml", "group": "group-1"}
		for k, v := range extra {
			attrs[k] = v
		}
		if err := r.ledger.Runs().Put(ctx, agentenv.Run{ID: id, Task: task, TaskDigest: "sha256:" + task, Status: "completed", Score: &one,
			Attrs: attrs, Created: created, Ended: created.Add(time.Second)}); err != nil {
			t.Fatal(err)
		}
	}
	put("run-a1", "a", "1", t0.Add(time.Millisecond), map[string]string{"resumed_by": "group-1"})
	put("run-a2", "a", "2", t0.Add(2*time.Millisecond), nil)
	put("run-b1", "b", "1", t0.Add(3*time.Millisecond), nil)
	put("run-a1b", "a", "1", t0.Add(4*time.Millisecond), nil) // the resume's run of slot a/1
	// An unrelated older-style run of task a just after: not in the group.
	if err := r.ledger.Runs().Put(ctx, agentenv.Run{ID: "run-x", Task: "a", TaskDigest: "sha256:a", Status: "completed",
		Attrs: map[string]string{"episode": "1", "file": "a.yaml"}, Created: t0.Add(5 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	var g explorer.Group
	r.getJSON(t, "/api/v1/groups/group-1", &g)
	if g.ID != "group-1" || g.Episodes != 3 || g.Counts["passed"] != 3 || g.Task != "sweep" {
		t.Errorf("group = %+v, want group-1 with 3 passed episodes", g)
	}
	r.getJSON(t, "/api/v1/groups/run-b1", &g)
	if g.ID != "group-1" {
		t.Errorf("GET /api/v1/groups/<a member> = %s, want redirected to group-1", g.ID)
	}
	var page explorer.GroupsPage
	r.getJSON(t, "/api/v1/groups", &page)
	var got []string
	for _, g := range page.Groups {
		got = append(got, g.ID+":"+strconv.Itoa(g.Episodes))
	}
	if want := "run-x:1 group-1:3"; strings.Join(got, " ") != want {
		t.Errorf("groups = %v, want %s", got, want)
	}
}

// TestMergedShardGroups: after `agentenv runs merge`, the merged group is its shards' episodes
// (attrs.group re-pointed to it), and each shard's group, marked merged_into, still shows the
// episodes it ran (attrs.shard_group).
func TestMergedShardGroups(t *testing.T) {
	r := newRig(t, explorer.Config{})
	ctx := context.Background()
	t0 := time.Now().Add(-time.Hour)
	docs := []agentenv.Run{
		{ID: "group-m", Task: "sweep", Status: "completed", Attrs: map[string]string{"kind": "group", "merged_from": "group-s1,group-s2"}, Created: t0},
		{ID: "group-s1", Task: "sweep", Status: "completed", Attrs: map[string]string{"kind": "group", "shard": "1/2", "merged_into": "group-m"}, Created: t0},
		{ID: "group-s2", Task: "sweep", Status: "completed", Attrs: map[string]string{"kind": "group", "shard": "2/2", "merged_into": "group-m"}, Created: t0},
	}
	one := 1.0
	for i, shard := range []string{"group-s1", "group-s2", "group-s1"} {
		docs = append(docs, agentenv.Run{ID: "run-" + strconv.Itoa(i), Task: "a", TaskDigest: "sha256:a", Status: "completed", Score: &one,
			Attrs:   map[string]string{"group": "group-m", "shard_group": shard, "instance": "0", "attempt": strconv.Itoa(i + 1)},
			Created: t0.Add(time.Duration(i+1) * time.Millisecond), Ended: t0.Add(time.Second)})
	}
	for _, d := range docs {
		if err := r.ledger.Runs().Put(ctx, d); err != nil {
			t.Fatal(err)
		}
	}
	for id, want := range map[string]int{"group-m": 3, "group-s1": 2, "group-s2": 1} {
		var g explorer.Group
		r.getJSON(t, "/api/v1/groups/"+id, &g)
		if g.ID != id || g.Episodes != want || g.Counts["passed"] != want {
			t.Errorf("group %s = %+v, want %d passed episodes", id, g, want)
		}
	}
	var g explorer.Group
	r.getJSON(t, "/api/v1/groups/run-1", &g)
	if g.ID != "group-m" {
		t.Errorf("GET /api/v1/groups/<an episode> = %s, want the merged group-m", g.ID)
	}
}

// A tool result's image saved with the trajectory is shown inline on the trajectory page and
// served from the trajectory's own folder of images, and nothing else is.
func TestTrajectoryImages(t *testing.T) {
	r := newRig(t, explorer.Config{})
	shot := `{"seq":2,"kind":"tool_result","tool":"browser_take_screenshot","text":"took it","images":[{"path":"agent.trajectory.images/0001.png","media_type":"image/png"}]}`
	ids := r.putGroup(t, "shop-task", 1, time.Now(), func(int) *float64 { return ptr(1) }, `{"seq":1,"kind":"prompt","text":"look"}`, shot)
	png := []byte("\x89PNG\r\n\x1a\nshot")
	dir := filepath.Join(r.runsDir, ids[0], "agent.trajectory.images")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "0001.png"), png, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(r.runsDir, ids[0], "secret.png"), []byte("not an image of the trajectory"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := "/runs/" + ids[0] + "/trajectory/agent/images/0001.png"
	if code, body := r.get(t, "/runs/"+ids[0]+"/trajectory/agent"); code != http.StatusOK || !strings.Contains(body, `<img src="`+src+`"`) {
		t.Errorf("trajectory page = %d, want an <img> of %s:\n%s", code, src, body)
	}
	resp, err := http.Get(r.srv.URL + src)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "image/png" || string(got) != string(png) {
		t.Errorf("GET %s = %d %s %q, want the PNG", src, resp.StatusCode, resp.Header.Get("Content-Type"), got)
	}
	for _, bad := range []string{"../secret.png", "..%2Fsecret.png", "0001.txt", ".hidden.png", "0002.png"} {
		if code, _ := r.get(t, "/runs/"+ids[0]+"/trajectory/agent/images/"+bad); code == http.StatusOK {
			t.Errorf("GET images/%s = 200, want refused", bad)
		}
	}
}

// A live deployment with browser.vnc has a form on its page that opens noVNC through the
// gateway: the page's query as hidden fields and the admin token asked, never shown or stored;
// one without it, or torn down, has none.
func TestDeploymentWatch(t *testing.T) {
	r := newRig(t, explorer.Config{})
	page := "http://127.0.0.1:40001/svc/browser-vnc/vnc.html?autoconnect=1&resize=scale&path=websockify"
	now := time.Now().UTC()
	for _, d := range []agentenv.Deployment{
		{ID: "dep-vnc", Env: "shop", State: agentenv.DeploymentLive, URLs: map[string]string{"browser-vnc": page}, Created: now, Expires: now.Add(time.Hour)},
		{ID: "dep-plain", Env: "shop", State: agentenv.DeploymentLive, URLs: map[string]string{"gateway": "http://127.0.0.1:40002"}, Created: now, Expires: now.Add(time.Hour)},
		{ID: "dep-gone", Env: "shop", State: agentenv.DeploymentTornDown, URLs: map[string]string{"browser-vnc": page}, Created: now, Expires: now.Add(time.Hour)},
	} {
		if err := r.ledger.Deployments().Put(t.Context(), d); err != nil {
			t.Fatal(err)
		}
	}
	code, body := r.get(t, "/deployments/dep-vnc")
	if code != http.StatusOK {
		t.Fatalf("GET /deployments/dep-vnc = %d", code)
	}
	for _, want := range []string{
		`<form method="get" action="http://127.0.0.1:40001/svc/browser-vnc/vnc.html" target="_blank" id="watch">`,
		`<input type="hidden" name="autoconnect" value="1">`,
		`<input type="hidden" name="path" value="websockify">`,
		`<input type="password" name="access_token"`,
		"Open the live view",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("the deployment page lacks %q:\n%s", want, body)
		}
	}
	var v explorer.DeploymentView
	r.getJSON(t, "/api/v1/deployments/dep-vnc", &v)
	if v.Watch == nil || v.Watch.URL != page || v.Watch.TokenParam != "access_token" {
		t.Errorf("JSON watch = %+v", v.Watch)
	}
	for _, id := range []string{"dep-plain", "dep-gone"} {
		if _, body := r.get(t, "/deployments/"+id); strings.Contains(body, `id="watch"`) {
			t.Errorf("%s has a live view form", id)
		}
	}
}

// A run's artifacts (a collect_files step's output) are listed on its page and in the API
// with a download link that serves the stored bytes as an attachment; names the run does not
// list, or that leave its folder, are refused.
func TestArtifacts(t *testing.T) {
	r := newRig(t, explorer.Config{})
	ids := r.putGroup(t, "notes-task", 1, time.Now(), func(int) *float64 { return ptr(1) })
	id := ids[0]
	dir := filepath.Join(r.runsDir, id)
	if err := os.MkdirAll(filepath.Join(dir, "artifacts", "keep", "out"), 0o700); err != nil {
		t.Fatal(err)
	}
	body := "the report\n"
	stored := filepath.Join(dir, "artifacts", "keep", "out", "report.txt")
	for p, data := range map[string]string{stored: body, filepath.Join(dir, "unlisted.txt"): "not an artifact", filepath.Join(r.runsDir, "secret.txt"): "another run's"} {
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	run, err := r.ledger.Runs().Get(t.Context(), id)
	if err != nil {
		t.Fatal(err)
	}
	list, _ := json.Marshal([]task.Artifact{{Path: "/work/out/report.txt", Name: "artifacts/keep/out/report.txt", File: stored, Size: int64(len(body)), SHA256: "ab12"}})
	run.Steps = append(run.Steps, agentenv.StepRecord{ID: "keep", Type: task.TypeCollectFiles, Status: "passed", Outputs: map[string]string{"artifacts": string(list), "files": "1"}})
	if err := r.ledger.Runs().Put(t.Context(), run); err != nil {
		t.Fatal(err)
	}
	link := "/runs/" + id + "/files/artifacts/keep/out/report.txt"
	if code, page := r.get(t, "/runs/"+id); code != http.StatusOK || !strings.Contains(page, `href="`+link+`"`) || !strings.Contains(page, "/work/out/report.txt") {
		t.Errorf("run page = %d, want a download link %s:\n%s", code, link, page)
	}
	var v explorer.RunView
	r.getJSON(t, "/api/v1/runs/"+id, &v)
	if len(v.Artifacts) != 1 || v.Artifacts[0].URL != link || v.Artifacts[0].Step != "keep" || v.Artifacts[0].Size != int64(len(body)) {
		t.Errorf("API artifacts = %+v, want one at %s", v.Artifacts, link)
	}
	resp, err := http.Get(r.srv.URL + link)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(got) != body || !strings.HasPrefix(resp.Header.Get("Content-Disposition"), "attachment") ||
		resp.Header.Get("Content-Type") != "application/octet-stream" {
		t.Errorf("GET %s = %d %v %q, want the file as an attachment", link, resp.StatusCode, resp.Header, got)
	}
	for _, bad := range []string{"unlisted.txt", "../secret.txt", "..%2Fsecret.txt", "artifacts/keep/../../unlisted.txt", "artifacts%2Fkeep%2F..%2F..%2F..%2Fsecret.txt", "/etc/passwd"} {
		if code, b := r.get(t, "/runs/"+id+"/files/"+bad); code == http.StatusOK {
			t.Errorf("GET files/%s = 200 %q, want refused", bad, b)
		}
	}
}
