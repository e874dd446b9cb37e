//go:build integration

package main_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"oras.land/oras-go/v2"
	"oras.land/oras-go/v2/registry/remote"

	"github.com/agentenv/agentenv/internal/registryserver"
)

// bundleCLI is a cli with a bundle cache and a Docker config of its own (no credentials
// unless the test writes some), so that tests sharing the machine never share a cache.
func bundleCLI(t *testing.T) *cli {
	t.Helper()
	c := newCLI(t)
	c.env = append(c.env, "XDG_CACHE_HOME="+t.TempDir(), "DOCKER_CONFIG="+t.TempDir())
	return c
}

// freshCache gives c an empty bundle cache, as on another machine with the same ledger.
func (c *cli) freshCache(t *testing.T) string {
	dir := t.TempDir()
	c.env = append(c.env, "XDG_CACHE_HOME="+dir)
	return dir
}

// login writes a Docker config file holding user:password for host, as `docker login`
// leaves one without a credential helper, and points c at it.
func (c *cli) login(t *testing.T, host, user, password string) {
	t.Helper()
	dir := t.TempDir()
	auth := base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
	cfg := fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, host, auth)
	if err := os.WriteFile(filepath.Join(dir, "config.json"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	c.env = append(c.env, "DOCKER_CONFIG="+dir)
}

var pinnedLine = regexp.MustCompile(`(?m)^(\S+):(\S+)@(sha256:[0-9a-f]{64})$`)

// push pushes path to ref and returns the digest it printed.
func (c *cli) push(t *testing.T, path, ref string) (string, time.Duration) {
	t.Helper()
	start := time.Now()
	r := c.run(t.Context(), nil, "push", path, ref, "--plain-http")
	took := time.Since(start)
	m := pinnedLine.FindStringSubmatch(r.stdout)
	if r.code != 0 || m == nil || m[1]+":"+m[2] != ref {
		t.Fatalf("push %s %s: exit %d, want %s@sha256:…\n%s%s", path, ref, r.code, ref, r.stdout, r.stderr)
	}
	return m[3], took
}

// summaryOf is a run's summary without its wall time: the verdict and counts of a task's run,
// or the row of each task of a group.
func summaryOf(t *testing.T, out string) string {
	t.Helper()
	var keep []string
	for _, l := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(l, "passed: ") || strings.HasPrefix(l, "not passed: "):
			keep = append(keep, l[:strings.LastIndex(l, ";")])
		case strings.HasPrefix(l, "hello ") || strings.HasPrefix(l, "notes-task "):
			if f := strings.Fields(l); len(f) > 2 && !strings.HasPrefix(f[1], "run-") && f[1] != "run" {
				keep = append(keep, strings.Join(f, " "))
			}
		}
	}
	if len(keep) == 0 {
		t.Fatalf("no summary in:\n%s", out)
	}
	return strings.Join(keep, "\n")
}

// groupOf is the group id a run printed.
func groupOf(out string) string {
	m := regexp.MustCompile(`(?m)^group (group-\S+)`).FindStringSubmatch(out)
	if m == nil {
		return ""
	}
	return m[1]
}

// noLiveRecords fails if the test's ledger holds anything not gone, or the engine anything of
// its records.
func (c *cli) noLiveRecords(t *testing.T) {
	t.Helper()
	ls := c.run(context.Background(), nil, "ledger", "ls", "--json")
	var recs []struct{ ID, State string }
	if err := json.Unmarshal([]byte(ls.stdout), &recs); err != nil {
		t.Fatalf("ledger ls --json: %v\n%s%s", err, ls.stdout, ls.stderr)
	}
	if len(recs) != 0 {
		t.Errorf("ledger still has %v", recs)
	}
	if left := c.sandboxLeftovers(); len(left) != 0 {
		t.Errorf("engine still has %v", left)
	}
}

