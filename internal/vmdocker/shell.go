package vmdocker

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/engine"
	"github.com/agentenv/agentenv/internal/filetar"
	"github.com/agentenv/agentenv/internal/shellquote"
)

// Shell is a VM's root shell, as a VM-mode provider (e2b, tensorlake) reaches it through its
// cloud's API.
type Shell interface {
	// Run runs script with /bin/sh -c as root in the VM until it exits or ctx ends; a VM that
	// is gone is agentenv.ErrGone.
	Run(ctx context.Context, script string) (agentenv.ExecResult, error)
	// Put writes what r reads to file in the VM.
	Put(ctx context.Context, file string, r io.Reader) error
}

// Prepare checks spec's ports and packs its files for Start (nil when it has none); a bad port
// or file is agentenv.ErrInvalid.
func Prepare(spec agentenv.SandboxSpec) ([]byte, error) {
	var archive []byte
	if len(spec.Files) > 0 {
		var err error
		if archive, err = filetar.Pack("/", spec.Files); err != nil {
			return nil, fmt.Errorf("files: %w: %w", err, agentenv.ErrInvalid)
		}
	}
	for _, port := range spec.Ports {
		if port <= 0 || port > 65535 {
			return nil, fmt.Errorf("port %d: want 1-65535: %w", port, agentenv.ErrInvalid)
		}
	}
	return archive, nil
}

// Images says where a VM gets an image it lacks.
type Images struct {
	// DockerHost is this host's Docker engine ("" for $DOCKER_HOST), whose images are uploaded.
	DockerHost string
	// Hint says, in a missing image's error, where the provider gets its images.
	Hint string
}

// UploadHint is the Hint of a provider that uploads images from this host and whose VMs boot
// from a configurable image: "PROVIDER uploads images from this host's Docker engine
// ($DOCKER_HOST), or build the WHAT (NAME) with the env's images".
func UploadHint(provider, what, name string) string {
	return fmt.Sprintf("%s uploads images from this host's Docker engine ($DOCKER_HOST), or build the %s (%s) with the env's images", provider, what, name)
}

// Start runs run in the VM behind sh, archive (Prepare's) first uploaded for the script to
// copy in and removed when it ends. A pinned image (run.Spec.Pinned) is pulled by the VM's
// engine first, within PullBound, logging in with run.Spec.PullAuth; when that pull fails,
// run.Spec.Image runs instead, and Started.ImageNote says which. An image the VM lacks is
// uploaded once from imgs.DockerHost and the script run again; what the script reports is
// checked with RunError and read with ParseRun. It does not remove a container that failed to
// start: the caller does. logger may be nil.
func Start(ctx context.Context, sh Shell, run Run, archive []byte, imgs Images, logger *slog.Logger) (Started, error) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	note := ""
	if run.Spec.Pinned != "" {
		image, how, err := PullPinned(ctx, sh, run.Spec)
		if err != nil {
			return Started{}, err
		}
		logger.Debug("pinned image", "image", run.Spec.Pinned, "how", how)
		run.Spec.Image, note = image, how
	}
	var res agentenv.ExecResult
	var err error
	for uploaded := false; ; uploaded = true {
		if res, err = runScript(ctx, sh, run, archive); err != nil || res.ExitCode != ExitNoImage || uploaded {
			break
		}
		if err = uploadImage(ctx, sh, run.Spec.Image, imgs, logger); err != nil {
			break
		}
	}
	if err == nil {
		err = RunError(run, res.ExitCode, res.Stderr, imgs.Hint)
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		return Started{}, err
	}
	st, err := ParseRun(string(res.Stdout), run)
	st.ImageNote = note
	return st, err
}

// runScript runs run's RunScript through sh, first uploading archive (nil for none) into the VM
// for it to copy in; the script removes the upload when it ends.
func runScript(ctx context.Context, sh Shell, run Run, archive []byte) (agentenv.ExecResult, error) {
	script := RunScript(run)
	if archive != nil {
		run.Files = "/tmp/agentenv-files-" + rand.Text() + ".tar"
		if err := sh.Put(ctx, run.Files, bytes.NewReader(archive)); err != nil {
			return agentenv.ExecResult{}, err
		}
		script = "trap " + shellquote.Join([]string{"rm -f " + shellquote.Join([]string{run.Files})}) + " EXIT\n" + RunScript(run)
	}
	return sh.Run(ctx, script)
}

// uploadImage supplies the VM with image from imgs.DockerHost's engine: the `docker save`
// archive streamed into a file in the VM, then `docker load`.
func uploadImage(ctx context.Context, sh Shell, image string, imgs Images, logger *slog.Logger) error {
	host, _, err := engine.Client(imgs.DockerHost)
	if err != nil {
		return fmt.Errorf("%w (%v)", MissingImage(image, imgs.Hint), err)
	}
	defer host.Close()
	start := time.Now()
	err = Upload(ctx, host, image, func(ctx context.Context, saved io.Reader) error {
		file := "/tmp/agentenv-image-" + rand.Text() + ".tar"
		if err := sh.Put(ctx, file, saved); err != nil {
			return err
		}
		res, err := sh.Run(ctx, LoadScript(file))
		if err == nil && res.ExitCode != 0 {
			err = fmt.Errorf("docker load exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
		}
		return err
	}, imgs.Hint)
	if err == nil {
		logger.Debug("image uploaded into the vm", "image", image, "took", time.Since(start))
	}
	return err
}

// Sandbox is the container st started from spec as provider's sandbox, with labels, each of
// spec's ports reached at url of its VM port.
func Sandbox(st Started, spec agentenv.SandboxSpec, provider string, labels map[string]string, url func(vmPort int) string) agentenv.Sandbox {
	sb := agentenv.Sandbox{ID: spec.Name, Name: spec.Name, Provider: provider, State: agentenv.SandboxRunning, Labels: labels,
		ImageNote: st.ImageNote}
	if !st.Running {
		sb.State, sb.ExitCode = agentenv.SandboxExited, st.ExitCode
	}
	for _, port := range spec.Ports {
		if sb.Endpoints == nil {
			sb.Endpoints = map[string]string{}
		}
		sb.Endpoints[strconv.Itoa(port)] = url(st.Ports[port])
	}
	return sb
}

// Remove force-removes container name from the VM behind sh with RemoveScript; a container
// that is absent, or a VM that is gone (agentenv.ErrGone), counts as removed.
func Remove(ctx context.Context, sh Shell, name string) error {
	res, err := sh.Run(ctx, RemoveScript(name))
	switch {
	case errors.Is(err, agentenv.ErrGone):
		return nil
	case err != nil:
		return err
	}
	return Removed(res.ExitCode, res.Stderr)
}
