// Package images builds agentenv's own container images without a registry: a FROM scratch
// image holding one static binary at /agentenv, built through the Engine API's ImageBuild with
// a tar context (the legacy builder; no BuildKit is needed). The one image serves every Go
// component (the CLI, the gateway, the example servers), so it builds in about a second.
//
// Images of third-party software (PostgreSQL, adminer, Node-based MCP servers) are built by the
// shell scripts under images/debian from a locally made Debian base; see images/README.md.
//
// [Push] sends any image of the engine to a registry, for a bundle that carries its images.
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv/internal/engine"
	"github.com/agentenv/agentenv/internal/staticbin"
)

// RuntimeTag is the tag of the image built from the running agentenv binary (see BuildSelf).
const RuntimeTag = "agentenv:dev"

// hostCABundle is copied into every image when the host has it, so that HTTPS from inside a
// container trusts what the host trusts (these machines reach the network through a proxy with
// its own CA).
const hostCABundle = "/etc/ssl/certs/ca-certificates.crt"

// User is the user and group every image Build makes runs as: not root, so that a process that
// escapes its server owns nothing in the image (/agentenv and /etc are root's and read-only to
// it) and a container runtime that checks (Kubernetes runAsNonRoot) can prove it. 65532 is the
// "nonroot" id of distroless images. Only /tmp is writable to it.
const User = "65532:65532"

// Spec says what image to build.
type Spec struct {
	Tag        string            // image reference to tag the result with; required
	Binary     string            // path of a statically linked executable; required
	Entrypoint []string          // the image's entrypoint; none if empty
	Cmd        []string          // the image's command; default ["/agentenv"]
	Labels     map[string]string // image labels
}

// Build builds spec into a FROM scratch image holding spec.Binary at /agentenv, the host's CA
// bundle at /etc/ssl/certs/ca-certificates.crt if the host has one, and an empty /tmp (mode
// 1777), running as [User]. It returns once the image is tagged. An unreadable or dynamically linked binary is an
// error.
func Build(ctx context.Context, cli *client.Client, spec Spec) error {
	if spec.Tag == "" || spec.Binary == "" {
		return fmt.Errorf("images: build: tag and binary are required")
	}
	if err := staticbin.Check(spec.Binary); err != nil {
		return fmt.Errorf("images: build %s: %w", spec.Tag, err)
	}
	buildCtx, err := Context(spec, hostCABundle)
	if err != nil {
		return fmt.Errorf("images: build %s: %w", spec.Tag, err)
	}
	res, err := cli.ImageBuild(ctx, bytes.NewReader(buildCtx), client.ImageBuildOptions{
		Tags:        []string{spec.Tag},
		Labels:      spec.Labels,
		Remove:      true,
		ForceRemove: true,
		Version:     build.BuilderV1,
	})
	if err != nil {
		return fmt.Errorf("images: build %s: %w", spec.Tag, err)
	}
	defer res.Body.Close()
	if err := engine.ReadBuild(res.Body); err != nil {
		return fmt.Errorf("images: build %s: %w", spec.Tag, err)
	}
	return nil
}

// BuildSelf builds the running executable into an image tagged tag (RuntimeTag by convention).
// It fails with a hint to rebuild with CGO_ENABLED=0 when the executable is dynamically linked,
// since a FROM scratch image has no dynamic loader.
func BuildSelf(ctx context.Context, cli *client.Client, tag string) error {
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("images: build self: %w", err)
	}
	if err := staticbin.Check(exe); err != nil {
		return fmt.Errorf("images: build self: %w (build agentenv with CGO_ENABLED=0 to run it in a container)", err)
	}
	return Build(ctx, cli, Spec{Tag: tag, Binary: exe})
}

// Context returns the tar build context for spec: a Dockerfile and rootfs.tar, which the
// Dockerfile ADDs (the builder unpacks a local tar and keeps its modes, which COPY would not).
// caBundle is copied to /etc/ssl/certs/ca-certificates.crt if it exists; an empty caBundle
// copies none.
func Context(spec Spec, caBundle string) ([]byte, error) {
	bin, err := os.ReadFile(spec.Binary)
	if err != nil {
		return nil, err
	}
	var ca []byte
	if caBundle != "" {
		ca, err = os.ReadFile(caBundle)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	var rootfs bytes.Buffer
	tw := tar.NewWriter(&rootfs)
	entries := []tarEntry{
		{name: "agentenv", mode: 0o755, data: bin},
		{name: "tmp/", mode: 0o1777, dir: true},
	}
	if ca != nil {
		entries = append(entries,
			tarEntry{name: "etc/", mode: 0o755, dir: true},
			tarEntry{name: "etc/ssl/", mode: 0o755, dir: true},
			tarEntry{name: "etc/ssl/certs/", mode: 0o755, dir: true},
			tarEntry{name: "etc/ssl/certs/ca-certificates.crt", mode: 0o644, data: ca})
	}
	if err := writeTar(tw, entries); err != nil {
		return nil, err
	}

	// With no entrypoint, a container's command is its whole argv ("/agentenv serve kv"), as
	// env files and compose files write it.
	dockerfile := "FROM scratch\nADD rootfs.tar /\nUSER " + User + "\n"
	if len(spec.Entrypoint) > 0 {
		ep, err := json.Marshal(spec.Entrypoint)
		if err != nil {
			return nil, err
		}
		dockerfile += "ENTRYPOINT " + string(ep) + "\n"
	}
	cmd := spec.Cmd
	if len(cmd) == 0 && len(spec.Entrypoint) == 0 {
		cmd = []string{"/agentenv"}
	}
	if len(cmd) > 0 {
		c, err := json.Marshal(cmd)
		if err != nil {
			return nil, err
		}
		dockerfile += "CMD " + string(c) + "\n"
	}

	var out bytes.Buffer
	if err := writeTar(tar.NewWriter(&out), []tarEntry{
		{name: "Dockerfile", mode: 0o644, data: []byte(dockerfile)},
		{name: "rootfs.tar", mode: 0o644, data: rootfs.Bytes()},
	}); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

type tarEntry struct {
	name string
	mode int64
	dir  bool
	data []byte
}

// epoch is the fixed modification time of every entry, so that the same inputs make the same
// context (and the builder's cache hits).
var epoch = time.Unix(0, 0)

func writeTar(tw *tar.Writer, entries []tarEntry) error {
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Mode: e.mode, ModTime: epoch, Typeflag: tar.TypeReg, Size: int64(len(e.data))}
		if e.dir {
			h.Typeflag, h.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(e.data); err != nil {
			return err
		}
	}
	return tw.Close()
}