// TestBundlePushPullRun pushes examples/notes-task and an eval (hello-100) to a real registry,
// pulls them into an empty cache, runs each by tag and by digest with the same summary as from
// the folder, records the bundle on the group and its episodes, and, with the registry stopped,
// runs the cached tag still (saying so) and serves the cached digest with no network. It prints the push and pull times of the notes bundle.
func TestBundlePushPullRun(t *testing.T) {
	t.Parallel()
	reg := registryserver.Start(t, registryserver.Options{})
	c := bundleCLI(t)
	c.buildRuntimeImage()
	notes, evalRef := reg.Addr+"/team/notes-task:v1", reg.Addr+"/team/hello-100:v1"

	digest, pushTook := c.push(t, "../../examples/notes-task", notes)
	if again, _ := c.push(t, "../../examples/notes-task", notes); again != digest {
		t.Fatalf("a second push of the same files: digest %s, was %s", again, digest)
	}
	evalDigest, _ := c.push(t, "../../examples/evals/hello-100.yaml", evalRef)

	local := c.run(t.Context(), nil, "run", "../../examples/notes-task")
	if local.code != 0 {
		t.Fatalf("run the folder: exit %d\n%s%s", local.code, local.stdout, local.stderr)
	}
	want := summaryOf(t, local.stdout)

	// Another machine: an empty cache.
	cache := c.freshCache(t)
	start := time.Now()
	p := c.run(t.Context(), nil, "pull", notes, "--plain-http")
	pullTook := time.Since(start)
	lines := strings.Split(strings.TrimSpace(p.stdout), "\n")
	tree := filepath.Join(cache, "agentenv", "bundles", "trees", strings.Replace(digest, ":", "-", 1))
	if p.code != 0 || len(lines) != 2 || lines[0] != reg.Addr+"/team/notes-task@"+digest || lines[1] != filepath.Join(tree, "notes-task", "task.yaml") {
		t.Fatalf("pull: exit %d, want the digest and %s\n%s%s", p.code, tree, p.stdout, p.stderr)
	}
	for _, f := range []string{"notes-task/task.yaml", "notes/env.yaml"} {
		got, err := os.ReadFile(filepath.Join(tree, f))
		orig, _ := os.ReadFile(filepath.Join("../../examples", f))
		if err != nil || string(got) != string(orig) {
			t.Errorf("pulled %s differs from the example's (%v)", f, err)
		}
	}
	start = time.Now()
	if p := c.run(t.Context(), nil, "pull", notes, "--plain-http"); p.code != 0 {
		t.Fatalf("second pull: exit %d\n%s%s", p.code, p.stdout, p.stderr)
	}
	hitTook := time.Since(start)
	t.Logf("notes bundle: push %v, pull into an empty cache %v, second pull (cache hit) %v (each a CLI process)", pushTook.Round(time.Millisecond), pullTook.Round(time.Millisecond), hitTook.Round(time.Millisecond))

	for _, ref := range []string{notes, reg.Addr + "/team/notes-task@" + digest} {
		r := c.run(t.Context(), nil, "run", ref, "--plain-http")
		if r.code != 0 || summaryOf(t, r.stdout) != want {
			t.Fatalf("run %s: exit %d, want the folder's summary %q\n%s%s", ref, r.code, want, r.stdout, r.stderr)
		}
		g := c.run(t.Context(), nil, "runs", "get", groupOf(r.stdout))
		if !strings.Contains(g.stdout, "bundle "+ref+"  digest "+digest) {
			t.Errorf("runs get of the group of run %s does not name the bundle:\n%s", ref, g.stdout)
		}
		e := c.run(t.Context(), nil, "runs", "get", runLine(r.stdout))
		if !strings.Contains(e.stdout, "bundle "+ref+"  digest "+digest) {
			t.Errorf("runs get of the episode of run %s does not name the bundle:\n%s", ref, e.stdout)
		}
	}

	// The eval: same summary by reference as from its file.
	localEval := c.run(t.Context(), nil, "run", "../../examples/evals/hello-100.yaml")
	byRef := c.run(t.Context(), nil, "run", evalRef+"@"+evalDigest, "--plain-http")
	if localEval.code != 0 || byRef.code != 0 || summaryOf(t, byRef.stdout) != summaryOf(t, localEval.stdout) {
		t.Fatalf("run the eval: from its file exit %d, by digest exit %d; summaries\n%s\n%s\n%s", localEval.code, byRef.code, localEval.stdout, byRef.stdout, byRef.stderr)
	}

	// The registry stopped: the cached tag runs, saying so; the cached digest runs, silently.
	reg.Stop(t)
	r := c.run(t.Context(), nil, "run", notes, "--plain-http")
	if r.code != 0 || summaryOf(t, r.stdout) != want || !strings.Contains(r.stderr, "cannot be reached") || !strings.Contains(r.stderr, "using the cached "+notes) {
		t.Fatalf("run %s with the registry stopped: exit %d, want it run from the cache, saying so\n%s%s", notes, r.code, r.stdout, r.stderr)
	}
	r = c.run(t.Context(), nil, "pull", evalRef+"@"+evalDigest, "--plain-http")
	if r.code != 0 || strings.Contains(r.stderr, "cannot be reached") || !strings.Contains(r.stdout, evalDigest) {
		t.Fatalf("pull the eval by digest with the registry stopped: exit %d, want it from the cache, silently\n%s%s", r.code, r.stdout, r.stderr)
	}
	ls := c.run(t.Context(), nil, "bundles", "ls")
	if !strings.Contains(ls.stdout, notes) || !strings.Contains(ls.stdout, evalRef+"@"+evalDigest) {
		t.Errorf("bundles ls:\n%s%s", ls.stdout, ls.stderr)
	}
	in := c.run(t.Context(), nil, "bundles", "inspect", notes)
	if in.code != 0 || !strings.Contains(in.stdout, digest) || !strings.Contains(in.stdout, "notes/env.yaml") || !strings.Contains(in.stdout, "entry     notes-task/task.yaml") {
		t.Errorf("bundles inspect %s: exit %d\n%s%s", notes, in.code, in.stdout, in.stderr)
	}
	if rm := c.run(t.Context(), nil, "bundles", "rm", notes); rm.code != 0 {
		t.Errorf("bundles rm %s: exit %d\n%s%s", notes, rm.code, rm.stdout, rm.stderr)
	}
	if _, err := os.Stat(tree); !os.IsNotExist(err) {
		t.Errorf("bundles rm of its only reference left the tree %s (%v)", tree, err)
	}
	if in := c.run(t.Context(), nil, "bundles", "inspect", notes); in.code != 2 {
		t.Errorf("bundles inspect after rm: exit %d, want 2\n%s%s", in.code, in.stdout, in.stderr)
	}
	c.noLiveRecords(t)
}

