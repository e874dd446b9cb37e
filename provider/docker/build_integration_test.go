//go:build integration

package docker_test

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/provider/docker"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/provider/providertest"
)

// baseMap maps the public image the test Dockerfiles name to the one on this engine.
var baseMap = map[string]string{"debian:bookworm-slim": "agentenv-debian:bookworm"}

// eachBuilder runs test with each of the engine's builders.
func eachBuilder(t *testing.T, test func(*testing.T, string)) {
	for _, b := range []string{docker.BuilderBuildKit, docker.BuilderLegacy} {
		t.Run(b, func(t *testing.T) { test(t, b) })
	}
}

// buildSetup is setup with a provider whose Dockerfile builds go to builder.
func buildSetup(t *testing.T, builder string) (*docker.Provider, *client.Client, string, map[string]string) {
	t.Helper()
	_, cli, image, labels := setup(t)
	p, err := docker.New(docker.Config{Builder: builder}, nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { p.Close() })
	return p, cli, image, labels
}

// buildDir writes a build context of files and returns it.
func buildDir(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for p, c := range files {
		full := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// imageSpec is a build of b under a fresh record carrying labels.
func imageSpec(labels map[string]string, b agentenv.Build) agentenv.ImageSpec {
	id := providertest.NewID()
	l := maps.Clone(labels)
	l[agentenv.LabelRecord] = id
	return agentenv.ImageSpec{Name: id, Labels: l, Build: &b}
}

// dangling lists the engine's dangling images.
func dangling(t *testing.T, cli *client.Client) []string {
	t.Helper()
	res, err := cli.ImageList(t.Context(), client.ImageListOptions{Filters: make(client.Filters).Add("dangling", "true")})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, im := range res.Items {
		ids = append(ids, im.ID)
	}
	return ids
}

// leftFrom lists what carries the record label of spec, and the dangling images not in before
// that are ours (carry the test's labels); those of other tests sharing the engine are logged.
func leftFrom(t *testing.T, cli *client.Client, spec agentenv.ImageSpec, labels map[string]string, before []string) []string {
	t.Helper()
	left, err := dockertest.Leftovers(t.Context(), cli, map[string]string{agentenv.LabelRecord: spec.Name})
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range dangling(t, cli) {
		if slices.Contains(before, id) {
			continue
		}
		im, err := cli.ImageInspect(t.Context(), id)
		if cerrdefs.IsNotFound(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		var l map[string]string
		if im.Config != nil {
			l = im.Config.Labels
		}
		if agentenv.MatchLabels(l, labels) {
			left = append(left, "dangling image "+id)
		} else {
			t.Logf("a new dangling image %s not of this test (labels %v)", id, l)
		}
	}
	return left
}

// A Dockerfile build (FROM mapped, an ARG, a RUN, a COPY) makes an image a container runs; its
// Terminate removes it and every image of the build.
func TestBuildImage_RunsAndTerminates(t *testing.T) { eachBuilder(t, testBuildRunsAndTerminates) }

func testBuildRunsAndTerminates(t *testing.T, builder string) {
	p, cli, _, labels := buildSetup(t, builder)
	dir := buildDir(t, map[string]string{
		"environment/Dockerfile": "FROM debian:bookworm-slim AS base\nARG GREETING=hello\nRUN echo \"$GREETING from the build\" > /greeting.txt\n" +
			"FROM base\nCOPY app/run.sh /run.sh\n",
		"environment/app/run.sh":    "echo run\n",
		"environment/.dockerignore": "secret\n",
		"environment/secret":        "do not send",
	})
	is := imageSpec(labels, agentenv.Build{Context: filepath.Join(dir, "environment"), Args: map[string]string{"GREETING": "hi"}, BaseMap: baseMap})
	img, err := p.CreateImage(t.Context(), is)
	if err != nil {
		t.Fatalf("CreateImage: %v", err)
	}
	if img.ID != is.Name || img.Image != docker.ImageRepo+":"+is.Name {
		t.Errorf("CreateImage = id %s image %s, want %s and %s:%s", img.ID, img.Image, is.Name, docker.ImageRepo, is.Name)
	}
	if listed, err := p.List(t.Context(), map[string]string{agentenv.LabelRecord: is.Name}); err != nil || len(listed) == 0 {
		t.Errorf("List by the image's record = %v, %v; want it", listed, err)
	}
	box := spec(img.Image, labels, "sleep", "60")
	sb, err := p.Create(t.Context(), box)
	if err != nil {
		t.Fatalf("Create from the built image: %v", err)
	}
	for path, want := range map[string]string{"/greeting.txt": "hi from the build\n", "/run.sh": "echo run\n"} {
		if got, err := p.ReadFile(t.Context(), sb.ID, path); err != nil || string(got) != want {
			t.Errorf("%s in the container = %q, %v; want %q", path, got, err, want)
		}
	}
	if res, err := p.Exec(t.Context(), sb.ID, []string{"test", "-e", "/secret"}); err != nil || res.ExitCode == 0 {
		t.Errorf("the ignored file reached the image (exit %d, %v)", res.ExitCode, err)
	}
	if err := p.Terminate(t.Context(), sb.ID); err != nil {
		t.Fatal(err)
	}
	if err := p.Terminate(t.Context(), img.ID); err != nil {
		t.Fatalf("Terminate the image: %v", err)
	}
	if _, err := cli.ImageInspect(t.Context(), img.Image); !cerrdefs.IsNotFound(err) {
		t.Errorf("ImageInspect %s after Terminate = %v, want not found", img.Image, err)
	}
	if left, _ := dockertest.Leftovers(t.Context(), cli, map[string]string{agentenv.LabelRecord: is.Name}); len(left) > 0 {
		t.Errorf("after Terminate the record still has %v", left)
	}
}

// A base image that is not on the engine is ErrInvalid naming it and the map that would fix
// it, before anything is built.
func TestBuildImage_MissingBase(t *testing.T) { eachBuilder(t, testBuildMissingBase) }

func testBuildMissingBase(t *testing.T, builder string) {
	p, _, _, labels := buildSetup(t, builder)
	dir := buildDir(t, map[string]string{"Dockerfile": "FROM debian:bookworm-slim\nRUN true\n"})
	spec := imageSpec(labels, agentenv.Build{Context: dir})
	_, err := p.CreateImage(t.Context(), spec)
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), "debian:bookworm-slim") || !strings.Contains(err.Error(), "--image-map") {
		t.Errorf("CreateImage with an absent base = %v, want ErrInvalid naming it and --image-map", err)
	}
	dir = buildDir(t, map[string]string{"Dockerfile": "FROM debian:bookworm-slim\nRUN true\nFROM\n"})
	_, err = p.CreateImage(t.Context(), imageSpec(labels, agentenv.Build{Context: dir, BaseMap: baseMap}))
	if !errors.Is(err, agentenv.ErrInvalid) || !strings.Contains(err.Error(), filepath.Join(dir, "Dockerfile")+":3: FROM") {
		t.Errorf("CreateImage with a bad FROM = %v, want ErrInvalid naming the Dockerfile's line 3", err)
	}
}

// A RUN that fails gives an error with the build's last lines, and leaves nothing.
func TestBuildImage_FailingRun(t *testing.T) { eachBuilder(t, testBuildFailingRun) }

func testBuildFailingRun(t *testing.T, builder string) {
	p, cli, _, labels := buildSetup(t, builder)
	before := dangling(t, cli)
	dir := buildDir(t, map[string]string{"Dockerfile": "FROM debian:bookworm-slim\nRUN echo step one\n" +
		"RUN echo why it fails; echo details >&2; exit 3\nRUN echo never\n"})
	spec := imageSpec(labels, agentenv.Build{Context: dir, BaseMap: baseMap})
	_, err := p.CreateImage(t.Context(), spec)
	if err == nil {
		t.Fatal("CreateImage of a failing RUN succeeded")
	}
	code := map[string]string{docker.BuilderBuildKit: "exit code: 3", docker.BuilderLegacy: "non-zero code: 3"}[builder]
	for _, want := range []string{"why it fails", "details", code, filepath.Join(dir, "Dockerfile")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "never") {
		t.Errorf("error %q has output of a step after the failure", err)
	}
	t.Logf("failing build: %v", err)
	if left := leftFrom(t, cli, spec, labels, before); len(left) > 0 {
		t.Errorf("a failed build left %v", left)
	}
}

// A build cancelled mid-RUN leaves no container and no image, labelled or dangling.
func TestBuildImage_CancelledMidRun(t *testing.T) { eachBuilder(t, testBuildCancelledMidRun) }

func testBuildCancelledMidRun(t *testing.T, builder string) {
	p, cli, _, labels := buildSetup(t, builder)
	before := dangling(t, cli)
	dir := buildDir(t, map[string]string{"Dockerfile": "FROM debian:bookworm-slim\nRUN echo started\nRUN sleep 30\nRUN echo never\n"})
	spec := imageSpec(labels, agentenv.Build{Context: dir, BaseMap: baseMap})
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Second)
	defer cancel()
	began := time.Now()
	_, err := p.CreateImage(ctx, spec)
	if err == nil {
		t.Fatal("a cancelled build succeeded")
	}
	if took := time.Since(began); took > 20*time.Second {
		t.Errorf("the cancelled build returned after %s", took)
	}
	t.Logf("cancelled build: %v (after %s)", err, time.Since(began).Round(time.Millisecond))
	if left := leftFrom(t, cli, spec, labels, before); len(left) > 0 {
		t.Errorf("a cancelled build left %v", left)
		// Say whether it is a race with the engine or for good.
		time.Sleep(5 * time.Second)
		t.Logf("5 s later: %v", leftFrom(t, cli, spec, labels, before))
	}
}
