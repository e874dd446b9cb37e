//go:build integration

package main_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv/internal/registryserver"
)

// notesImages are the images examples/notes/env.yaml runs, and how many of its components run
// each: the service DB, the DB web UI, and agentenv:dev for notes, db-mcp and the gateway.
var notesImages = map[string]int{"agentenv-postgres:local": 1, "agentenv-adminer:local": 1, "agentenv:dev": 3}

// deployTook is a deploy's time from its admission to ready, as its progress says it: the
// elapsed time of the gateway's probe.
func deployTook(t *testing.T, stderr string) time.Duration {
	t.Helper()
	for _, l := range strings.Split(stderr, "\n") {
		if f := strings.Fields(l); len(f) > 3 && f[0] == "gateway" && f[2] == "probe" {
			if d, err := time.ParseDuration(f[3]); err == nil {
				return d
			}
		}
	}
	t.Fatalf("no gateway probe in the deploy's progress:\n%s", stderr)
	return 0
}

// vmDeploy deploys what (an env file or a bundle reference) in VM mode on docker_vm with debug
// logs, tears it down, and returns the deploy's stderr (its progress events and the provider's
// logs) and how long the command took: resolving what, then deploying until ready.
func (c *cli) vmDeploy(t *testing.T, what string) (string, time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	r := c.run(ctx, nil, "env", "deploy", what, "--plain-http", "--provider", "docker_vm", "--mode", "vm", "--log-level", "debug")
	took := time.Since(start)
	if r.code != 0 {
		t.Fatalf("env deploy %s on docker_vm: exit %d\n%s%s", what, r.code, r.stdout, r.stderr)
	}
	m := regexp.MustCompile(`(?m)^deployment\s+(dep-\S+)$`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("env deploy printed no deployment:\n%s", r.stdout)
	}
	if td := c.run(context.Background(), nil, "env", "teardown", m[1]); td.code != 0 {
		t.Errorf("teardown %s: exit %d\n%s%s", m[1], td.code, td.stdout, td.stderr)
	}
	return r.stderr, took
}

// loads are the provider's debug lines of the images it loaded into the VM from this host,
// image and time taken, for the log.
func loads(stderr string) string {
	re := regexp.MustCompile(`msg="image loaded into vm".* image=(\S+) took=(\S+)`)
	var out []string
	for _, m := range re.FindAllStringSubmatch(stderr, -1) {
		out = append(out, m[1]+" "+m[2])
	}
	return strings.Join(out, ", ")
}

// imageEvents are the deploy's progress lines of phase image (level=DEBUG logs aside).
func imageEvents(stderr string) []string {
	var out []string
	for _, l := range strings.Split(stderr, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[2] == "image" {
			out = append(out, l)
		}
	}
	return out
}