// TestBundleEnvDeployByRef deploys an env by reference, its registry named plain HTTP by the
// registry.plain_http key (from the environment) rather than the flag, and tears it down.
func TestBundleEnvDeployByRef(t *testing.T) {
	t.Parallel()
	reg := registryserver.Start(t, registryserver.Options{})
	c := bundleCLI(t)
	ref := reg.Addr + "/team/kv:v1"
	c.push(t, c.kvEnvFile(), ref)
	c.freshCache(t)
	if r := c.run(t.Context(), nil, "env", "deploy", ref); r.code != 2 || !strings.Contains(r.stderr, "--plain-http") {
		t.Fatalf("env deploy over HTTPS of a plain HTTP registry: exit %d, want 2 naming --plain-http\n%s%s", r.code, r.stdout, r.stderr)
	}
	c.env = append(c.env, "AGENTENV_REGISTRY_PLAIN_HTTP="+reg.Addr)
	d := c.deployJSON(t, ref)
	c.teardown(t, d.ID)
	c.noLiveRecords(t)
}

// TestBundleHarborTask pushes a Harbor task folder and, from an empty cache, checks it by
// reference (oracle and nop) and runs it (the oracle), as from its folder.
func TestBundleHarborTask(t *testing.T) {
	t.Parallel()
	reg := registryserver.Start(t, registryserver.Options{})
	c := newHarborCLI(t)
	c.env = append(c.env, "XDG_CACHE_HOME="+t.TempDir(), "DOCKER_CONFIG="+t.TempDir())
	ref := reg.Addr + "/harbor/hello-file:v1"
	digest, _ := c.push(t, "../../harbor/testdata/corpus/hello-file", ref)
	c.freshCache(t)
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	r := c.run(ctx, nil, "tasks", "check", ref, "--plain-http")
	if r.code != 0 || !strings.Contains(r.stdout, "1 of 1 tasks pass") {
		t.Fatalf("tasks check %s: exit %d\n%s%s", ref, r.code, r.stdout, r.stderr)
	}
	// The check's group records the bundle it checked, as a run's does.
	group := regexp.MustCompile(`group (group-[0-9a-f]+)`).FindStringSubmatch(r.stdout)
	if group == nil {
		t.Fatalf("tasks check names no group:\n%s", r.stdout)
	}
	var g struct {
		Bundle       string `json:"bundle"`
		BundleDigest string `json:"bundle_digest"`
	}
	gr := c.run(ctx, nil, "runs", "get", group[1], "--json")
	if err := json.Unmarshal([]byte(gr.stdout), &g); err != nil || g.Bundle != ref || g.BundleDigest != digest {
		t.Errorf("the check's group records bundle %q at %q (%v); want %s at %s", g.Bundle, g.BundleDigest, err, ref, digest)
	}
	r = c.run(ctx, nil, "run", reg.Addr+"/harbor/hello-file@"+digest, "--plain-http")
	if r.code != 0 || !strings.Contains(r.stdout, "passed: 1 passed") {
		t.Fatalf("run %s by digest: exit %d\n%s%s", ref, r.code, r.stdout, r.stderr)
	}
}

