package vmdocker

import (
	"context"
	"fmt"
	"io"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv/internal/ctxerr"
)

// Upload supplies a VM with an image it lacks, the one way both VM-mode providers do: saved
// from this host's engine (host) and streamed by load, the provider's transport, into the VM,
// where load runs LoadScript. An image this host's engine lacks too, or cannot be asked about,
// is MissingImage (ErrInvalid) saying so, with hint; nothing is ever pulled from a registry.
// It is the package's one function that does I/O, through the clients it is given.
func Upload(ctx context.Context, host *client.Client, image string, load func(context.Context, io.Reader) error, hint string) error {
	if _, err := host.ImageInspect(ctx, image); err != nil {
		if err := ctx.Err(); err != nil {
			return err
		}
		if cerrdefs.IsNotFound(err) {
			return MissingImage(image, "nor on this host's Docker engine, which agentenv uploads images from; "+hint)
		}
		return fmt.Errorf("%w (this host's Docker engine, which agentenv uploads images from, does not answer: %v)", MissingImage(image, hint), err)
	}
	saved, err := host.ImageSave(ctx, []string{image})
	if err != nil {
		return fmt.Errorf("save %s on this host: %w", image, ctxerr.Prefer(ctx, err))
	}
	defer saved.Close()
	if err := load(ctx, saved); err != nil {
		return fmt.Errorf("load %s into the vm: %w", image, ctxerr.Prefer(ctx, err))
	}
	return nil
}
