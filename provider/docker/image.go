package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/buildctx"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/engine"
	"github.com/agentenv/agentenv/internal/filetar"
)

var _ agentenv.Imager = (*Provider)(nil)

// ImageRepo is the repository of the images CreateImage builds: each is tagged ImageRepo:ID,
// ID its record id.
const ImageRepo = "agentenv-image"

// CreateImage builds spec.Base with spec.Files added into the image ImageRepo:spec.Name,
// through the engine's (legacy) builder from a context made here: no registry is asked, the
// base must be on the engine. The labels come first in the Dockerfile, so that every image and
// intermediate container the build makes carries them: a build cut short leaves nothing that
// List does not find by its record. Its Sandbox.ID is spec.Name, which Terminate takes; its
// Image is the reference that runs it. A tag already there is ErrConflict and is left alone.
// With spec.Build set, it builds that Dockerfile instead (buildImage).
func (p *Provider) CreateImage(ctx context.Context, spec agentenv.ImageSpec) (agentenv.Sandbox, error) {
	if err := checkID(spec.Name); err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create image: %w", err)
	}
	if got := spec.Labels[agentenv.LabelRecord]; got != spec.Name {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create image %s: label %s=%q, want the record id: %w",
			spec.Name, agentenv.LabelRecord, got, agentenv.ErrInvalid)
	}
	ref := ImageRepo + ":" + spec.Name
	if _, err := p.cli.ImageInspect(ctx, ref); err == nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create image %s: %s exists already: %w", spec.Name, ref, agentenv.ErrConflict)
	} else if !cerrdefs.IsNotFound(err) {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create image %s: %w", spec.Name, engine.Kind(p.host, err))
	}
	if spec.Build != nil {
		return p.buildImage(ctx, spec, ref)
	}
	if _, err := p.cli.ImageInspect(ctx, spec.Base); err != nil {
		if cerrdefs.IsNotFound(err) {
			return agentenv.Sandbox{}, fmt.Errorf("docker: create image %s: base %s is not on the engine: %w", spec.Name, spec.Base, agentenv.ErrInvalid)
		}
		return agentenv.Sandbox{}, fmt.Errorf("docker: create image %s: base %s: %w", spec.Name, spec.Base, engine.Kind(p.host, err))
	}
	buildCtx, err := imageContext(spec)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: create image %s: %w: %w", spec.Name, err, agentenv.ErrInvalid)
	}
	res, err := p.cli.ImageBuild(ctx, bytes.NewReader(buildCtx), client.ImageBuildOptions{
		Tags: []string{ref}, NoCache: true, Remove: true, ForceRemove: true, Version: build.BuilderV1,
	})
	if err == nil {
		err = engine.ReadBuild(res.Body)
		res.Body.Close()
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		p.cleanup(ctx, spec.Name)
		return agentenv.Sandbox{}, fmt.Errorf("docker: create image %s: %w", spec.Name, engine.Kind(p.host, err))
	}
	p.log.Debug("image built", "record_id", spec.Name, "image", ref)
	return agentenv.Sandbox{
		ID: spec.Name, Name: spec.Name, Provider: p.cfg.Name, State: agentenv.SandboxRunning,
		Labels: spec.Labels, Endpoints: map[string]string{}, Created: time.Now(), Image: ref,
	}, nil
}

// buildTail is how many lines of a failed Dockerfile build's output its error carries.
const buildTail = 20

// buildImage builds spec.Build's Dockerfile into ref: its context packed with every FROM
// mapped through the base map and the record's labels set right after each, so that the image
// (and, with the legacy builder, every container and image of the build) is found by its
// record. BuildKit builds where the engine has it (Config.Builder): it makes no containers or
// intermediate images and keeps its layer cache, so a task's siblings share their base
// layers; the legacy builder builds without its cache, so nothing it makes is another
// record's. Each base image must be on the engine (none is pulled). On error or cancellation
// whatever the build left is removed; the error ends with the build's last lines of output.
func (p *Provider) buildImage(ctx context.Context, spec agentenv.ImageSpec, ref string) (agentenv.Sandbox, error) {
	b := *spec.Build
	bases, err := buildctx.Bases(b)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: build image %s: %w", spec.Name, err)
	}
	for _, base := range bases {
		if _, err := p.cli.ImageInspect(ctx, base); err != nil {
			if cerrdefs.IsNotFound(err) {
				return agentenv.Sandbox{}, fmt.Errorf("docker: build image %s: base image %s is not on the engine and no registry is asked: "+
					"load it, or map it to an image that is ([images] map = [\"%s=IMAGE\"], or --image-map %s=IMAGE): %w",
					spec.Name, base, base, base, agentenv.ErrInvalid)
			}
			return agentenv.Sandbox{}, fmt.Errorf("docker: build image %s: base %s: %w", spec.Name, base, engine.Kind(p.host, err))
		}
	}
	tarball, err := buildctx.Pack(b, spec.Labels)
	if err != nil {
		return agentenv.Sandbox{}, fmt.Errorf("docker: build image %s: %w", spec.Name, err)
	}
	df, _ := buildctx.Dockerfile(b) // Pack checked it
	args := make(map[string]*string, len(b.Args))
	for k, v := range b.Args {
		args[k] = &v
	}
	opts := client.ImageBuildOptions{Tags: []string{ref}, Dockerfile: df, BuildArgs: args, PullParent: false, Version: build.BuilderBuildKit}
	legacy := func() {
		opts.Version, opts.NoCache, opts.Remove, opts.ForceRemove = build.BuilderV1, true, true, true
	}
	if p.cfg.Builder == BuilderLegacy || p.noBuildKit.Load() {
		legacy()
	}
	res, err := p.cli.ImageBuild(ctx, bytes.NewReader(tarball), opts)
	if err != nil && opts.Version == build.BuilderBuildKit && p.cfg.Builder == "" && refusesBuildKit(err) {
		p.noBuildKit.Store(true)
		p.log.Info("the engine has no BuildKit: building with the legacy builder", "err", err)
		legacy()
		res, err = p.cli.ImageBuild(ctx, bytes.NewReader(tarball), opts)
	}
	if err == nil {
		err = engine.ReadBuildTail(res.Body, buildTail)
		res.Body.Close()
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		if ctx.Err() != nil {
			p.cleanupCancelledBuild(ctx, spec.Name)
		} else {
			p.cleanup(ctx, spec.Name)
		}
		return agentenv.Sandbox{}, fmt.Errorf("docker: build image %s from %s: %w", spec.Name, filepath.Join(b.Context, filepath.FromSlash(df)), engine.Kind(p.host, err))
	}
	p.log.Debug("image built", "record_id", spec.Name, "image", ref, "context", b.Context)
	return agentenv.Sandbox{
		ID: spec.Name, Name: spec.Name, Provider: p.cfg.Name, State: agentenv.SandboxRunning,
		Labels: spec.Labels, Endpoints: map[string]string{}, Created: time.Now(), Image: ref,
	}, nil
}

