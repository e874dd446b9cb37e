package vmdocker

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"strings"
	"time"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/ctxerr"
	"github.com/agentenv/agentenv/internal/registrylogin"
)

// PullBound bounds one pull of a pinned image by a VM's engine; past it the image is uploaded
// from this host instead.
const PullBound = 10 * time.Minute

// PullScript has the VM's engine pull ref unless it holds it already. With authFile (a file in
// the VM holding registrylogin.DockerConfig's JSON), the pull logs in with it, from a folder of its own that
// the script removes, the file with it, whatever the pull did; the engine's own configuration
// is never touched. Its exit code and stderr are docker pull's.
func PullScript(ref, authFile string) string {
	r := quote(ref)
	var b strings.Builder
	if authFile != "" {
		// The trap comes first, so that the credentials go even when the image is there.
		b.WriteString("d=$(mktemp -d) || exit $?\ntrap 'rm -rf \"$d\"' EXIT\n")
		b.WriteString("mv " + path(authFile) + " \"$d/config.json\" || exit $?\n")
	}
	b.WriteString("docker image inspect " + r + " >/dev/null 2>&1 && exit 0\n")
	if authFile != "" {
		b.WriteString("DOCKER_CONFIG=\"$d\" ")
	}
	b.WriteString("docker pull -q " + r + " >/dev/null")
	return b.String()
}

// PullPinned has the VM behind sh pull spec.Pinned (logging in with spec.PullAuth), bounded by
// PullBound, and returns the image to run and how it came: the pinned reference when the pull
// succeeds, else spec.Image, which Start then uploads from this host as without a pin, the
// note saying why. Only ctx's end is an error.
func PullPinned(ctx context.Context, sh Shell, spec agentenv.SandboxSpec) (image, note string, err error) {
	pctx, cancel := context.WithTimeout(ctx, PullBound)
	defer cancel()
	perr := func() error {
		authFile := ""
		if spec.PullAuth != nil {
			authFile = "/tmp/agentenv-auth-" + rand.Text() + ".json"
			if err := sh.Put(pctx, authFile, bytes.NewReader(registrylogin.DockerConfig(spec.Pinned, *spec.PullAuth))); err != nil {
				return fmt.Errorf("write the registry login: %w", err)
			}
		}
		res, err := sh.Run(pctx, PullScript(spec.Pinned, authFile))
		if err != nil {
			return ctxerr.Prefer(pctx, err)
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("docker pull exited %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
		}
		return nil
	}()
	if perr == nil {
		return spec.Pinned, "pulled " + spec.Pinned + " in the vm", nil
	}
	if err := ctx.Err(); err != nil {
		return "", "", err
	}
	return spec.Image, fmt.Sprintf("pull of %s failed (%v); uploading %s from this host", spec.Pinned, perr, spec.Image), nil
}