// manifestOf fetches ref's manifest from a registry with no auth.
func manifestOf(t *testing.T, addr, repo, tag string) ocispec.Manifest {
	t.Helper()
	req, _ := http.NewRequestWithContext(t.Context(), http.MethodGet, "http://"+addr+"/v2/"+repo+"/manifests/"+tag, nil)
	req.Header.Set("Accept", ocispec.MediaTypeImageManifest)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m ocispec.Manifest
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil || len(m.Layers) != 1 {
		t.Fatalf("manifest of %s:%s: %v (%d layers)", repo, tag, err, len(m.Layers))
	}
	return m
}

// TestBundleTamperedBlobIsRefused changes one byte of a pushed bundle's layer in the
// registry's storage: the pull is refused naming the blob's digest, and so is a run, which
// runs nothing and leaves no tree.
func TestBundleTamperedBlobIsRefused(t *testing.T) {
	t.Parallel()
	reg := registryserver.Start(t, registryserver.Options{})
	c := bundleCLI(t)
	ref := reg.Addr + "/team/notes-task:v1"
	c.push(t, "../../examples/notes-task", ref)
	layer := manifestOf(t, reg.Addr, "team/notes-task", "v1").Layers[0].Digest.String()
	data, err := os.ReadFile(reg.BlobPath(layer))
	if err != nil {
		t.Fatal(err)
	}
	data[len(data)/2] ^= 0x01
	if err := os.WriteFile(reg.BlobPath(layer), data, 0o644); err != nil {
		t.Fatal(err)
	}
	cache := c.freshCache(t)
	for _, args := range [][]string{{"pull", ref, "--plain-http"}, {"run", ref, "--plain-http"}} {
		r := c.run(t.Context(), nil, args...)
		if r.code != 2 || !strings.Contains(r.stderr, layer) || !strings.Contains(r.stderr, "does not match its digest") {
			t.Fatalf("%s of a tampered bundle: exit %d, want 2 naming %s\n%s%s", args[0], r.code, layer, r.stdout, r.stderr)
		}
	}
	trees, _ := os.ReadDir(filepath.Join(cache, "agentenv", "bundles", "trees"))
	if len(trees) != 0 {
		t.Errorf("a tampered bundle left %d entries in the trees", len(trees))
	}
	if ls := c.run(t.Context(), nil, "runs", "ls", "--json"); strings.Contains(ls.stdout, `"id"`) {
		t.Errorf("a tampered bundle ran:\n%s", ls.stdout)
	}
	c.noLiveRecords(t)
}

