// Package dockertest helps integration tests use the local Docker engine: it connects (failing,
// never skipping, when no engine answers), builds the test workload image once per process, and
// checks that a test left no containers, networks or volumes behind.
//
// Every helper filters by labels the caller chose, so tests of several people can share one
// engine: a helper never lists or removes what does not carry the caller's labels.
package dockertest

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv/images"
	"github.com/agentenv/agentenv/internal/engine"
	"github.com/agentenv/agentenv/internal/testbin"
)

// host returns the engine address the client dials, for messages.
func host() string {
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		return h
	}
	return client.DefaultDockerHost
}

// Require returns a client of the engine named by DOCKER_HOST (default
// unix:///var/run/docker.sock) after pinging it. Without an engine the test fails: integration
// tests are opted into with a build tag, so a missing engine is an error, not a reason to skip.
// The client is closed when the test ends.
func Require(tb testing.TB) *client.Client {
	tb.Helper()
	cli, _, err := engine.Client("")
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = cli.Ping(ctx, client.PingOptions{NegotiateAPIVersion: true})
		cancel()
	}
	if err != nil {
		tb.Fatalf("integration tests need a Docker engine at %s: %v", host(), err)
	}
	tb.Cleanup(func() { cli.Close() })
	return cli
}

// testImage caches the test image for the life of the test process.
var testImage builtImage

// TestImage returns the tag of a FROM scratch image whose entrypoint is a static build of
// internal/testserver at /agentenv (so a container's command is "serve :8080", "sleep",
// "exit 3", ...). It builds the binary and the image once per process, and tags the image
// agentenv-testserver:<hash of the binary>, so an unchanged workload is not rebuilt. Images are
// cached artifacts and are not removed.
func TestImage(tb testing.TB) string {
	tb.Helper()
	return testImage.get(tb, testbin.ServerPackage, "agentenv-testserver", []string{"/agentenv"})
}

// RuntimeImage returns the tag of the runtime image built from the agentenv command of this
// checkout (FROM scratch, /agentenv, no entrypoint), as `agentenv images build` makes it:
// agentenv-runtime:<hash of the binary>. Env files in tests name it in place of agentenv:dev.
// It also returns the path of the static binary, which tests may run.
func RuntimeImage(tb testing.TB) (tag, binary string) {
	tb.Helper()
	tag = runtimeImage.get(tb, testbin.Package, "agentenv-runtime", nil)
	return tag, runtimeImage.bin
}

var runtimeImage builtImage

// builtImage builds one image from one Go package, once per process.
type builtImage struct {
	once sync.Once
	tag  string
	bin  string
	err  error
}

