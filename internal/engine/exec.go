package engine

import (
	"bytes"
	"context"
	"fmt"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/moby/moby/api/pkg/stdcopy"
	"github.com/moby/moby/client"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/ctxerr"
)

// Exec runs argv in container on the engine cli reaches (host names it in errors) and returns
// its exit code and output once it exits. A container that is not running is ErrGone. If ctx
// ends first, the output stream is closed and ctx's error returned; the process may run on.
func Exec(ctx context.Context, cli *client.Client, host, container string, argv []string) (agentenv.ExecResult, error) {
	created, err := cli.ExecCreate(ctx, container, client.ExecCreateOptions{AttachStdout: true, AttachStderr: true, Cmd: argv})
	if err != nil {
		return agentenv.ExecResult{}, RunErr(host, ctxerr.Prefer(ctx, err))
	}
	att, err := cli.ExecAttach(ctx, created.ID, client.ExecAttachOptions{})
	if err != nil {
		return agentenv.ExecResult{}, RunErr(host, ctxerr.Prefer(ctx, err))
	}
	defer att.Close()
	stop := context.AfterFunc(ctx, func() { att.Close() })
	defer stop()
	var stdout, stderr bytes.Buffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, att.Reader); err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("read output: %w", ctxerr.Prefer(ctx, err))
	}
	if err := ctx.Err(); err != nil {
		return agentenv.ExecResult{}, err
	}
	ins, err := cli.ExecInspect(ctx, created.ID, client.ExecInspectOptions{})
	if err != nil {
		return agentenv.ExecResult{}, Kind(host, err)
	}
	return agentenv.ExecResult{ExitCode: ins.ExitCode, Stdout: stdout.Bytes(), Stderr: stderr.Bytes()}, nil
}

// RunErr is Kind, with the engine's "container is not running" as ErrGone.
func RunErr(host string, err error) error {
	if cerrdefs.IsConflict(err) && strings.Contains(err.Error(), "not running") {
		return fmt.Errorf("%w: %w", agentenv.ErrGone, err)
	}
	return Kind(host, err)
}