// TestBundleImagesPulledInVM: examples/notes/env.yaml pushed with --with-images to a real
// registry (listening where the VM reaches this host) pins its three images by digest, the
// same digest on a second push, and leaves no tag on the engine. A VM-mode deploy on docker_vm
// of the bundle, from an empty bundle cache, has the VM's engine pull each image from the
// registry by digest: every component's progress says pulled, and nothing is loaded from this
// host. With the registry stopped, the same deploy falls back to the upload and says so per
// component. The deploy of the folder itself (uploaded from this host, as before bundles had
// images) runs beside them, and the three deploy-to-ready times are logged (BENCHMARKS.md).
// Nothing is left on the engine or in the ledger.
func TestBundleImagesPulledInVM(t *testing.T) {
	t.Parallel()
	reg := registryserver.Start(t, registryserver.Options{AllInterfaces: true})
	c := bundleCLI(t)
	c.buildRuntimeImage()
	ref := reg.Addr + "/team/notes:v1"

	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	push := c.run(ctx, nil, "push", "../../examples/notes/env.yaml", ref, "--with-images", "--plain-http", "--json")
	pushTook := time.Since(start)
	if push.code != 0 {
		t.Fatalf("push --with-images: exit %d\n%s%s", push.code, push.stdout, push.stderr)
	}
	var pushed struct {
		Digest string
		Images []struct{ Ref, Name, Digest string }
	}
	if err := json.Unmarshal([]byte(push.stdout), &pushed); err != nil {
		t.Fatalf("push --json: %v\n%s", err, push.stdout)
	}
	pins := map[string]string{}
	for _, im := range pushed.Images {
		if !strings.HasPrefix(im.Name, reg.Addr+"/team/notes/images/") || !regexp.MustCompile(`^sha256:[0-9a-f]{64}$`).MatchString(im.Digest) {
			t.Errorf("image %+v: want a digest under %s/team/notes/images/", im, reg.Addr)
		}
		pins[im.Ref] = im.Name + "@" + im.Digest
	}
	if len(pins) != len(notesImages) {
		t.Fatalf("pushed images %v, want %d: those of %v", pins, len(notesImages), notesImages)
	}
	if plain, _ := c.push(t, "../../examples/notes/env.yaml", reg.Addr+"/team/notes:plain"); plain == pushed.Digest {
		t.Errorf("a push without images has the digest %s of the push with them", plain)
	}
	start = time.Now()
	again := c.run(ctx, nil, "push", "../../examples/notes/env.yaml", ref, "--with-images", "--plain-http", "--json")
	againTook := time.Since(start)
	if again.code != 0 || !strings.Contains(again.stdout, pushed.Digest) {
		t.Errorf("a second push --with-images: exit %d, want the digest %s again\n%s%s", again.code, pushed.Digest, again.stdout, again.stderr)
	}
	imgs, err := c.dc.ImageList(ctx, client.ImageListOptions{All: true})
	if err != nil {
		t.Fatal(err)
	}
	for _, im := range imgs.Items {
		for _, r := range append(im.RepoTags, im.RepoDigests...) {
			if strings.HasPrefix(r, reg.Addr+"/") {
				t.Errorf("the push left %s on the engine", r)
			}
		}
	}

	out, uploaded := c.vmDeploy(t, "../../examples/notes/env.yaml")
	uploadedReady := deployTook(t, out)
	t.Logf("uploaded: %s", loads(out))

	c.freshCache(t)
	out, pulled := c.vmDeploy(t, ref)
	pulledReady := deployTook(t, out)
	events := imageEvents(out)
	if len(events) != 5 {
		t.Errorf("%d image events, want one per component (5):\n%s", len(events), out)
	}
	for img, n := range notesImages {
		want := "pulled " + pins[img] + " in the vm"
		if got := strings.Count(strings.Join(events, "\n"), want); got != n {
			t.Errorf("%d events %q, want %d:\n%s", got, want, n, strings.Join(events, "\n"))
		}
	}
	if strings.Contains(out, "uploading") || strings.Contains(out, "image loaded into vm") {
		t.Errorf("a deploy with every image pulled uploaded one from this host:\n%s", out)
	}

	reg.Stop(t)
	out, fellBack := c.vmDeploy(t, ref)
	fellBackReady := deployTook(t, out)
	events = imageEvents(out)
	for img, n := range notesImages {
		want := regexp.MustCompile(regexp.QuoteMeta("pull of "+pins[img]+" failed (") + `.*` + regexp.QuoteMeta("); uploading "+img+" from this host"))
		if got := len(want.FindAllString(strings.Join(events, "\n"), -1)); got != n {
			t.Errorf("%d events %q, want %d:\n%s", got, want, n, strings.Join(events, "\n"))
		}
	}
	if !strings.Contains(out, "image loaded into vm") {
		t.Errorf("the fallback loaded nothing from this host:\n%s", out)
	}
	t.Logf("fallback: %s", loads(out))
	ms := func(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
	t.Logf("push --with-images of the notes env: %s (again: %s); VM-mode notes deploy on docker_vm, to ready (whole command): images pulled from the registry %s (%s), uploaded from this host %s (%s), pull refused then uploaded %s (%s)",
		ms(pushTook), ms(againTook), ms(pulledReady), ms(pulled), ms(uploadedReady), ms(uploaded), ms(fellBackReady), ms(fellBack))
	c.noLiveRecords(t)
}

// TestBundleImagesPulledOnDocker: the kv env pushed with its image (agentenv:dev) and deployed
// from the bundle in container mode on docker: the engine, which lacks the pinned reference
// (the push removed what it added), pulls it by digest before anything is created, and the
// components run it, as their progress says. The pulled reference is removed at the end.
func TestBundleImagesPulledOnDocker(t *testing.T) {
	t.Parallel()
	reg := registryserver.Start(t, registryserver.Options{})
	c := bundleCLI(t)
	c.buildRuntimeImage()
	ref := reg.Addr + "/team/kv:v1"
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	push := c.run(ctx, nil, "push", "../../examples/kv/env.yaml", ref, "--with-images", "--plain-http", "--json")
	var pushed struct {
		Images []struct{ Ref, Name, Digest string }
	}
	if push.code != 0 || json.Unmarshal([]byte(push.stdout), &pushed) != nil || len(pushed.Images) != 1 || pushed.Images[0].Ref != "agentenv:dev" {
		t.Fatalf("push --with-images: exit %d, want agentenv:dev pinned\n%s%s", push.code, push.stdout, push.stderr)
	}
	pin := pushed.Images[0].Name + "@" + pushed.Images[0].Digest
	t.Cleanup(func() {
		_, _ = c.dc.ImageRemove(context.Background(), pin, client.ImageRemoveOptions{})
	})
	if _, err := c.dc.ImageInspect(ctx, pin); err == nil {
		t.Fatalf("the engine has %s after the push, want it pulled by the deploy", pin)
	}
	c.freshCache(t)
	r := c.run(ctx, nil, "env", "deploy", ref, "--plain-http", "--provider", "docker", "--mode", "container")
	if r.code != 0 {
		t.Fatalf("env deploy %s on docker: exit %d\n%s%s", ref, r.code, r.stdout, r.stderr)
	}
	if m := regexp.MustCompile(`(?m)^deployment\s+(dep-\S+)$`).FindStringSubmatch(r.stdout); m != nil {
		defer func() {
			if td := c.run(context.Background(), nil, "env", "teardown", m[1]); td.code != 0 {
				t.Errorf("teardown %s: exit %d\n%s%s", m[1], td.code, td.stdout, td.stderr)
			}
			c.noLiveRecords(t)
		}()
	}
	if _, err := c.dc.ImageInspect(ctx, pin); err != nil {
		t.Errorf("the engine has no %s after the deploy: %v", pin, err)
	}
	events := strings.Join(imageEvents(r.stderr), "\n")
	if n := strings.Count(events, "pinned "+pin+" (on the engine)"); n != 2 {
		t.Errorf("%d components ran %s, want kv and the gateway:\n%s", n, pin, r.stderr)
	}
}

// TestBundleImagesPulledInVMWithLogin: the kv env pushed with its image to a registry that
// wants a login (the one `docker login` left, which the push used too) and deployed from the
// bundle in VM mode on docker_vm: the VM's engine pulls the image with that login, for kv and
// the gateway alike, and uploads nothing. With a wrong login in the Docker config, the pull is
// refused and the image is uploaded from this host instead, as the progress says.
func TestBundleImagesPulledInVMWithLogin(t *testing.T) {
	t.Parallel()
	reg := registryserver.Start(t, registryserver.Options{User: "agent", Password: "s3cret", AllInterfaces: true})
	c := bundleCLI(t)
	c.buildRuntimeImage()
	c.login(t, reg.Addr, "agent", "s3cret")
	ref := reg.Addr + "/team/kv:v1"
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	push := c.run(ctx, nil, "push", "../../examples/kv/env.yaml", ref, "--with-images", "--plain-http", "--json")
	var pushed struct {
		Digest string
		Images []struct{ Ref, Name, Digest string }
	}
	if push.code != 0 || json.Unmarshal([]byte(push.stdout), &pushed) != nil || len(pushed.Images) != 1 {
		t.Fatalf("push --with-images: exit %d, want agentenv:dev pinned\n%s%s", push.code, push.stdout, push.stderr)
	}
	pin := pushed.Images[0].Name + "@" + pushed.Images[0].Digest

	out, _ := c.vmDeploy(t, ref)
	events := strings.Join(imageEvents(out), "\n")
	if n := strings.Count(events, "pulled "+pin+" in the vm"); n != 2 || strings.Contains(out, "image loaded into vm") {
		t.Errorf("%d components pulled %s with the login, want kv and the gateway, and nothing uploaded:\n%s", n, pin, out)
	}
	if strings.Contains(out, "s3cret") {
		t.Errorf("the deploy's output holds the registry password:\n%s", out)
	}

	// With a wrong login the registry refuses even the bundle's tag, so the deploy names the
	// bundle by its digest, which the cache holds since the first deploy: only the VM's pull
	// meets the registry.
	c.login(t, reg.Addr, "agent", "wrong")
	out, _ = c.vmDeploy(t, ref+"@"+pushed.Digest)
	events = strings.Join(imageEvents(out), "\n")
	refused := regexp.MustCompile(regexp.QuoteMeta("pull of "+pin+" failed (") + `.*` + regexp.QuoteMeta("); uploading agentenv:dev from this host"))
	if n := len(refused.FindAllString(events, -1)); n != 2 || !strings.Contains(out, "image loaded into vm") {
		t.Errorf("%d components said the refused pull, want 2, and the image uploaded:\n%s", n, out)
	}
	c.noLiveRecords(t)
}