func (b *builtImage) get(tb testing.TB, pkg, repo string, entrypoint []string) string {
	tb.Helper()
	cli := Require(tb)
	b.once.Do(func() {
		// Both binaries are built once for every test process (scripts/test); their
		// builds have their own bound.
		bin := testbin.TestServer(tb)
		if pkg == testbin.Package {
			bin = testbin.Agentenv(tb)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		b.tag, b.bin, b.err = buildImage(ctx, cli, pkg, bin, repo, entrypoint)
	})
	if b.err != nil {
		tb.Fatalf("build %s image: %v", repo, b.err)
	}
	return b.tag
}

// buildImage builds pkg statically into a folder that lives as long as the process (unless bin
// is that build already), and the image repo:<hash> from it unless the engine has it already.
func buildImage(ctx context.Context, cli *client.Client, pkg, bin, repo string, entrypoint []string) (string, string, error) {
	if bin == "" {
		dir, err := os.MkdirTemp("", "agentenv-image-")
		if err != nil {
			return "", "", err
		}
		bin = filepath.Join(dir, "agentenv")
		if err := testbin.Build(ctx, pkg, bin); err != nil {
			return "", "", err
		}
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return "", "", err
	}
	sum := sha256.Sum256(data)
	tag := repo + ":" + hex.EncodeToString(sum[:])[:16]
	if _, err := cli.ImageInspect(ctx, tag); err == nil {
		return tag, bin, nil
	} else if !cerrdefs.IsNotFound(err) {
		return "", "", fmt.Errorf("inspect %s: %w", tag, err)
	}
	err = images.Build(ctx, cli, images.Spec{
		Tag:        tag,
		Binary:     bin,
		Entrypoint: entrypoint,
		Labels:     map[string]string{"agentenv.test": repo},
	})
	return tag, bin, err
}

// Leftovers returns the containers, networks, volumes and images that carry every one of
// labels, as "container NAME", "network NAME", "volume NAME" and "image TAG", sorted. labels must not be empty: an
// empty filter would match everything on a shared engine.
func Leftovers(ctx context.Context, cli *client.Client, labels map[string]string) ([]string, error) {
	f, err := engine.LabelFilter(labels)
	if err != nil {
		return nil, fmt.Errorf("leftovers: %w", err)
	}
	l, err := engine.List(ctx, cli, f)
	if err != nil {
		return nil, fmt.Errorf("leftovers: %w", err)
	}
	var out []string
	for _, c := range l.Containers {
		name := c.ID
		if len(c.Names) > 0 {
			name = c.Names[0][1:]
		}
		out = append(out, "container "+name)
	}
	for _, n := range l.Networks {
		out = append(out, "network "+n.Name)
	}
	for _, v := range l.Volumes {
		out = append(out, "volume "+v.Name)
	}
	for _, im := range l.Images {
		name := im.ID
		if len(im.RepoTags) > 0 {
			name = im.RepoTags[0]
		}
		out = append(out, "image "+name)
	}
	sort.Strings(out)
	return out, nil
}

// CheckNoLeftovers registers a cleanup that fails tb if any container, network, volume or image
// with labels remains when tb ends, and then removes them so the next test starts clean. Call
// it before creating anything, so that its cleanup runs after the test's own.
func CheckNoLeftovers(tb testing.TB, cli *client.Client, labels map[string]string) {
	tb.Helper()
	if len(labels) == 0 {
		tb.Fatalf("CheckNoLeftovers: empty label filter")
	}
	tb.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		left, err := Leftovers(ctx, cli, labels)
		if err != nil {
			tb.Errorf("check leftovers: %v", err)
			return
		}
		if len(left) == 0 {
			return
		}
		tb.Errorf("left behind with labels %v: %v", labels, left)
		if err := Remove(ctx, cli, labels); err != nil {
			tb.Errorf("remove leftovers: %v", err)
		}
	})
}

// Remove force-removes the containers (with their anonymous volumes), then the networks, the
// volumes and the images that carry every one of labels. labels must not be empty.
func Remove(ctx context.Context, cli *client.Client, labels map[string]string) error {
	f, err := engine.LabelFilter(labels)
	if err != nil {
		return fmt.Errorf("remove: %w", err)
	}
	var errs []error
	if cs, err := cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f}); err != nil {
		errs = append(errs, err)
	} else {
		for _, c := range cs.Items {
			_, err := cli.ContainerRemove(ctx, c.ID, client.ContainerRemoveOptions{Force: true, RemoveVolumes: true})
			if err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	if ns, err := cli.NetworkList(ctx, client.NetworkListOptions{Filters: f}); err != nil {
		errs = append(errs, err)
	} else {
		for _, n := range ns.Items {
			if _, err := cli.NetworkRemove(ctx, n.ID, client.NetworkRemoveOptions{}); err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	if vs, err := cli.VolumeList(ctx, client.VolumeListOptions{Filters: f}); err != nil {
		errs = append(errs, err)
	} else {
		for _, v := range vs.Items {
			if _, err := cli.VolumeRemove(ctx, v.Name, client.VolumeRemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	if is, err := cli.ImageList(ctx, client.ImageListOptions{Filters: f}); err != nil {
		errs = append(errs, err)
	} else {
		for _, im := range is.Items {
			if _, err := cli.ImageRemove(ctx, im.ID, client.ImageRemoveOptions{Force: true, PruneChildren: true}); err != nil && !cerrdefs.IsNotFound(err) {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