// cleanupCancelledBuild removes what a build of record id that was cancelled made, and goes on
// until two listings a second apart find nothing (bounded by cleanupBound): the engine stops a
// build only at its next step, and a layer it was committing when the request went away lands
// as an image after the first removal.
func (p *Provider) cleanupCancelledBuild(ctx context.Context, id string) {
	cctx, cancel := cleanup.Context(ctx, cleanupBound)
	defer cancel()
	for quiet := 0; quiet < 2; {
		if err := p.terminate(cctx, id); err != nil {
			p.log.Warn("remove after a cancelled build", "record_id", id, "err", err)
			return
		}
		select {
		case <-cctx.Done():
			p.log.Warn("remove after a cancelled build: the build did not settle", "record_id", id, "err", cctx.Err())
			return
		case <-time.After(time.Second):
		}
		if left, err := p.leftOf(cctx, id); err != nil || left > 0 {
			quiet = 0
			continue
		}
		quiet++
	}
}

// leftOf counts the containers and images that carry record id.
func (p *Provider) leftOf(ctx context.Context, id string) (int, error) {
	f := engine.IDFilter(id)
	cs, err := p.cli.ContainerList(ctx, client.ContainerListOptions{All: true, Filters: f})
	if err != nil {
		return 0, err
	}
	ims, err := p.cli.ImageList(ctx, client.ImageListOptions{Filters: f})
	if err != nil {
		return 0, err
	}
	return len(cs.Items) + len(ims.Items), nil
}

// refusesBuildKit reports whether err is an engine's refusal of a BuildKit build (an engine
// built without it, or a Windows one), not a failure of the build itself.
func refusesBuildKit(err error) bool {
	return cerrdefs.IsInvalidArgument(err) && strings.Contains(strings.ToLower(err.Error()), "buildkit")
}

// imageContext returns the build context of spec: a Dockerfile that labels spec.Base (one step)
// and adds files.tar, which holds spec.Files (modes as SandboxSpec.Files says).
func imageContext(spec agentenv.ImageSpec) ([]byte, error) {
	files, err := filetar.Pack("/", spec.Files)
	if err != nil {
		return nil, err
	}
	var df strings.Builder
	fmt.Fprintf(&df, "FROM %s\nLABEL", spec.Base)
	for _, k := range slices.Sorted(maps.Keys(spec.Labels)) {
		fmt.Fprintf(&df, " %s=%s", dockerfileQuote(k), dockerfileQuote(spec.Labels[k]))
	}
	df.WriteString("\nADD files.tar /\n")
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	for _, f := range []struct {
		name string
		data []byte
	}{{"Dockerfile", []byte(df.String())}, {"files.tar", files}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: 0o644, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// dockerfileQuote quotes s as one word of a Dockerfile LABEL: in double quotes, with the
// backslash, the quote and the dollar (which the builder would expand) escaped.
func dockerfileQuote(s string) string {
	return `"` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, `$`, `\$`).Replace(s) + `"`
}

// removeImages removes the images of a record, those that are no other's parent first (an
// image with a child cannot be removed), each forced and with its untagged parents; one that
// is already gone counts as removed.
func (p *Provider) removeImages(ctx context.Context, ids, parents []string) error {
	var errs []error
	for _, pass := range []bool{false, true} {
		for i, id := range ids {
			if slices.Contains(parents, id) != pass {
				continue
			}
			_, err := p.cli.ImageRemove(ctx, id, client.ImageRemoveOptions{Force: true, PruneChildren: true})
			if err != nil && !engine.IsGone(err) {
				errs = append(errs, fmt.Errorf("remove image %s: %w", short(ids[i]), err))
			}
		}
	}
	return errors.Join(errs...)
}

// short is an engine id without its algorithm, cut to 12 characters, for messages.
func short(id string) string {
	id = strings.TrimPrefix(id, "sha256:")
	return id[:min(12, len(id))]
}
