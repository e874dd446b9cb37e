//go:build integration

package images_test

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv/images"
	"github.com/agentenv/agentenv/internal/staticbin"
	"github.com/agentenv/agentenv/internal/testbin"
	"github.com/agentenv/agentenv/provider/docker/dockertest"
	"github.com/agentenv/agentenv/provider/providertest"
)

// removeImage removes tag when t ends.
func removeImage(t *testing.T, cli *client.Client, tag string) {
	t.Cleanup(func() {
		_, err := cli.ImageRemove(context.Background(), tag, client.ImageRemoveOptions{Force: true, PruneChildren: true})
		if err != nil && !strings.Contains(err.Error(), "No such image") {
			t.Errorf("remove image %s: %v", tag, err)
		}
	})
}

func TestBuild(t *testing.T) {
	cli := dockertest.Require(t)
	tag := "agentenv-imagestest:" + providertest.NewID()
	removeImage(t, cli, tag)
	err := images.Build(t.Context(), cli, images.Spec{
		Tag: tag, Binary: testbin.TestServer(t), Entrypoint: []string{"/agentenv", "serve"},
		Labels: map[string]string{"agentenv.test": "images"},
	})
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	res, err := cli.ImageInspect(t.Context(), tag)
	if err != nil {
		t.Fatalf("inspect %s: %v", tag, err)
	}
	if got := strings.Join(res.Config.Entrypoint, " "); got != "/agentenv serve" || res.Config.Labels["agentenv.test"] != "images" {
		t.Errorf("image config: entrypoint %q labels %v", got, res.Config.Labels)
	}
	if res.Config.User != images.User {
		t.Errorf("image config: user %q, want %q (not root)", res.Config.User, images.User)
	}

	if err := images.Build(t.Context(), cli, images.Spec{Tag: tag + "-dyn", Binary: "/bin/sh"}); err == nil ||
		!strings.Contains(err.Error(), "dynamically linked") {
		t.Errorf("Build(/bin/sh) = %v, want dynamically linked", err)
	}
}

func TestBuildSelf(t *testing.T) {
	cli := dockertest.Require(t)
	tag := "agentenv-imagestest:" + providertest.NewID()
	removeImage(t, cli, tag)
	exe, _ := os.Executable()
	err := images.BuildSelf(t.Context(), cli, tag)
	if staticbin.Check(exe) != nil {
		if err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
			t.Errorf("BuildSelf from a dynamic test binary = %v, want a hint to build with CGO_ENABLED=0", err)
		}
		return
	}
	if err != nil {
		t.Errorf("BuildSelf from a static test binary = %v", err)
	}
}
