package dockervm

import (
	"bytes"
	"context"
	"fmt"
	"path/filepath"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/types/build"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/buildctx"
	"github.com/agentenv/agentenv/internal/ctxerr"
	"github.com/agentenv/agentenv/internal/engine"
)

// BuiltImage is the reference, in a VM's engine, of the image Create builds from
// SandboxSpec.Build; no other engine has it.
const BuiltImage = "agentenv-build:main"

// buildTail is how many lines of a failed build's output its error carries.
const buildTail = 20

// vmBuild is a build of SandboxSpec.Build made ready on this host before its VM exists.
type vmBuild struct {
	b       agentenv.Build
	bases   []string // the images it builds from, each on the host engine
	tarball []byte   // its context as buildctx.Pack packs it
	df      string   // its Dockerfile's path in the context
}

// prepareBuild checks spec.Build against the host engine and packs its context (every FROM
// through the base map, every stage labelled with spec.Labels), before anything is made: a
// context that cannot be read, or a base image the host engine lacks (none is pulled), is
// ErrInvalid.
func (p *Provider) prepareBuild(ctx context.Context, spec agentenv.SandboxSpec) (vmBuild, error) {
	b := *spec.Build
	bases, err := buildctx.Bases(b)
	if err != nil {
		return vmBuild{}, err
	}
	for _, base := range bases {
		if _, err := p.cli.ImageInspect(ctx, base); err != nil {
			if cerrdefs.IsNotFound(err) {
				return vmBuild{}, fmt.Errorf("base image %s is not on the host engine, which agentenv loads a vm's images from, and no registry is asked: "+
					"load it, or map it to an image that is ([images] map = [\"%s=IMAGE\"], or --image-map %s=IMAGE): %w",
					base, base, base, agentenv.ErrInvalid)
			}
			return vmBuild{}, fmt.Errorf("base %s: %w", base, engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
		}
	}
	tarball, err := buildctx.Pack(b, spec.Labels)
	if err != nil {
		return vmBuild{}, err
	}
	df, _ := buildctx.Dockerfile(b) // Pack checked it
	return vmBuild{b: b, bases: bases, tarball: tarball, df: df}, nil
}

// build builds vb in vm's engine as BuiltImage, through the inner engine's API (the
// dial-stdio client): the bases loaded from the host engine first where the VM lacks them
// (ensureImage), then the context sent to the VM's builder, BuildKit where the VM's engine
// has it, else the legacy builder. Bounded by ctx. Whatever the build makes (images,
// intermediate containers, BuildKit's cache) is in the VM's engine and goes with the VM; a
// failed build's error ends with its last lines of output.
func (p *Provider) build(ctx context.Context, vm string, vb vmBuild) (string, error) {
	in, err := p.inner(vm)
	if err != nil {
		return "", err
	}
	defer in.Close()
	for _, base := range vb.bases {
		if err := p.ensureImage(ctx, in, vm, base); err != nil {
			return "", fmt.Errorf("build: %w", err)
		}
	}
	args := make(map[string]*string, len(vb.b.Args))
	for k, v := range vb.b.Args {
		args[k] = &v
	}
	opts := client.ImageBuildOptions{Tags: []string{BuiltImage}, Dockerfile: vb.df, BuildArgs: args, Version: build.BuilderBuildKit}
	res, err := in.ImageBuild(ctx, bytes.NewReader(vb.tarball), opts)
	if err != nil && refusesBuildKit(err) && ctx.Err() == nil {
		p.log.Debug("the vm's engine has no BuildKit: building with the legacy builder", "record_id", vm, "err", err)
		opts.Version, opts.Remove, opts.ForceRemove = build.BuilderV1, true, true
		res, err = in.ImageBuild(ctx, bytes.NewReader(vb.tarball), opts)
	}
	if err == nil {
		err = engine.ReadBuildTail(res.Body, buildTail)
		res.Body.Close()
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return "", fmt.Errorf("build %s in the vm: %w", filepath.Join(vb.b.Context, filepath.FromSlash(vb.df)), engine.Kind(p.host, ctxerr.Prefer(ctx, err)))
	}
	p.log.Debug("image built in the vm", "record_id", vm, "builder", opts.Version)
	return BuiltImage, nil
}

// refusesBuildKit reports whether err is an engine's refusal of a BuildKit build (one built
// without it, or one that wants a session for it), not a failure of the build itself.
func refusesBuildKit(err error) bool {
	msg := strings.ToLower(err.Error())
	return (cerrdefs.IsInvalidArgument(err) || cerrdefs.IsNotImplemented(err)) && (strings.Contains(msg, "buildkit") || strings.Contains(msg, "session"))
}
