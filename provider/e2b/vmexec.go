package e2b

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"strings"

	"github.com/agentenv/agentenv"
	"github.com/agentenv/agentenv/internal/cleanup"
	"github.com/agentenv/agentenv/internal/vmdocker"
)

// stdinChunk is how much base64 of a command's stdin one process request carries: under
// Linux's 128 KiB limit on one argument, and a multiple of 4 so each chunk decodes alone.
const stdinChunk = 96 << 10

var _ agentenv.VMExecer = (*Provider)(nil)

// ExecInVM implements agentenv.VMExecer with `docker exec` through the process API (as root).
// envd's Start request has no stdin, so stdin is written to a file in the VM first, in chunks
// of base64, and removed afterwards. A container that does not exist is ErrNotFound; a VM that
// is gone, ErrGone.
func (p *Provider) ExecInVM(ctx context.Context, vm, name string, argv []string, env map[string]string, stdin []byte) (agentenv.ExecResult, error) {
	if !recordName.MatchString(name) || len(argv) == 0 {
		return agentenv.ExecResult{}, fmt.Errorf("e2b: exec in %s of %s: want a container name and a command: %w", vm, name, agentenv.ErrInvalid)
	}
	d, err := p.detail(ctx, vm)
	if err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("e2b: exec in %s of %s: %w", vm, name, err)
	}
	run := func(ctx context.Context, script string) (agentenv.ExecResult, error) {
		return p.process(ctx, vm, d.EnvdAccessToken, processConfig{Cmd: "/bin/sh", Args: []string{"-c", script}}, "root", "", true)
	}
	script := vmdocker.ExecScript(name, argv, env, "")
	if stdin != nil {
		file := "/tmp/agentenv-stdin-" + rand.Text()
		defer func() {
			cctx, cancel := cleanup.Context(ctx, p.cfg.RequestTimeout)
			defer cancel()
			if _, err := run(cctx, "rm -f "+file); err != nil && !errors.Is(err, agentenv.ErrGone) {
				p.log.Warn("remove a command's stdin file in the vm; it goes with the vm", "vm", vm, "file", file, "err", err)
			}
		}()
		// The last chunk goes with the command, which saves a request for a small stdin.
		writes := append([]string{": >" + file}, vmdocker.AppendScripts(file, stdin, stdinChunk)...)
		for _, w := range writes[:len(writes)-1] {
			res, err := run(ctx, w)
			if err == nil && res.ExitCode != 0 {
				err = fmt.Errorf("write stdin: exit %d: %s", res.ExitCode, strings.TrimSpace(string(res.Stderr)))
			}
			if err != nil {
				return agentenv.ExecResult{}, fmt.Errorf("e2b: exec in %s of %s: %w", vm, name, err)
			}
		}
		script = writes[len(writes)-1] + " && " + vmdocker.ExecScript(name, argv, env, file)
	}
	res, err := run(ctx, script)
	if err != nil {
		return agentenv.ExecResult{}, fmt.Errorf("e2b: exec in %s of %s: %w", vm, name, err)
	}
	if res.ExitCode != 0 && vmdocker.NoSuchContainer(res.Stderr) {
		return res, fmt.Errorf("e2b: exec in %s: no container %s: %w", vm, name, agentenv.ErrNotFound)
	}
	return res, nil
}