// TestBundleBasicAuth pushes to and pulls from a registry behind basic auth: no credentials
// and wrong ones are refused naming docker login; the right ones, as docker login leaves them
// in the Docker config file, work.
func TestBundleBasicAuth(t *testing.T) {
	t.Parallel()
	reg := registryserver.Start(t, registryserver.Options{User: "ada", Password: "s3cret"})
	c := bundleCLI(t)
	ref := reg.Addr + "/team/notes-task:v1"
	for _, pass := range []string{"", "wrong"} {
		if pass != "" {
			c.login(t, reg.Addr, "ada", pass)
		}
		r := c.run(t.Context(), nil, "push", "../../examples/notes-task", ref, "--plain-http")
		if r.code != 2 || !strings.Contains(r.stderr, "docker login "+reg.Addr) || !strings.Contains(r.stderr, ref) {
			t.Fatalf("push with password %q: exit %d, want 2 naming docker login\n%s%s", pass, r.code, r.stdout, r.stderr)
		}
	}
	c.login(t, reg.Addr, "ada", "s3cret")
	digest, _ := c.push(t, "../../examples/notes-task", ref)
	c.freshCache(t)
	if r := c.run(t.Context(), nil, "pull", ref, "--plain-http"); r.code != 0 || !strings.Contains(r.stdout, digest) {
		t.Fatalf("pull with the right credentials: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	c.login(t, reg.Addr, "ada", "wrong")
	c.freshCache(t)
	if r := c.run(t.Context(), nil, "pull", ref, "--plain-http"); r.code != 2 || !strings.Contains(r.stderr, "docker login "+reg.Addr) {
		t.Fatalf("pull with wrong credentials: exit %d, want 2 naming docker login\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// TestBundleBadInput: an artifact that is not a bundle, an unknown tag, a task naming a file by
// an absolute path and a link leading out of the bundle are refused clearly with exit 2, with
// nothing run or pushed.
func TestBundleBadInput(t *testing.T) {
	t.Parallel()
	reg := registryserver.Start(t, registryserver.Options{})
	c := bundleCLI(t)

	// Someone else's artifact, pushed with oras.
	repo, err := remote.NewRepository(reg.Addr + "/other/thing")
	if err != nil {
		t.Fatal(err)
	}
	repo.PlainHTTP = true
	blob, err := oras.PushBytes(t.Context(), repo, "application/vnd.example.thing.v1", []byte("not a bundle"))
	if err != nil {
		t.Fatal(err)
	}
	m, err := oras.PackManifest(t.Context(), repo, oras.PackManifestVersion1_1, "application/vnd.example.thing", oras.PackManifestOptions{Layers: []ocispec.Descriptor{blob}})
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Tag(t.Context(), m, "v1"); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"pull", reg.Addr + "/other/thing:v1"}, {"run", reg.Addr + "/other/thing:v1"}} {
		r := c.run(t.Context(), nil, append(args, "--plain-http")...)
		if r.code != 2 || !strings.Contains(r.stderr, "not an agentenv bundle") || !strings.Contains(r.stderr, "application/vnd.example.thing") {
			t.Fatalf("%s of a non-bundle: exit %d, want 2\n%s%s", args[0], r.code, r.stdout, r.stderr)
		}
	}

	r := c.run(t.Context(), nil, "run", reg.Addr+"/team/notes-task:nope", "--plain-http")
	if r.code != 2 || !strings.Contains(r.stderr, "has no tag nope") {
		t.Fatalf("run of an unknown tag: exit %d, want 2\n%s%s", r.code, r.stdout, r.stderr)
	}

	dir := t.TempDir()
	env, _ := filepath.Abs("../../examples/notes/env.yaml")
	task := "name: abs\nsteps:\n  - id: env\n    type: deploy_env\n    file: " + env + "\n"
	if err := os.WriteFile(filepath.Join(dir, "task.yaml"), []byte(task), 0o644); err != nil {
		t.Fatal(err)
	}
	r = c.run(t.Context(), nil, "push", dir, reg.Addr+"/team/abs:v1", "--plain-http")
	if r.code != 2 || !strings.Contains(r.stderr, "task.yaml:5: steps[0].file") || !strings.Contains(r.stderr, "absolute path") {
		t.Fatalf("push of a task naming an absolute path: exit %d, want 2 naming the field\n%s%s", r.code, r.stdout, r.stderr)
	}
	link := t.TempDir()
	outside := filepath.Join(t.TempDir(), "rubric.md")
	if err := os.WriteFile(outside, []byte("secret"), 0o644); err != nil {
		t.Fatal(err)
	}
	task = "name: link\nsteps:\n  - id: box\n    type: deploy_sandbox\n    image: alpine\n    command: [sleep, \"9\"]\n  - id: w\n    type: write_file\n    sandbox: box\n    path: /tmp/r\n    from: rubric.md\n"
	if err := os.WriteFile(filepath.Join(link, "task.yaml"), []byte(task), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(link, "rubric.md")); err != nil {
		t.Fatal(err)
	}
	r = c.run(t.Context(), nil, "push", link, reg.Addr+"/team/link:v1", "--plain-http")
	if r.code != 2 || !strings.Contains(r.stderr, filepath.Join(link, "rubric.md")) || !strings.Contains(r.stderr, "outside the bundle's root") {
		t.Fatalf("push of a task with a link leading out: exit %d, want 2 naming the file\n%s%s", r.code, r.stdout, r.stderr)
	}
	for _, repo := range []string{"team/abs", "team/link"} {
		resp, err := http.Get("http://" + reg.Addr + "/v2/" + repo + "/tags/list")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("%s after a refused push: tags/list answered %d, want 404 (nothing pushed)", repo, resp.StatusCode)
		}
	}
	if ls := c.run(t.Context(), nil, "runs", "ls", "--json"); strings.Contains(ls.stdout, `"id"`) {
		t.Errorf("bad input ran something:\n%s", ls.stdout)
	}
	c.noLiveRecords(t)
}
